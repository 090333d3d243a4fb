"""Calls the model made while a sideband was away, every frame of them lost: the relay learns of
each one the wire still names after the reconnect and answers it once (relay/engine/recovery.py);
the one no frame names stays unknown, as docs/guarantees.md says. Fake clock, the mock upstream
in-process, no sockets."""

from __future__ import annotations

import json
from typing import Any

from relay.dialects import get_dialect
from relay.engine import CallState, EngineConfig, recovery
from relay.engine.calls import CallEntry
from relay.engine.sequencer import META_CALLS
from relay.mock import ToolCall
from tests.support.engine import EngineDriver
from tests.support.local_mock import model_call
from tests.support.tools import get_weather_data

SIDECAR = EngineConfig(mode="sidecar", declare_tools=False, strict=True)


def sidecar() -> EngineDriver:
    h = EngineDriver([get_weather_data], config=SIDECAR)
    h.connect()
    h.upstream(h.mock.user_turn("what's the weather?"))
    return h


def weather(city: str) -> ToolCall:
    return model_call("get_weather", json.dumps({"city": city}))


def lost_while_away(h: EngineDriver, outputs: list[Any]) -> list[dict[str, Any]]:
    """The sideband drops, the model answers the caller meanwhile (every frame lost), and the
    sideband comes back; the function_call items the server holds now."""
    h.disconnect()
    h.mock.respond(outputs)   # what the server sent while nobody was attached: lost
    h.reconnect()
    return [item for item in h.mock.items if item["type"] == "function_call"]


def test_a_call_whose_every_frame_was_lost_is_asked_for_by_the_id_a_later_item_names_and_answered_once() -> None:
    h = sidecar()
    [lost] = lost_while_away(h, [weather("Paris")])
    assert h.engine.ledger.get(lost["call_id"]) is None and h.sent == []
    h.upstream(h.mock.user_turn("hello?"))   # its item names the lost one as the item before it
    assert [e["item_id"] for e in h.sent_of("conversation.item.retrieve")] == [lost["id"]]
    entry = h.engine.ledger.get(lost["call_id"])
    assert entry is not None and entry.state is CallState.RUNNING
    h.run_all()
    [output] = h.outputs
    assert output["item"]["call_id"] == lost["call_id"] and output["previous_item_id"] == lost["id"]
    assert "Paris" in output["item"]["output"]
    assert len(h.creates) == 1 and entry.state is CallState.ANSWERED
    # the item the relay asked for sits where the server has it, right before the one that named it
    order = h.engine.conversation.order
    assert order[order.index(lost["id"]) + 1] == output["item"]["id"]
    h.upstream(h.mock.user_turn("thanks"))
    assert len(h.sent_of("conversation.item.retrieve")) == 1 and len(h.outputs) == 1


def test_an_item_the_relay_knows_or_a_lost_call_cut_short_is_never_run() -> None:
    h = sidecar()
    h.respond(["Let me look."])
    h.upstream(h.mock.user_turn("and now?"))
    assert h.sent_of("conversation.item.retrieve") == []   # no gap: nothing is asked for
    h.disconnect()
    h.mock.respond([weather("Oslo")], finish=False, stop=lambda e: e["type"].endswith("arguments.delta"))
    h.mock.barge_in()   # the response is cut mid-arguments: its call's item ends incomplete
    h.reconnect()
    assert [item["status"] for item in h.mock.items if item["type"] == "function_call"] == ["incomplete"]
    h.upstream(h.mock.user_turn("hello?"))
    assert len(h.sent_of("conversation.item.retrieve")) == 1
    assert h.started == {} and h.outputs == [] and h.creates == []


def test_of_two_calls_lost_in_a_row_only_the_last_is_named_and_answered() -> None:
    """The window docs/guarantees.md names: each item names only the one before it."""
    h = sidecar()
    first, second = lost_while_away(h, [weather("Paris"), weather("Rome")])
    h.upstream(h.mock.user_turn("hello?"))
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == [second["call_id"]]
    assert h.engine.ledger.get(first["call_id"]) is None


def test_a_question_lost_with_a_second_drop_is_asked_again_and_its_call_answered_once() -> None:
    """The relay asked for a lost call's item, and the sideband dropped again before the answer
    came (the explorer's schedule: two reconnects in a row): the question went with the
    connection, so it is asked again on the next one, and the call is answered once."""
    h = sidecar()
    [lost] = lost_while_away(h, [weather("Paris")])
    h.deliver = False
    h.upstream(h.mock.user_turn("hello?"))
    assert [e["item_id"] for e in h.sent_of("conversation.item.retrieve")] == [lost["id"]]
    h.disconnect()
    h.undelivered.clear()   # the question was lost with the connection
    h.deliver = True
    h.reconnect()
    assert [e["item_id"] for e in h.sent_of("conversation.item.retrieve")] == [lost["id"]] * 2
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == [lost["call_id"]] and len(h.creates) == 1
    h.disconnect()
    h.reconnect()
    assert len(h.sent_of("conversation.item.retrieve")) == 2, "an answered question is not asked again"


def test_a_question_is_asked_on_each_new_connection_until_it_is_answered() -> None:
    """Three drops in a row, each taking the question with it (the explorer's schedule: three
    reconnects): the relay asks on each new connection, and the answer to the last is the one
    that comes; the call is answered once."""
    h = sidecar()
    [lost] = lost_while_away(h, [weather("Paris")])
    h.deliver = False
    h.upstream(h.mock.user_turn("hello?"))
    for _ in range(2):
        h.disconnect()
        h.undelivered.clear()
        h.reconnect()
    assert [e["item_id"] for e in h.sent_of("conversation.item.retrieve")] == [lost["id"]] * 3
    h.disconnect()
    h.undelivered.clear()
    h.deliver = True
    h.reconnect()
    h.run_all()
    assert len(h.sent_of("conversation.item.retrieve")) == 4
    assert [o["item"]["call_id"] for o in h.outputs] == [lost["call_id"]] and len(h.creates) == 1
    assert h.engine.lost.asked == {}


def test_a_response_whose_end_comes_after_the_reconnect_brings_the_call_it_never_saw() -> None:
    h = sidecar()
    events = h.mock.respond([weather("Paris")], finish=False)
    h.upstream(json.dumps(events[0]))   # response.created reached the relay; the rest was lost
    h.disconnect()
    h.reconnect()   # the response's end is taken for lost
    [done] = h.mock.finish_response()
    assert done["type"] == "response.done"
    h.upstream(json.dumps(done))
    [call] = [item for item in done["response"]["output"] if item["type"] == "function_call"]
    assert list(h.started) == [call["call_id"]]
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == [call["call_id"]] and len(h.creates) == 1


def test_a_call_first_seen_at_a_late_end_is_answered_once_and_spoken_with_the_first() -> None:
    """Call A was seen and answered when the sideband came back (its response's end taken for
    lost, its follow-up asked for and refused while the response ran); the response's late end
    lists call B too: B runs and is answered once, and A's follow-up, going again once B is
    answered, takes B with it: one create after both outputs, and none about A alone again."""
    h = sidecar()
    events = h.mock.respond([weather("Paris"), weather("Rome")], finish=False)
    a_id, b_id = [e["item"]["call_id"] for e in events
                  if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"]
    cut = next(i for i, e in enumerate(events)
               if e["type"] == "response.output_item.added" and e["item"].get("call_id") == b_id)
    h.upstream(events[:cut])   # A's frames came; B's were lost
    assert list(h.started) == [a_id]
    h.disconnect()
    h.run_all()   # A finishes while the sideband is away
    h.reconnect()
    assert [o["item"]["call_id"] for o in h.outputs] == [a_id]
    [done] = h.mock.finish_response()
    h.upstream(json.dumps(done))
    assert list(h.started) == [a_id, b_id]
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == [a_id, b_id]
    a, b = h.engine.ledger.get(a_id), h.engine.ledger.get(b_id)
    assert a is not None and b is not None and a.state is b.state is CallState.ANSWERED
    # A's follow-up (refused while the response ran), then, after B's output, A's and B's as one
    assert [create["response"]["metadata"][META_CALLS] for create in h.creates] == [a_id, f"{a_id},{b_id}"]
    assert None is not a.follow_up_response_id == b.follow_up_response_id


def test_a_lost_call_whose_item_names_a_response_the_relay_never_saw_is_answered_once() -> None:
    """Foundry's items carry `response_id`: the retrieved call names its response, whose every
    frame was lost too. That response is taken as ended, as an unnamed one is; before, the relay
    waited for its `response.done`, which never comes, and the call was never answered."""
    h = EngineDriver([get_weather_data], config=SIDECAR, dialect=get_dialect("foundry"))
    h.connect()
    h.upstream(h.mock.user_turn("what's the weather?"))
    [lost] = lost_while_away(h, [weather("Paris")])
    assert lost.get("response_id") and lost["response_id"] not in h.engine.conversation.responses
    h.upstream(h.mock.user_turn("hello?"))
    assert [e["item_id"] for e in h.sent_of("conversation.item.retrieve")] == [lost["id"]]
    entry = h.engine.ledger.get(lost["call_id"])
    assert entry is not None
    h.run_all()
    [output] = h.outputs
    assert output["item"]["call_id"] == lost["call_id"] and "Paris" in output["item"]["output"]
    assert len(h.creates) == 1 and entry.state is CallState.ANSWERED


def cut_at_the_call(h: EngineDriver, stop: str) -> tuple[str, str]:
    """A response of one call whose events reached the relay up to the first `stop` event of its
    call item (the rest still to come), then the sideband drops: (its call id, its item id)."""
    events = h.mock.respond([weather("Paris")], finish=False, stop=lambda e: e["type"] == stop)
    h.upstream(events)
    [entry] = list(h.engine.ledger)
    assert entry.state in (CallState.ANNOUNCED, CallState.STREAMING)
    h.disconnect()
    assert entry.item_id is not None
    return entry.call_id, entry.item_id


def test_a_call_being_made_when_the_sideband_dropped_runs_once_when_its_rest_comes_after() -> None:
    h = sidecar()
    call_id, item_id = cut_at_the_call(h, "response.output_item.added")
    h.deliver = False   # the relay's question for the item is held: the item's own events answer first
    h.reconnect()
    assert [json.loads(frame)["item_id"] for frame in h.undelivered] == [item_id]
    h.upstream(h.mock.finish_response())   # the rest of the response, on the new connection
    assert list(h.started) == [call_id]
    h.run_all()
    h.deliver = True
    h.flush()   # the question's answer: the call is known complete, nothing more happens
    assert [o["item"]["call_id"] for o in h.outputs] == [call_id] and len(h.creates) == 1
    assert list(h.started) == [call_id] and h.engine.lost.asked == {}


def test_a_call_finished_while_the_sideband_was_away_is_asked_for_and_answered_once() -> None:
    h = sidecar()
    call_id, item_id = cut_at_the_call(h, "response.function_call_arguments.delta")
    h.mock.finish_response()   # the call and the response end while nobody is attached: lost
    h.reconnect()
    assert [e["item_id"] for e in h.sent_of("conversation.item.retrieve")] == [item_id]
    assert list(h.started) == [call_id]
    entry = h.engine.ledger.get(call_id)
    assert entry is not None and json.loads(entry.arguments) == {"city": "Paris"}   # the item's, not the deltas so far
    h.run_all()
    [output] = h.outputs
    assert output["item"]["call_id"] == call_id and "Paris" in output["item"]["output"]
    assert len(h.creates) == 1 and entry.state is CallState.ANSWERED


def test_a_call_cut_short_while_the_sideband_was_away_is_never_run() -> None:
    h = sidecar()
    call_id, item_id = cut_at_the_call(h, "response.function_call_arguments.delta")
    h.mock.barge_in()   # the caller cuts the response mid-arguments, while nobody is attached
    h.reconnect()
    assert [e["item_id"] for e in h.sent_of("conversation.item.retrieve")] == [item_id]
    entry = h.engine.ledger.get(call_id)
    assert entry is not None and entry.state is CallState.SKIPPED
    assert h.started == {} and h.outputs == [] and h.creates == []


def test_a_question_for_a_call_being_made_is_asked_again_after_a_second_drop() -> None:
    h = sidecar()
    call_id, item_id = cut_at_the_call(h, "response.output_item.added")
    h.deliver = False
    h.reconnect()   # the question goes up, and is lost with the next drop
    h.undelivered.clear()
    h.disconnect()
    h.deliver = True
    h.mock.finish_response()   # lost too
    h.reconnect()
    assert [e["item_id"] for e in h.sent_of("conversation.item.retrieve")] == [item_id, item_id]
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == [call_id] and len(h.creates) == 1


def test_a_call_being_made_whose_item_the_server_will_not_give_is_skipped_and_its_batch_goes_on() -> None:
    h = sidecar()
    events = h.mock.respond([weather("Paris"), weather("Rome")], finish=False,
                            stop=lambda e: e["type"] == "response.function_call_arguments.delta"
                            and e["call_id"] != _first_call(h))
    h.upstream(events)   # Paris complete, Rome half made
    paris, rome = list(h.engine.ledger)
    h.disconnect()
    h.deliver = False   # the questions are held: the server refuses Rome's
    h.reconnect()
    question = next(json.loads(frame) for frame in h.undelivered if json.loads(frame)["item_id"] == rome.item_id)
    h.undelivered.clear()
    h.upstream({"type": "error", "event_id": "event_x", "error": {
        "type": "invalid_request_error", "code": "item_not_found", "message": "no such item",
        "param": None, "event_id": question["event_id"]}})
    assert rome.state is CallState.SKIPPED and h.engine.lost.asked == {}
    h.deliver = True
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == [paris.call_id] and len(h.creates) == 1
    assert list(h.started) == [paris.call_id]


def _first_call(h: EngineDriver) -> str:
    return next(item["call_id"] for item in h.mock.items if item["type"] == "function_call")


def test_a_call_being_made_with_no_question_left_to_ask_is_skipped_not_left_open(monkeypatch) -> None:
    monkeypatch.setattr(recovery, "MAX_ASKED", 0)
    h = sidecar()
    call_id, _ = cut_at_the_call(h, "response.output_item.added")
    h.mock.finish_response()   # lost
    h.reconnect()
    entry = h.engine.ledger.get(call_id)
    assert entry is not None and entry.state is CallState.SKIPPED
    assert h.sent_of("conversation.item.retrieve") == [] and h.started == {} and h.outputs == []


def half_made_pair(h: EngineDriver) -> tuple[Any, Any, float]:
    """Paris's call complete and Rome's half made when the sideband drops; the relay re-attaches
    and asks for Rome's item, a question the server never answers (held, then dropped), and
    Paris's handler finishes: (Paris's entry, Rome's, when the question went)."""
    events = h.mock.respond([weather("Paris"), weather("Rome")], finish=False,
                            stop=lambda e: e["type"] == "response.function_call_arguments.delta"
                            and e["call_id"] != _first_call(h))
    h.upstream(events)
    paris, rome = list(h.engine.ledger)
    h.disconnect()
    h.deliver = False
    h.reconnect()
    assert rome.item_id in [json.loads(frame)["item_id"] for frame in h.undelivered]
    h.undelivered.clear()
    asked_at = h.now
    h.deliver = True
    h.run_all()
    return paris, rome, asked_at


def test_a_call_being_made_whose_question_gets_no_answer_is_skipped_once_the_wait_is_over() -> None:
    h = sidecar()
    paris, rome, asked_at = half_made_pair(h)
    assert h.engine.next_deadline() == asked_at + recovery.ASK_WAIT
    h.advance(recovery.ASK_WAIT - 0.5)
    assert rome.state is CallState.STREAMING and h.creates == []   # the batch waits for Rome
    h.advance(0.5)
    assert rome.state is CallState.SKIPPED and "no answer" in (rome.skip_reason or "")
    assert [o["item"]["call_id"] for o in h.outputs] == [paris.call_id] and len(h.creates) == 1
    assert list(h.started) == [paris.call_id] and h.engine.lost.asked == {}
    assert h.engine.lost.deadline() is None   # (the create's own wait remains: the sequencer's)


def test_the_wait_for_an_unanswered_question_runs_only_while_connected_and_starts_again_when_asked_again() -> None:
    h = sidecar()
    paris, rome, _ = half_made_pair(h)
    h.advance(recovery.ASK_WAIT / 2)
    h.disconnect()
    assert h.engine.next_deadline() is None
    h.advance(recovery.ASK_WAIT)   # away longer than the wait: the question is not given up
    assert rome.state is CallState.STREAMING
    h.mock.finish_response()   # Rome's call is finished while nobody is attached: lost
    h.deliver = False
    h.reconnect()   # asked again: the server answers this time, a moment later
    assert [json.loads(frame)["item_id"] for frame in h.undelivered] == [rome.item_id]
    h.advance(recovery.ASK_WAIT - 0.5)
    assert rome.state is CallState.STREAMING
    h.deliver = True
    h.flush()
    h.run_all()
    assert rome.state is CallState.ANSWERED
    assert sorted(o["item"]["call_id"] for o in h.outputs) == sorted([paris.call_id, rome.call_id])
    assert len(h.creates) == 1 and h.engine.lost.deadline() is None


def mixed_batch(h: EngineDriver) -> CallEntry:
    """One response makes a call of the relay's (get_weather) and one of the client's (show_map):
    the client continues that batch (it answers its call and asks). The relay's entry."""
    h.respond([weather("Paris"), model_call("show_map", json.dumps({"city": "Paris"}))])
    [relay_call] = [entry for entry in h.engine.ledger if entry.relay_owned]
    return relay_call


def test_a_batch_the_client_continues_is_left_to_the_client_while_connected() -> None:
    h = sidecar()
    relay_call = mixed_batch(h)
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == [relay_call.call_id] and h.creates == []


def test_a_batch_the_client_was_to_continue_is_followed_up_by_the_relay_after_a_reconnect() -> None:
    """The sideband drops while the relay's handler runs; the client may have answered and asked
    meanwhile (a sidecar's client talks to the server directly), every frame of it lost: the one
    response about the batch may have come and gone before the relay's output was in. The relay
    asks for the follow-up itself once its output is in."""
    h = sidecar()
    relay_call = mixed_batch(h)
    h.disconnect()
    h.reconnect()
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == [relay_call.call_id]
    [create] = h.creates
    assert relay_call.call_id in create["response"]["metadata"][META_CALLS]


def test_a_batch_whose_output_was_in_before_the_drop_is_followed_up_after_it() -> None:
    h = sidecar()
    relay_call = mixed_batch(h)
    h.run_all()   # its output goes in; the client was to ask
    h.disconnect()
    h.reconnect()
    assert len(h.creates) == 1 and relay_call.call_id in h.creates[0]["response"]["metadata"][META_CALLS]


def test_a_lost_call_of_a_response_whose_batch_was_followed_up_gets_a_follow_up_of_its_own() -> None:
    """Foundry's retrieved item names its response: one the reconnect took as ended, whose batch
    (the call seen before the drop) already had its follow-up. The call learnt late goes in a batch
    of its own, with its own follow-up; before, it joined the finished batch and was answered with
    nothing said about it. Found by `relay explore` (a response of two relay calls, the sideband
    dropping before the second is complete)."""
    h = EngineDriver([get_weather_data], config=SIDECAR, dialect=get_dialect("foundry"))
    h.connect()
    h.upstream(h.mock.user_turn("what's the weather?"))
    h.upstream(h.mock.respond([weather("Paris"), weather("Rome")], finish=False,
                              stop=lambda e: e["type"] == "response.output_item.done"))
    [paris] = list(h.engine.ledger)
    h.disconnect()
    h.mock.finish_response()   # Rome's call and the response's end, while nobody is attached: lost
    h.reconnect()
    h.run_all()
    rome = next(entry for entry in h.engine.ledger if entry is not paris)
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == [paris.call_id, rome.call_id]
    assert [c["response"]["metadata"][META_CALLS] for c in h.creates] == [paris.call_id, rome.call_id]
