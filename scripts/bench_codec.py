#!/usr/bin/env python3
"""Typed-event benchmark (a benchmark, not a test): the cost of decoding the OpenAI Realtime wire's
JSON text frames into typed events, and of encoding the relay's commands back into frames, in three
representations, each as a ratio to plain `json.loads` / `json.dumps` of the same frames, measured
in the same run:

- msgspec: `Struct`s in one tagged union (the tag is `type`; the beta names are generated subclasses
  of their GA event's struct), decoded by one `msgspec.json.Decoder` straight from the frame text;
- dataclasses: `json.loads`, then the dataclass of the event's type (the family's table turns a beta
  name into its GA name) built from the dict, nested items and responses too;
- pydantic v2: a `TypeAdapter` over a discriminated union of models (`type` a `Literal` of the GA
  and beta names), `validate_json` on the frame text.

The three model the same closed set of events with the same field types (strings and numbers
optional, an item, a response and an error as nested types, what no consumer reads as `Any`); a
frame whose type is outside the set, or whose fields do not have the declared types (the recordings
hold some: `"[Object]"` for an object), is an `Unknown` that keeps the frame's text, in all three.

The frames: every line of the recordings in ../shared/recordings (real sessions, both
vocabularies) and the frames of a scripted session with the in-process mock (a spoken answer, a
tool call), audio deltas left out (they pass through undecoded). The commands: the relay's writes
(a `function_call_output` item, a follow-up `response.create` with metadata, `response.cancel`, a
`session.update` declaring tools), each built as the typed command and encoded to text.

Gemini Live's codec (relay/dialects/gemini_codec.py) is measured beside them, as it is: a frame
read by msgspec into plain objects and its message built as Structs in either spelling (`decode`),
a decoded frame into its message (`event_of`), and the relay's answer (`toolResponse`) and a
rewritten `toolCall` written back (`encode`), each against `json.loads` / `json.dumps` of the same
frames. The frames: a scripted session with the in-process Gemini mock (words, a call delivered
twice, answers, an interruption, `goAway`), both directions, media frames left out (they pass
undecoded), in camelCase (what the service and the SDK write) and again in snake_case, measured
apart; the script checks that each frame is written back as it came.

Usage: .venv/bin/python scripts/bench_codec.py [--repeat N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Union

import msgspec
import pydantic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from relay.dialects import gemini_codec  # noqa: E402
from relay.dialects.gemini import media_frame  # noqa: E402
from relay.dialects.openai import OPENAI, READ_AS_GA  # noqa: E402
from relay.mock import MockScript, Reply, Rule  # noqa: E402
from relay.mock import ToolCall as ScriptedCall  # noqa: E402
from relay.mock.faults import Faults  # noqa: E402
from relay.mock.gemini import GeminiMockSession  # noqa: E402
from relay.mock.quirks import Quirks  # noqa: E402
from relay.mock.requests import Emit  # noqa: E402
from tests.support.local_mock import LocalMock, model_call  # noqa: E402

# ---- the closed set: GA name -> (fields as name: type) -----------------------------------------------
S, I = str | None, int | None   # noqa: E741
EVENTS: dict[str, dict[str, Any]] = {}


def _events(names: tuple[str, ...], **shape: Any) -> None:
    for name in names:
        EVENTS[name] = shape


_events(("session.created", "session.updated"), session=Any)
_events(("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
         "input_audio_buffer.committed"), item_id=S, previous_item_id=S, audio_start_ms=I, audio_end_ms=I)
_events(("conversation.item.input_audio_transcription.completed",), item_id=S, content_index=I, transcript=S)
_events(("response.created", "response.done"), response="Response")
_events(("response.output_item.added", "response.output_item.done"), response_id=S, output_index=I, item="Item")
_events(("conversation.item.added", "conversation.item.done"),
        previous_item_id=S, item="Item")
_events(("response.function_call_arguments.delta", "response.function_call_arguments.done"),
        response_id=S, item_id=S, output_index=I, call_id=S, name=S, delta=S, arguments=S)
_events(("response.output_audio_transcript.delta", "response.output_audio_transcript.done",
         "response.output_text.delta", "response.output_text.done"),
        response_id=S, item_id=S, output_index=I, content_index=I, delta=S, transcript=S, text=S)
_events(("error",), error="ErrorDetail")
_events(("conversation.item.create",), previous_item_id=S, item="Item")
_events(("response.create",), response=Any)
_events(("response.cancel",), response_id=S)
_events(("session.update",), session=Any)
ITEM = dict(id=S, type=S, status=S, role=S, call_id=S, name=S, arguments=S, output=S, content=Any)
RESPONSE = dict(id=S, status=S, status_details=Any, output="list[Item] | None", metadata=Any, usage=Any)
ERROR = dict(type=S, code=S, message=S, param=S, event_id=S)
RENAMES = {other: ga for other, ga in READ_AS_GA.items() if ga in EVENTS}


# ---- (a) msgspec -------------------------------------------------------------------------------
class MItem(msgspec.Struct, omit_defaults=True):
    id: str | None = None
    type: str | None = None
    status: str | None = None
    role: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    content: Any = None


class MResponse(msgspec.Struct, omit_defaults=True):
    id: str | None = None
    status: str | None = None
    status_details: Any = None
    output: list[MItem] | None = None
    metadata: Any = None
    usage: Any = None


class MError(msgspec.Struct, omit_defaults=True):
    type: str | None = None
    code: str | None = None
    message: str | None = None
    param: str | None = None
    event_id: str | None = None


_M_NESTED = {"Item": MItem | None, "Response": MResponse | None, "ErrorDetail": MError | None}


def _m_type(kind: Any) -> Any:
    return _M_NESTED.get(kind, kind) if isinstance(kind, str) else kind


def _m_struct(name: str, shape: dict[str, Any], bases: tuple[type, ...] = ()) -> type:
    members = [("event_id", str | None, None)] + [(key, _m_type(kind), None) for key, kind in shape.items()]
    return msgspec.defstruct("M_" + name.replace(".", "_"), [] if bases else members, bases=bases or None,
                             tag_field="type", tag=name, omit_defaults=True, forbid_unknown_fields=False)


M_EVENTS = {name: _m_struct(name, shape) for name, shape in EVENTS.items()}
M_BETA = [_m_struct(beta, {}, (M_EVENTS[ga],)) for beta, ga in RENAMES.items()]
M_UNION = Union[tuple([*M_EVENTS.values(), *M_BETA])]   # noqa: UP007
M_DECODER = msgspec.json.Decoder(M_UNION)
M_BY_TAG = {cls.__struct_config__.tag: cls for cls in (*M_EVENTS.values(), *M_BETA)}
M_ENCODER = msgspec.json.Encoder()


@dataclass(slots=True)
class Unknown:
    """A frame outside the closed set, or not of the declared shape: kept as it came."""

    raw: str


def msgspec_decode(frame: str) -> Any:
    try:
        return M_DECODER.decode(frame)
    except msgspec.ValidationError:
        return Unknown(frame)


def msgspec_convert(data: dict[str, Any]) -> Any:
    """A decoded frame into its event: the struct of its type (`convert` over the whole union is
    slow: 15 times the struct's own, so the type picks the struct)."""
    cls = M_BY_TAG.get(data.get("type"))   # type: ignore[arg-type]
    if cls is None:
        return Unknown(json.dumps(data))
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError:
        return Unknown(json.dumps(data))


def msgspec_encode(command: Any) -> str:
    return M_ENCODER.encode(command).decode()


# ---- (b) dataclasses over json.loads -------------------------------------------------------------
class Invalid(Exception):
    """A value not of its field's declared type."""


def _d_field(kind: Any) -> Callable[[Any], Any]:
    """The converter of one declared field type."""
    if kind is Any:
        return lambda value: value
    if kind in ("Item", "Response", "ErrorDetail"):
        return lambda value: None if value is None else D_NESTED[kind].of(value)
    if kind == "list[Item] | None":
        return lambda value: None if value is None else [D_NESTED["Item"].of(v) for v in _checked(value, list)]
    expected = str if kind == S else int
    return lambda value: value if value is None or (type(value) is expected) else _invalid()


def _invalid() -> Any:
    raise Invalid


def _checked(value: Any, kind: type) -> Any:
    if not isinstance(value, kind):
        raise Invalid
    return value


def _d_class(name: str, shape: dict[str, Any], with_type: bool) -> type:
    spec = ({"type": S, "event_id": S} if with_type else {}) | shape
    converters = {key: _d_field(kind) for key, kind in spec.items()}
    cls = dataclass(slots=True)(type("D_" + name.replace(".", "_"), (), {
        "__annotations__": {key: Any for key in spec}, **{key: None for key in spec}}))

    def of(data: Any) -> Any:
        if not isinstance(data, dict):
            raise Invalid
        return cls(**{key: convert(data[key]) for key, convert in converters.items() if key in data})

    def to_dict(self: Any) -> dict[str, Any]:
        out = {}
        for each in fields(self):
            value = getattr(self, each.name)
            if isinstance(value, list) and value and hasattr(value[0], "to_dict"):
                out[each.name] = [member.to_dict() for member in value]
            elif value is not None:
                out[each.name] = value.to_dict() if hasattr(value, "to_dict") else value
        return out

    cls.of = staticmethod(of)
    cls.to_dict = to_dict
    return cls


D_NESTED = {"Item": _d_class("Item", ITEM, False), "Response": _d_class("Response", RESPONSE, False),
            "ErrorDetail": _d_class("Error", ERROR, False)}
D_EVENTS = {name: _d_class(name, shape, True) for name, shape in EVENTS.items()}


def dataclass_decode(frame: str) -> Any:
    data = json.loads(frame)
    kind = data.get("type") if isinstance(data, dict) else None
    cls = D_EVENTS.get(RENAMES.get(kind, kind)) if isinstance(kind, str) else None
    if cls is None:
        return Unknown(frame)
    try:
        return cls.of(data)
    except Invalid:
        return Unknown(frame)


def dataclass_convert(data: dict[str, Any]) -> Any:
    kind = data.get("type")
    cls = D_EVENTS.get(RENAMES.get(kind, kind)) if isinstance(kind, str) else None
    if cls is None:
        return Unknown(json.dumps(data))
    try:
        return cls.of(data)
    except Invalid:
        return Unknown(json.dumps(data))


def dataclass_encode(command: Any) -> str:
    return json.dumps(command.to_dict(), separators=(",", ":"))


# ---- (c) pydantic v2 ------------------------------------------------------------------------------
_P_CONFIG = pydantic.ConfigDict(extra="ignore", strict=True)


class PItem(pydantic.BaseModel):
    model_config = _P_CONFIG
    id: str | None = None
    type: str | None = None
    status: str | None = None
    role: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    content: Any = None


class PResponse(pydantic.BaseModel):
    model_config = _P_CONFIG
    id: str | None = None
    status: str | None = None
    status_details: Any = None
    output: list[PItem] | None = None
    metadata: Any = None
    usage: Any = None


class PError(pydantic.BaseModel):
    model_config = _P_CONFIG
    type: str | None = None
    code: str | None = None
    message: str | None = None
    param: str | None = None
    event_id: str | None = None


_P_NESTED = {"Item": PItem | None, "Response": PResponse | None, "ErrorDetail": PError | None}


def _p_model(name: str, shape: dict[str, Any]) -> type[pydantic.BaseModel]:
    names = (name, *(beta for beta, ga in RENAMES.items() if ga == name))
    members: dict[str, Any] = {"type": (Literal[names], ...), "event_id": (str | None, None)}   # type: ignore[valid-type]
    for key, kind in shape.items():
        members[key] = (_P_NESTED.get(kind, kind) if isinstance(kind, str) else kind, None)
    return pydantic.create_model("P_" + name.replace(".", "_"), __config__=_P_CONFIG, **members)


P_EVENTS = {name: _p_model(name, shape) for name, shape in EVENTS.items()}
P_ADAPTER = pydantic.TypeAdapter(Annotated[Union[tuple(P_EVENTS.values())], pydantic.Field(discriminator="type")])  # noqa: UP007


def pydantic_decode(frame: str) -> Any:
    try:
        return P_ADAPTER.validate_json(frame)
    except pydantic.ValidationError:
        return Unknown(frame)


def pydantic_convert(data: dict[str, Any]) -> Any:
    try:
        return P_ADAPTER.validate_python(data)
    except pydantic.ValidationError:
        return Unknown(json.dumps(data))


def pydantic_encode(command: Any) -> str:
    return command.model_dump_json(exclude_none=True)


# ---- the frames and the commands ---------------------------------------------------------------------
def shared_recordings() -> Path:
    for candidate in (os.environ.get("RELAY_SHARED_DIR"), ROOT.parent / "shared", "/work/shared"):
        if candidate and (Path(candidate) / "recordings").is_dir():
            return Path(candidate) / "recordings"
    raise SystemExit("cannot find ../shared/recordings (set RELAY_SHARED_DIR)")


def frames() -> tuple[list[str], list[str]]:
    """(the recordings' lines, the mock's frames), audio deltas left out."""
    recorded = [line for path in sorted(shared_recordings().glob("*.jsonl"))
                for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    mock = LocalMock()
    events = (mock.connect() + mock.user_turn("what is the weather in Paris")
              + mock.respond(["Let me look that up.", model_call("weather", '{"city":"Paris"}')])
              + mock.user_turn("thanks") + mock.respond(["You are welcome."]))
    mocked = [json.dumps(event, separators=(",", ":")) for event in events
              if OPENAI.canonical_type(event.get("type", "")) != "response.output_audio.delta"]
    return recorded, mocked


def commands() -> list[tuple[dict[str, Any], Any, Any, Any]]:
    """The relay's writes: (the dict json.dumps writes, the msgspec, dataclass and pydantic command)."""
    output_item = {"type": "function_call_output", "call_id": "call_Abc123", "output": '{"temperature":21,"sky":"clear"}'}
    tools = [{"type": "function", "name": "weather", "description": "The weather in a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    writes = [
        {"type": "conversation.item.create", "event_id": "relay_e1", "previous_item_id": "item_C9", "item": output_item},
        {"type": "response.create", "event_id": "relay_e2",
         "response": {"metadata": {"relay": "follow_up", "relay_calls": "call_Abc123"}}},
        {"type": "response.cancel", "event_id": "relay_e3", "response_id": "resp_D4"},
        {"type": "session.update", "event_id": "relay_e4", "session": {"type": "realtime", "tools": tools}},
    ]
    built = []
    for write in writes:
        name = write["type"]
        msg = M_DECODER.decode(json.dumps(write))
        dc = D_EVENTS[name].of(write)
        pd = P_ADAPTER.validate_python(write)
        built.append((write, msg, dc, pd))
    return built


def as_data(event: Any) -> Any:
    """An event of any of the three as plain data, without the fields it does not have."""
    if isinstance(event, Unknown):
        return {"unknown": event.raw}
    if isinstance(event, msgspec.Struct):
        return msgspec.to_builtins(event)
    if isinstance(event, pydantic.BaseModel):
        return event.model_dump(exclude_none=True)
    return event.to_dict()


# ---- Gemini Live -------------------------------------------------------------------------------------
def _snake(data: Any) -> Any:
    if isinstance(data, dict):
        return {"".join("_" + c.lower() if c.isupper() else c for c in key): _snake(value) for key, value in data.items()}
    return [_snake(entry) for entry in data] if isinstance(data, list) else data


def gemini_frames() -> tuple[list[str], list[str]]:
    """Both directions of a scripted Gemini session with the in-process mock, (in camelCase, in
    snake_case), media frames (which pass undecoded) left out."""
    script = MockScript(rules=[Rule(match="weather", say="Let me look.",
                                    calls=[ScriptedCall(name="get_weather", arguments={"city": "Paris"})])],
                        after_outputs=Reply(say="It is sunny in Paris, 21 degrees."), default=Reply(say="Hello."))
    mock = GeminiMockSession(script, Faults(), quirks=Quirks(call_parts=True))
    client = [
        {"setup": {"model": "models/gemini-live-2.5-flash", "generationConfig": {"responseModalities": ["AUDIO"]},
                   "systemInstruction": {"parts": [{"text": "You are a helpful assistant."}]},
                   "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "The weather.",
                                                        "parametersJsonSchema": {"type": "object", "properties": {
                                                            "city": {"type": "string"}}}}]}],
                   "outputAudioTranscription": {}, "inputAudioTranscription": {}}},
        {"clientContent": {"turns": [{"role": "user", "parts": [{"text": "hello"}]}], "turnComplete": True}},
        {"realtimeInput": {"text": "what is the weather in Paris"}},
    ]
    sent: list[dict[str, Any]] = []
    for message in client:
        sent += [message, *(a.event for a in mock.handle(message, 0) if isinstance(a, Emit))]
    (call,) = mock.calls.values()
    answer = {"toolResponse": {"functionResponses": [{"id": call.id, "name": call.name,
                                                      "response": {"output": {"sky": "sunny", "temp_c": 21}}}]}}
    sent += [answer, *(a.event for a in mock.handle(answer, 0) if isinstance(a, Emit))]
    sent += [a.event for a in mock.interrupt() + mock.go_away("10s") if isinstance(a, Emit)]
    texts = [json.dumps(event, separators=(",", ":")) for event in sent]
    texts = [t for t in texts if media_frame(t, "upstream") is None and media_frame(t, "client") is None]
    return texts, [json.dumps(_snake(json.loads(t)), separators=(",", ":")) for t in texts]


def gemini_report(repeat: int) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for label, frames in zip(("camel_case", "snake_case"), gemini_frames()):
        readings = [gemini_codec.decode(f) for f in frames]
        assert not any(isinstance(r, gemini_codec.Unknown) for r in readings)
        assert [json.loads(gemini_codec.encode(r)) for r in readings] == [json.loads(f) for f in frames]
        data = [json.loads(f) for f in frames]
        baseline = per_item_ns(json.loads, frames, repeat * 10)
        report[label] = {"frames": len(frames), "json.loads_ns": round(baseline),
                         "decode_ratio": round(per_item_ns(gemini_codec.decode, frames, repeat * 10) / baseline, 2),
                         "event_of_ratio": round(per_item_ns(gemini_codec.event_of, data, repeat * 10) / baseline, 2)}
    answer = gemini_codec.ToolResponse(function_responses=[{"id": "function-call-1234567890123456789",
                                                            "name": "get_weather",
                                                            "response": {"output": {"sky": "sunny", "temp_c": 21}}}])
    narrowed = gemini_codec.event_of({"toolCall": {"functionCalls": [
        {"id": "function-call-1", "name": "get_weather", "args": {"city": "Paris"}},
        {"id": "function-call-2", "name": "open_door", "args": {"door": "front"}}]}})
    writes = [answer, msgspec.structs.replace(narrowed, function_calls=narrowed.function_calls[1:])]
    plain = [gemini_codec.frame_of(w) for w in writes]
    for write, expected in zip(writes, plain):
        assert json.loads(gemini_codec.encode(write)) == expected
    dumps = per_item_ns(lambda d: json.dumps(d, separators=(",", ":")), plain, repeat * 20)
    report["encode"] = {"json.dumps_ns": round(dumps),
                        "encode_ratio": round(per_item_ns(gemini_codec.encode, writes, repeat * 20) / dumps, 2)}
    return report


# ---- timing --------------------------------------------------------------------------------------
def per_item_ns(fn: Callable[[Any], Any], items: list[Any], repeat: int) -> float:
    """The fastest of `repeat` passes over `items`, per item."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for item in items:
            fn(item)
        best = min(best, time.perf_counter_ns() - start)
    return best / len(items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    recorded, mocked = frames()
    decoders = {"msgspec": msgspec_decode, "dataclasses": dataclass_decode, "pydantic": pydantic_decode}
    report: dict[str, Any] = {"frames": {"recordings": len(recorded), "mock": len(mocked)}}
    for frame in recorded + mocked:   # the three read the same frame into the same event, text or dict
        data = json.loads(frame)
        readings = [fn(frame) for fn in decoders.values()]
        if isinstance(data, dict):
            readings += [msgspec_convert(data), dataclass_convert(data), pydantic_convert(data)]
        seen = {json.dumps(as_data(r), sort_keys=True) for r in readings if not isinstance(r, Unknown)}
        assert len(seen) <= 1 and (not seen or not any(isinstance(r, Unknown) for r in readings)), frame
    known = [f for f in recorded if not isinstance(msgspec_decode(f), Unknown)]
    report["frames"]["recordings_known"] = len(known)
    for label, corpus in (("recordings", recorded), ("recordings_known", known), ("mock", mocked)):
        unknown = {name: sum(isinstance(fn(f), Unknown) for f in corpus) for name, fn in decoders.items()}
        baseline = per_item_ns(json.loads, corpus, args.repeat)
        costs = {name: per_item_ns(fn, corpus, args.repeat) for name, fn in decoders.items()}
        report[f"decode_{label}"] = {"json.loads_ns": round(baseline),
                                     **{f"{n}_ratio": round(c / baseline, 2) for n, c in costs.items()},
                                     "unknown": unknown}
    # what a recording's reader hands over: the frame already decoded (as ns, and against json.loads)
    known_data = [json.loads(f) for f in known]
    baseline = per_item_ns(json.loads, known, args.repeat)
    converters = {"msgspec": msgspec_convert, "dataclasses": dataclass_convert, "pydantic": pydantic_convert}
    report["from_dicts_recordings_known"] = {
        "json.loads_ns": round(baseline),
        **{f"{n}_ratio": round(per_item_ns(fn, known_data, args.repeat) / baseline, 2) for n, fn in converters.items()}}
    built = commands()
    for write, msg, dc, pd in built:
        assert json.loads(msgspec_encode(msg)) == write, msgspec_encode(msg)
        assert json.loads(dataclass_encode(dc)) == write, dataclass_encode(dc)
        assert json.loads(pydantic_encode(pd)) == write, pydantic_encode(pd)
    baseline = per_item_ns(lambda c: json.dumps(c[0], separators=(",", ":")), built, args.repeat * 20)
    report["encode"] = {
        "json.dumps_ns": round(baseline),
        "msgspec_ratio": round(per_item_ns(lambda c: msgspec_encode(c[1]), built, args.repeat * 20) / baseline, 2),
        "dataclasses_ratio": round(per_item_ns(lambda c: dataclass_encode(c[2]), built, args.repeat * 20) / baseline, 2),
        "pydantic_ratio": round(per_item_ns(lambda c: pydantic_encode(c[3]), built, args.repeat * 20) / baseline, 2),
    }
    report["gemini"] = gemini_report(args.repeat)
    report["versions"] = {"python": sys.version.split()[0], "msgspec": msgspec.__version__,
                          "pydantic": pydantic.VERSION}
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
