"""Voice-aware tool results in the engine: spoken messages and their precedence, fillers
(`on_start`, `on_delay`), scheduling, streaming tools and the interruption policies."""

from __future__ import annotations

import json

import pytest

from relay.engine import EngineConfig
from relay.engine.sequencer import say_instructions
from relay.tools import ToolResult, tool
from tests.support.engine import EngineDriver
from tests.support.local_mock import model_call


@tool(on_complete="Your order is on its way.", on_failure="Sorry, I could not place the order.")
def place_order(item: str) -> object:
    if item == "fail":
        raise RuntimeError("out of stock")
    if item == "custom":
        return ToolResult(result={"ok": True}, message="Done, and I added a free sample.")
    return {"ok": True}


@tool
def plain(x: int) -> int:
    return x * 2


@tool(on_start="One moment while I look that up.")
def with_start(x: int) -> int:
    return x


@tool(on_delay=(2000, "Still checking, thanks for waiting."))
def with_delay(x: int) -> int:
    return x


@tool(scheduling="interrupt")
def alarm(level: int) -> str:
    return "fire alarm"


@tool(scheduling="silent")
def note(text: str) -> str:
    return "noted"


@tool
async def prices(symbol: str):
    yield {"price": 1}
    yield {"price": 2}
    yield {"price": 3}


@tool(interruption="cancel")
def search_cancel(q: str) -> str:
    return "results"


@tool  # default: finish_silently
def search_silent(q: str) -> str:
    return "results"


@tool(interruption="finish_and_speak", on_delay=(1000, "Bear with me."))
def search_speak(q: str) -> str:
    return "results"


TOOLS = [place_order, plain, with_start, with_delay, alarm, note, prices, search_cancel, search_silent, search_speak]


def session() -> EngineDriver:
    h = EngineDriver(TOOLS, config=EngineConfig(mode="proxy", strict=True))
    h.connect()
    h.upstream(h.mock.user_turn("hi"))
    return h


def call(h: EngineDriver, name: str, arguments: dict, *, finish: bool = True) -> str:
    h.respond([model_call(name, json.dumps(arguments))], finish=finish)
    return h.call_ids()[-1]


def instructions_of(create: dict) -> str | None:
    return create["response"].get("instructions")


# ---- messages and precedence ------------------------------------------------------------------
@pytest.mark.parametrize("item, said", [
    ("custom", "Done, and I added a free sample."),   # the result's own message wins
    ("book", "Your order is on its way."),            # then the tool's on_complete
    ("fail", "Sorry, I could not place the order."),  # on_failure for a failed call
])
def test_message_precedence(item: str, said: str) -> None:
    h = session()
    call_id = call(h, "place_order", {"item": item})
    h.run_all()
    [create] = h.creates
    assert instructions_of(create) == say_instructions(said)
    assert "conversation" not in create["response"]  # spoken in the conversation
    assert h.engine.ledger.get(call_id).message == said


def test_without_any_message_the_model_answers_on_its_own() -> None:
    h = session()
    call(h, "plain", {"x": 2})
    h.run_all()
    [create] = h.creates
    assert instructions_of(create) is None


# ---- fillers ----------------------------------------------------------------------------------
def test_on_start_is_said_out_of_band_after_the_model_response_then_the_result() -> None:
    h = session()
    call_id = call(h, "with_start", {"x": 1}, finish=False)
    assert h.creates == []  # the model's response is still active
    h.upstream(h.mock.finish_response())
    [filler] = h.creates
    assert filler["response"]["conversation"] == "none" and filler["response"]["input"] == []
    assert instructions_of(filler) == say_instructions("One moment while I look that up.")
    assert filler["response"]["metadata"]["filler"] == "on_start"
    h.finish(call_id, 1)
    assert len(h.creates) == 2 and "conversation" not in h.creates[1]["response"]
    # the filler response ran to its end before the follow-up went out
    assert not h.mock.errors


def test_with_fillers_in_conversation_the_filler_joins_the_conversation() -> None:
    """`fillers_in_conversation` (serve's --fillers-in-conversation): the filler is said in the
    conversation, where a client that keeps what it hears has it too; the rest is as out of band."""
    h = EngineDriver(TOOLS, config=EngineConfig(mode="proxy", strict=True, fillers_in_conversation=True))
    h.connect()
    h.upstream(h.mock.user_turn("hi"))
    call_id = call(h, "with_start", {"x": 1}, finish=False)
    h.upstream(h.mock.finish_response())
    [filler] = h.creates
    assert filler["response"]["conversation"] == "auto" and filler["response"]["input"] == []
    assert instructions_of(filler) == say_instructions("One moment while I look that up.")
    h.finish(call_id, 1)
    assert len(h.creates) == 2 and "conversation" not in h.creates[1]["response"]
    assert not h.mock.errors


def test_on_start_is_dropped_when_the_result_is_already_in() -> None:
    h = session()
    call_id = call(h, "with_start", {"x": 1}, finish=False)
    h.finish(call_id, 1)
    h.upstream(h.mock.finish_response())
    [create] = h.creates
    assert "conversation" not in create["response"]


def test_on_delay_is_said_only_if_the_handler_outlives_the_delay() -> None:
    h = session()
    fast = call(h, "with_delay", {"x": 1})
    h.advance(1.0)
    h.finish(fast, 1)
    h.advance(5.0)
    assert [c["response"].get("conversation") for c in h.creates] == [None]

    h = session()
    slow = call(h, "with_delay", {"x": 1})
    h.advance(1.9)
    assert h.creates == []
    h.advance(0.2)
    [filler] = h.creates
    assert filler["response"]["metadata"]["filler"] == "on_delay"
    assert instructions_of(filler) == say_instructions("Still checking, thanks for waiting.")
    h.finish(slow, 1)
    assert len(h.creates) == 2


def test_on_delay_is_never_said_after_the_result() -> None:
    h = session()
    slow = call(h, "with_delay", {"x": 1})
    h.upstream(h.mock.user_turn("hello?"))
    h.respond(["Still here."], finish=False)  # a response is active when the delay passes
    h.advance(2.5)
    assert h.creates == []                    # the filler waits for the active response ...
    h.finish(slow, 1)                         # ... and the result comes first
    h.upstream(h.mock.finish_response())
    [create] = h.creates
    assert "conversation" not in create["response"]  # only the follow-up, no filler


# ---- scheduling -------------------------------------------------------------------------------
def test_interrupt_cancels_the_active_response_then_follows_up() -> None:
    h = session()
    call_id = call(h, "alarm", {"level": 3})
    h.upstream(h.mock.user_turn("tell me a story"))
    h.respond(["Once upon a time..."], finish=False)
    story = h.mock.active
    h.finish(call_id, None)
    [cancel] = h.sent_of("response.cancel")
    assert cancel["response_id"] == story.id
    assert len(h.creates) == 1 and story.status == "cancelled"
    assert h.sent.index(cancel) < h.sent.index(h.creates[0])


def test_when_idle_waits_and_does_not_cancel() -> None:
    h = session()
    call_id = call(h, "plain", {"x": 1})
    h.respond(["Talking."], finish=False)
    h.finish(call_id, 2)
    assert h.sent_of("response.cancel") == [] and h.creates == []
    h.upstream(h.mock.finish_response())
    assert len(h.creates) == 1


def test_silent_injects_without_a_response() -> None:
    h = session()
    call_id = call(h, "note", {"text": "x"})
    h.run_all()
    assert h.output_for(call_id)["output"] == "noted"
    assert h.creates == []


def test_result_scheduling_overrides_the_tool() -> None:
    @tool(scheduling="interrupt")
    def quiet() -> ToolResult:
        return ToolResult(result="ok", scheduling="silent")

    h = EngineDriver([quiet], config=EngineConfig(strict=True))
    h.connect()
    call(h, "quiet", {})
    h.run_all()
    assert len(h.outputs) == 1 and h.creates == []


# ---- streaming tools --------------------------------------------------------------------------
def test_a_streaming_tool_yielding_three_values() -> None:
    h = session()
    call_id = call(h, "prices", {"symbol": "ACME"})
    for n in (1, 2, 3):
        h.yield_value(call_id, {"price": n})
    h.end_stream(call_id)
    assert h.output_for(call_id)["output"] == '{"price":1}'
    updates = [e["item"] for e in h.sent_of("conversation.item.create") if e["item"]["type"] == "message"]
    assert [u["role"] for u in updates] == ["system", "system"]
    assert [u["content"][0]["text"] for u in updates] == ['update from prices: {"price":2}',
                                                         'update from prices: {"price":3}']
    sent_order = [e["item"].get("call_id") or e["item"]["content"][0]["text"]
                  for e in h.sent_of("conversation.item.create")]
    assert sent_order[0] == call_id
    assert len(h.creates) == 3  # the answer and each update are spoken about
    assert not h.mock.errors


def test_stream_values_before_response_done_are_injected_in_order_after_it() -> None:
    h = session()
    call_id = call(h, "prices", {"symbol": "ACME"}, finish=False)
    h.yield_value(call_id, {"price": 1})
    h.yield_value(call_id, {"price": 2})
    assert h.outputs == []
    h.upstream(h.mock.finish_response())
    creates = [e["item"] for e in h.sent_of("conversation.item.create")]
    assert creates[0]["type"] == "function_call_output" and creates[1]["role"] == "system"
    h.end_stream(call_id)
    assert len(h.outputs) == 1


# ---- interruption policies --------------------------------------------------------------------
def running_call(name: str) -> tuple[EngineDriver, str]:
    h = session()
    call_id = call(h, name, {"q": "flights"})
    return h, call_id


def test_barge_in_cancel_policy() -> None:
    h, call_id = running_call("search_cancel")
    h.upstream(h.mock.barge_in())
    assert [c.call_id for c in h.cancelled] == [call_id]
    output = h.output_for(call_id)
    assert json.loads(output["output"]) == {"error": "cancelled: the user interrupted"}
    assert output["status"] == "incomplete"
    assert h.creates == []
    h.finish(call_id, "late")  # ignored
    assert len(h.outputs) == 1


def test_barge_in_finish_silently_policy() -> None:
    h, call_id = running_call("search_silent")
    h.upstream(h.mock.barge_in())
    assert h.cancelled == []
    h.finish(call_id, "results")
    assert h.output_for(call_id)["output"] == "results"
    assert h.creates == []  # no follow-up: the user's next turn will carry it


def test_barge_in_finish_and_speak_policy() -> None:
    h, call_id = running_call("search_speak")
    h.upstream(h.mock.barge_in())
    h.finish(call_id, "results")
    assert len(h.outputs) == 1 and len(h.creates) == 1


def test_barge_in_while_a_filler_is_being_spoken() -> None:
    h, call_id = running_call("search_speak")
    h.mock.hold_responses = True
    h.advance(1.1)
    [filler] = h.creates
    filler_response = h.mock.active
    assert filler_response.conversation_id is None  # out-of-band, playing
    h.upstream(h.mock.barge_in())          # the user speaks over the filler ...
    h.client({"type": "response.cancel"})  # ... and the client stops it (VAD cuts no out-of-band response)
    assert filler_response.status == "cancelled"
    assert h.cancelled == []                 # finish_and_speak: the handler goes on
    h.mock.hold_responses = False
    h.finish(call_id, "results")
    assert len(h.outputs) == 1
    assert len(h.creates) == 2 and "conversation" not in h.creates[1]["response"]
    assert not h.mock.errors


def test_barge_in_cancels_a_queued_filler() -> None:
    h, call_id = running_call("search_speak")
    h.upstream(h.mock.user_turn("wait"))
    h.respond(["Sure."], finish=False)       # busy: the filler will have to wait
    h.advance(1.1)
    assert h.creates == []
    h.upstream(h.mock.barge_in())
    h.finish(call_id, "results")
    # the filler was dropped at the barge-in; only the follow-up goes out
    assert [c["response"].get("conversation") for c in h.creates] == [None]


def test_speech_started_after_the_call_started_counts_as_barge_in() -> None:
    h, call_id = running_call("search_cancel")
    h.upstream({"type": "input_audio_buffer.speech_started", "event_id": "e", "audio_start_ms": 5,
                "item_id": "item_x"})
    assert [c.call_id for c in h.cancelled] == [call_id]
