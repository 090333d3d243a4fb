"""Conversation state: order from previous_item_id, content, beta names, anomalies, peeking."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.dialects.openai import OPENAI, READ_AS_GA
from relay.dialects.peek import peek_type
from relay.engine import OpenAIEngine, EngineConfig, SendClient

canonical_type = OPENAI.canonical_type


def engine(mode: str = "replay") -> OpenAIEngine:
    return OpenAIEngine([], config=EngineConfig(mode=mode, strict=True))


def item(item_id: str, role: str = "user", text: str = "hi") -> dict:
    return {"id": item_id, "object": "realtime.item", "type": "message", "status": "completed",
            "role": role, "content": [{"type": "input_text", "text": text}]}


def added(item_id: str, previous: object, **fields) -> str:
    event = {"type": "conversation.item.added", "event_id": f"ev_{item_id}", "item": item(item_id, **fields)}
    if previous is not ...:
        event["previous_item_id"] = previous
    return json.dumps(event)


# ---- order: a property test against a reference list ------------------------------------------
operations = st.lists(
    st.tuples(st.sampled_from(["append", "root", "after", "delete", "truncate"]), st.integers(0, 50)),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_order_follows_previous_item_id_like_a_reference_list(ops) -> None:
    e = engine()
    reference: list[str] = []
    counter = 0
    for op, pick in ops:
        if op in ("append", "root", "after"):
            counter += 1
            new_id = f"item_{counter}"
            if op == "append":
                previous = reference[-1] if reference else None
                reference.append(new_id)
            elif op == "root":
                previous = None
                reference.insert(0, new_id)
            else:
                if not reference:
                    continue
                previous = reference[pick % len(reference)]
                reference.insert(reference.index(previous) + 1, new_id)
            e.receive_upstream(added(new_id, previous), 1.0)
        elif op == "delete" and reference:
            victim = reference.pop(pick % len(reference))
            e.receive_upstream(json.dumps({"type": "conversation.item.deleted", "event_id": "d",
                                           "item_id": victim}), 1.0)
        elif op == "truncate" and reference:
            target = reference[pick % len(reference)]
            e.receive_upstream(json.dumps({"type": "conversation.item.truncated", "event_id": "t",
                                           "item_id": target, "content_index": 0,
                                           "audio_end_ms": pick}), 1.0)
            assert e.conversation.items[target].audio_end_ms == pick
    assert e.conversation.order == reference
    assert not e.anomalies


def test_unknown_predecessor_is_an_anomaly_and_the_item_is_appended() -> None:
    e = engine()
    e.receive_upstream(added("a", None), 1.0)
    e.receive_upstream(added("b", "nowhere"), 1.0)
    assert e.conversation.order == ["a", "b"]
    assert "unknown item nowhere" in e.anomalies[0].message


def test_an_event_without_previous_item_id_appends() -> None:
    e = engine()
    e.receive_upstream(added("a", None), 1.0)
    e.receive_upstream(added("b", ...), 1.0)
    assert e.conversation.order == ["a", "b"]


def test_duplicate_added_does_not_move_the_item() -> None:
    e = engine()
    for frame in (added("a", None), added("b", "a"), added("a", "b")):
        e.receive_upstream(frame, 1.0)
    assert e.conversation.order == ["a", "b"]


def test_retrieval_and_deletion_of_unknown_items() -> None:
    e = engine()
    e.receive_upstream(json.dumps({"type": "conversation.item.deleted", "event_id": "x", "item_id": "ghost"}), 1.0)
    e.receive_upstream(added("a", None, text="first"), 1.0)
    e.receive_upstream(json.dumps({"type": "conversation.item.retrieved", "event_id": "r",
                                   "item": item("a", text="first, retrieved")}), 1.0)
    assert e.conversation.items["a"].retrieved
    assert e.conversation.items["a"].text() == "first, retrieved"
    assert "unknown item ghost" in e.anomalies[0].message


def test_transcripts_text_and_failures_are_tracked() -> None:
    e = engine()
    audio = {"id": "u1", "type": "message", "role": "user", "status": "completed",
             "content": [{"type": "input_audio", "transcript": None}]}
    e.receive_upstream(json.dumps({"type": "conversation.item.added", "previous_item_id": None, "item": audio}), 1.0)
    assert e.conversation.items["u1"].has_untranscribed_audio()
    for delta in ("Hel", "lo"):
        e.receive_upstream(json.dumps({"type": "conversation.item.input_audio_transcription.delta",
                                       "item_id": "u1", "content_index": 0, "delta": delta}), 1.0)
    assert e.conversation.items["u1"].text() == "Hello"
    e.receive_upstream(json.dumps({"type": "conversation.item.input_audio_transcription.completed",
                                   "item_id": "u1", "content_index": 0, "transcript": "Hello there"}), 1.0)
    assert e.conversation.items["u1"].text() == "Hello there"
    assert e.conversation.items["u1"].origin == "user_audio"
    e.receive_upstream(json.dumps({"type": "conversation.item.input_audio_transcription.failed",
                                   "item_id": "u1", "content_index": 0,
                                   "error": {"message": "audio unclear"}}), 1.0)
    assert e.conversation.items["u1"].transcription_failed == "audio unclear"


# ---- malformed input ----------------------------------------------------------------------------
def test_malformed_upstream_frames_are_anomalies() -> None:
    e = engine()
    for frame in ("not json", "[1,2]", '{"no":"type"}', b"\x00\x01", "[" * 100_000 + "]" * 100_000,
                  '{"type":"response.done"}', '{"type":"conversation.item.added","item":"x"}'):
        assert e.receive_upstream(frame, 1.0) is not None
    messages = " | ".join(a.message for a in e.anomalies)
    for fragment in ("not valid JSON", "JSON list", "no string `type`", "binary frame",
                     "response.done without a response id", "without an item"):
        assert fragment in messages


def test_malformed_client_frames_get_error_events_and_nothing_is_forwarded() -> None:
    e = engine(mode="proxy")
    cases = {"not json": "invalid_json", "[1]": "invalid_event", '{"x":1}': "missing_type",
             b"\x01": "binary_frame_not_supported", "{" * 100_000: "invalid_json"}
    for frame, code in cases.items():
        actions = e.receive_client(frame, 1.0)
        [error] = [json.loads(a.frame) for a in actions if isinstance(a, SendClient)]
        assert error["type"] == "error" and error["error"]["code"] == code
        assert not [a for a in actions if type(a).__name__ == "SendUpstream"]


def test_unknown_event_types_pass_through_untouched() -> None:
    e = engine(mode="proxy")
    frame = '{"type":"session.avatar.connecting","event_id":"e1","weird":{"nested":[1,2]}}'
    [action] = [a for a in e.receive_upstream(frame, 1.0) if isinstance(a, SendClient)]
    assert action.frame is frame


# ---- dialect normalisation ------------------------------------------------------------------------
def test_beta_names_map_onto_ga_and_frames_stay_as_received() -> None:
    assert canonical_type("response.audio_transcript.delta") == "response.output_audio_transcript.delta"
    assert canonical_type("output_audio_buffer.audio_started") == "output_audio_buffer.started"
    assert canonical_type("response.output_text.delta") == "response.output_text.delta"
    assert all(canonical_type(ga) == ga for ga in READ_AS_GA.values())
    e = engine(mode="proxy")
    created = json.dumps({"type": "conversation.item.created", "event_id": "e", "previous_item_id": None,
                          "item": item("b1")})
    [forward] = [a for a in e.receive_upstream(created, 1.0) if isinstance(a, SendClient)]
    assert forward.frame is created
    assert e.conversation.order == ["b1"]


def test_foundry_fields_on_items_are_kept() -> None:
    e = engine()
    call = {"id": "fc1", "type": "function_call", "status": "completed", "name": "f", "call_id": "c1",
            "arguments": "{}", "response_id": "resp_1", "created_at": 1700000000}
    output = {"id": "o1", "type": "function_call_output", "call_id": "c1", "output": "ok",
              "name": "f", "response_id": "resp_1", "created_at": 1700000001}
    e.receive_upstream(json.dumps({"type": "conversation.item.added", "previous_item_id": None, "item": call}), 1.0)
    e.receive_upstream(json.dumps({"type": "conversation.item.added", "previous_item_id": "fc1", "item": output}), 1.0)
    assert e.conversation.items["o1"].data["name"] == "f"
    assert e.conversation.items["fc1"].data["created_at"] == 1700000000


# ---- peeking ---------------------------------------------------------------------------------------
@given(st.dictionaries(st.text(max_size=8).filter(lambda k: k != "type"),
                       st.one_of(st.text(max_size=20), st.integers(), st.none(), st.booleans(),
                                 st.lists(st.integers(), max_size=3)), max_size=4),
       st.text(max_size=30), st.integers(0, 4))
def test_peek_finds_the_type_or_says_it_does_not_know(fields, type_value, position) -> None:
    keys = list(fields.items())
    keys.insert(min(position, len(keys)), ("type", type_value))
    frame = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in keys) + "}"
    peeked = peek_type(frame)
    assert peeked is None or peeked == type_value


def test_peek_on_audio_frames_and_odd_input() -> None:
    audio = '{"type":"response.output_audio.delta","event_id":"e","delta":"' + "A" * 2000 + '"}'
    assert peek_type(audio) == "response.output_audio.delta"
    assert peek_type('{"event_id":"e","response_id":"r","type":"response.audio.delta"}') == "response.audio.delta"
    assert peek_type(' { "event_id" : "e\\"x" , "n": 1, "type" : "x.y" }') == "x.y"
    assert peek_type('{"item":{"type":"message"},"type":"conversation.item.create"}') is None
    for odd in ("", "[]", "{", '{"type":1}', '{"a":"unterminated', "null"):
        assert peek_type(odd) is None
