"""How a recorded session of each wire is read back for replay: which frames the engine under
test is fed, which of the relay's sends are compared and by what key (free of the ids the relay
chose), what part of each must match, and what the timeline shows of the upstream's frames.
`relay.offline.replay` runs the comparison; `relay.offline.sends.replay_sends` gives a side of it
its reader (one per tool flow: the item-based and turn-based flows' are here).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import msgspec

from relay.dialects import OpenAIFamily
from relay.dialects import openai_codec as wire
from relay.dialects import gemini_codec as gemini
from relay.dialects.gemini import first_key, media_frame, response_text
from relay.dialects.openai import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, MCP_APPROVAL_RESPONSE, MESSAGE
from relay.engine.sequencer import META_CALLS, META_EVENT, META_KIND
from relay.recording.format import CLIENT_TO_RELAY, RELAY_TO_UPSTREAM, Frame

Key = tuple[str, ...]
Sent = tuple[Key, dict[str, Any]]   # what a send is (its key), and the part compared
Answer = tuple[str, str, str]       # the call answered, the output's text, its status or kind
OUTPUT, ANSWER, UPDATE, APPROVAL, REQUEST = "output", "answer", "update", "approval", "request"
"""What a send is, a key's first part: an output of a call, one of a call's answers (Gemini), a
streaming tool's update, an MCP approval, a request for a response; else the send's event type."""


def history_limit_of(header: dict[str, Any] | None) -> int | None:
    """The history limit a recording's header names (`history_limit`: the engine's
    `--history-items`); None when it names none, or not a positive whole number."""
    limit = (header or {}).get("history_limit")
    return limit if type(limit) is int and limit > 0 else None


def clip(text: Any, width: int = 70) -> str:
    """`text` on one line, cut to `width` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def counted(count: int, noun: str) -> str:
    """`1 call`, `2 calls`, `0 calls`: a count with its noun in the right number."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def frame_text(frame: Frame) -> str | None:
    """A text frame as it crossed the socket; None for a binary one."""
    if frame.event is not None:
        return json.dumps(frame.event, ensure_ascii=False)
    return frame.raw


_JSON = msgspec.json.Decoder()


def json_object(frame: str | bytes) -> dict[str, Any] | None:
    """The frame's JSON object, or None. msgspec reads it (a timeline reads every frame of a
    session: at half of `json.loads`'s cost); what msgspec refuses (NaN, a lone surrogate, a
    number past a float's range, text that is not UTF-8) `json.loads` reads as it always did, so
    the result is `json.loads`'s in every case."""
    try:
        value = _JSON.decode(frame)
    except Exception:   # noqa: BLE001 - any refusal: json decides, as it did alone
        try:
            value = json.loads(frame)
        except (ValueError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


class ReplaySends:
    """One side of a replay's comparison for one wire (the recorded sends, or those of the relay
    under test): called with each frame sent upstream, it returns the comparable sends in it."""

    def __call__(self, event: dict[str, Any]) -> list[Sent]:
        raise NotImplementedError

    @staticmethod
    def describe(key: Key) -> str:
        """A send's key in words, for the report."""
        if key[0] == OUTPUT:
            return f"output of {key[1]}"
        if key[0] == ANSWER:
            return f"answer {int(key[2]) + 1} to {key[1]}"
        if key[0] == UPDATE:
            return "streaming update"
        if key[0] == APPROVAL:
            return f"MCP approval of {key[1]}"
        if key[0] == REQUEST:
            return f"{key[1].replace('_', '-')} response for {key[2] or 'no call'}"
        return key[0]

    @staticmethod
    def call_of(key: Key) -> str | None:
        """The call a send concerns: the one an output or an answer is for, the first of those a
        follow-up or a filler response is about; None for a send about no call."""
        if key[0] in (OUTPUT, ANSWER):
            return key[1]
        if key[0] == REQUEST:
            first = key[2].split(",")[0]
            return first if first not in ("", "None") else None
        return None

    @staticmethod
    def answer(key: Key, part: dict[str, Any]) -> Answer | None:
        """For a send that answers a call: the call, the answer's text, its status; else None."""
        return None

    @staticmethod
    def compared(part: dict[str, Any]) -> dict[str, Any]:
        """The part of a send that must match: ids the relay chose are left out."""
        return {k: v for k, v in part.items() if k not in ("event_id", "response_id")}

    def sent_event(self, frame: Frame) -> dict[str, Any] | None:
        """The event of a frame the relay sent upstream, when it may hold a send to compare."""
        return frame.event

    @staticmethod
    def provider_answer(event: dict[str, Any], number: int) -> list[str]:
        """The frames a provider answers a request for a response with (`event`, a send whose key
        is `response.create`), when the recording holds no answer to it; `number` makes its ids
        unique in the replay. Nothing on a wire without such requests."""
        return []

    def payload(self, frame: Frame) -> str | bytes | None:
        """What the engine under test is fed of a recorded frame (None: nothing)."""
        return frame_text(frame)

    def timeline(self, frame: Frame) -> list[str]:
        """What the timeline shows of an upstream frame."""
        return []


class OpenAISends(ReplaySends):
    """The OpenAI family, read through its codec. The relay's own sends are whole events, known by
    the event ids it chose (`<id_prefix>_e...`): its outputs, streaming updates, responses and
    session updates. Frames it forwarded from the client are the client's and are not compared
    (`id_prefix` None: a plain event log, in which the relay sent nothing)."""

    def __init__(self, dialect: OpenAIFamily, id_prefix: str | None) -> None:
        self.dialect = dialect
        self.id_prefix = id_prefix
        self._forwarded_only = dialect.upstream_passthrough | dialect.client_passthrough
        self._call_names: dict[str, str] = {}   # the calls announced, by call id
        self._calls_shown: set[str] = set()

    def __call__(self, event: dict[str, Any]) -> list[Sent]:
        key = self.key(event)
        return [] if key is None else [(key, event)]

    def key(self, event: dict[str, Any]) -> Key | None:
        """What a relay-originated frame is, independent of the ids the relay chose; None for a
        forwarded client frame."""
        typed = wire.event_of(event, self.dialect)
        known = not isinstance(typed, wire.Unknown)
        event_id = str((typed.event_id if known else event.get("event_id")) or "")
        ours = self.id_prefix is not None and event_id.startswith(f"{self.id_prefix}_e")
        if isinstance(typed, wire.ItemCreate):
            item = _dict(typed.item)
            if ours and item.get("type") == FUNCTION_CALL_OUTPUT:
                return (OUTPUT, str(item.get("call_id")))
            if ours and item.get("type") == MESSAGE:
                return (UPDATE,)
            if ours and item.get("type") == MCP_APPROVAL_RESPONSE:
                return (APPROVAL, str(item.get("approval_request_id")))
            return None
        if not ours:
            return None
        if isinstance(typed, wire.ResponseCreate):
            metadata = _dict(_dict(typed.response).get("metadata"))
            return (REQUEST, str(metadata.get(META_KIND)), str(metadata.get(META_CALLS)))
        return (wire.wire_type(typed) if known else str(event.get("type")),)

    def provider_answer(self, event: dict[str, Any], number: int) -> list[str]:
        """The response starts and ends at once (its created and done events), carrying the
        request's metadata as the provider's responses do, which is how the relay knows it for
        its own."""
        request = wire.event_of(event, self.dialect)
        asked = _dict(request.response) if isinstance(request, wire.ResponseCreate) else {}
        response = {"object": "realtime.response", "id": f"resp_replay{number}", "status": "in_progress",
                    "output": [], "metadata": asked.get("metadata")}
        return [wire.encode(wire.ResponseCreated(event_id=f"event_replay{number}a", response=response), self.dialect),
                wire.encode(wire.ResponseDone(event_id=f"event_replay{number}b",
                                              response={**response, "status": "completed"}), self.dialect)]

    def answer(self, key: Key, part: dict[str, Any]) -> Answer | None:
        """For an output: the call, the output's text and its status."""
        if key[0] != OUTPUT:
            return None
        typed = wire.event_of(part, self.dialect)
        item = _dict(typed.item) if isinstance(typed, wire.ItemCreate) else {}
        return key[1], str(item.get("output")), str(item.get("status"))

    def compared(self, event: dict[str, Any]) -> dict[str, Any]:
        typed = wire.event_of(event, self.dialect)
        if isinstance(typed, wire.ItemCreate):
            item = {k: v for k, v in _dict(typed.item).items() if k not in ("id", "created_at")}
            return {"type": wire.wire_type(typed), "item": item}
        if isinstance(typed, wire.ResponseCreate):
            response = dict(_dict(typed.response))
            metadata = {k: v for k, v in _dict(response.get("metadata")).items() if k != META_EVENT}
            response["metadata"] = metadata
            return {"type": wire.wire_type(typed), "response": response}
        return super().compared(event)

    def payload(self, frame: Frame) -> str | bytes | None:
        """Text frames, but those the engine would only forward, audio (replay has nobody to
        forward them to), told by the dialect's pass-through set without decoding them; binary
        frames are not part of this wire."""
        if frame.event is not None and frame.event.get("type") in self._forwarded_only:
            return None
        return frame_text(frame)

    def timeline(self, frame: Frame) -> list[str]:
        """What the timeline shows of an upstream frame: responses done, calls made. A call is
        shown once, on the first frame that completes it (its arguments done, or its item done),
        which is the frame on which the relay starts its handler."""
        typed = wire.event_of(frame.event, self.dialect)
        if isinstance(typed, wire.ResponseDone):
            response = _dict(typed.response)
            return [f"recv  {wire.wire_type(typed)} {response.get('id')} {response.get('status')}"]
        if isinstance(typed, wire.FunctionCallArgumentsDone):
            call_id, name, arguments = typed.call_id, typed.name, typed.arguments
        elif isinstance(typed, _ITEM_EVENTS) and _dict(typed.item).get("type") == FUNCTION_CALL:
            item = _dict(typed.item)
            call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        else:
            return []
        call_id = str(call_id)
        if isinstance(name, str):
            self._call_names.setdefault(call_id, name)
        if not isinstance(typed, _CALL_COMPLETE) or call_id in self._calls_shown:
            return []
        self._calls_shown.add(call_id)
        shown = "" if arguments is None else arguments
        return [f"recv  call {self._call_names.get(call_id)}({clip(shown)}) call_id={call_id}"]


_ITEM_EVENTS = (wire.ItemAdded, wire.ItemDone, wire.ItemRetrieved, wire.OutputItemAdded, wire.OutputItemDone)
"""The OpenAI family's events that carry an item."""
_CALL_COMPLETE = (wire.FunctionCallArgumentsDone, wire.ItemDone, wire.OutputItemDone)
"""The OpenAI family's events that complete a call, the first of which starts its handler."""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _members(*kinds: type[gemini.Message]) -> frozenset[str]:
    """The message members, in either spelling, of the Gemini messages `kinds`."""
    return frozenset(member for member, kind in gemini.MESSAGES.items() if kind in kinds)


_GEMINI_CALL_KEYS = _members(gemini.ToolCall, gemini.ToolCallCancellation)
_GEMINI_SENT_KEYS = _members(gemini.Setup, gemini.ToolResponse)
SETUP = gemini.Setup.MEMBER
"""A Gemini setup's key: the message's name."""


class GeminiSends(ReplaySends):
    """Gemini Live. The comparable parts of a frame sent upstream are the setup and each answer,
    numbered per call in the order sent (the n-th answer recorded meets the n-th replayed; a
    streaming tool answers several times). Gemini frames carry no ids the relay chose, so answers
    forwarded from the client are compared too; they come out the same as long as the client's
    frames do. The server's JSON comes in binary frames, fed as they were. Frames are read as the
    codec's messages (`relay.dialects.gemini_codec`); a part compared is the object as it came."""

    def __init__(self) -> None:
        self._answers: dict[str, int] = {}

    def __call__(self, event: dict[str, Any]) -> list[Sent]:
        messages = gemini.messages_of(event)
        for message in messages:
            if isinstance(message, gemini.Setup):
                return [((SETUP,), gemini.plain(message))]
        sent: list[Sent] = []
        for message in messages:
            if not isinstance(message, gemini.ToolResponse):
                continue
            for response in gemini.entries(message.function_responses, gemini.FunctionResponse):
                if isinstance(response.id, str):
                    count = self._answers.get(response.id, 0)
                    self._answers[response.id] = count + 1
                    sent.append((("answer", response.id, str(count)), gemini.plain(response)))
        return sent

    @staticmethod
    def answer(key: Key, part: dict[str, Any]) -> Answer | None:
        """For an answer: the call, the response as text, and whether more answers follow."""
        if key[0] != "answer":
            return None
        response = gemini.read(gemini.FunctionResponse, part)
        return key[1], response_text(gemini.given(response.response)), \
            "interim" if response.will_continue is True else "final"

    def sent_event(self, frame: Frame) -> dict[str, Any] | None:
        if frame.event is None and frame.binary is not None and first_key(frame.binary) in _GEMINI_SENT_KEYS:
            return json_object(frame.binary)   # a client's answer or setup, forwarded binary
        return frame.event

    def payload(self, frame: Frame) -> str | bytes | None:
        payload = frame.binary if frame.binary is not None else frame_text(frame)
        if payload is None or (frame.direction == CLIENT_TO_RELAY and media_frame(payload, "client") is not None):
            return None   # the client's audio: the engine would only forward it
        return payload

    def timeline(self, frame: Frame) -> list[str]:
        """Calls and cancellations; only those frames are decoded."""
        payload = frame.binary if frame.binary is not None else frame_text(frame)
        if payload is None or first_key(payload) not in _GEMINI_CALL_KEYS:
            return []
        calls: list[str] = []
        cancellations: list[str] = []
        for message in gemini.messages_of(json_object(payload)):
            if isinstance(message, gemini.ToolCall):
                for call in gemini.entries(message.function_calls, gemini.FunctionCall):
                    calls.append(f"recv  call {gemini.given(call.name)}({clip(json.dumps(gemini.given(call.args)))}) "
                                 f"call_id={gemini.given(call.id)}")
            elif isinstance(message, gemini.ToolCallCancellation) and isinstance(message.ids, list):
                cancellations.append(f"recv  cancellation of {', '.join(map(str, message.ids))}")
        return calls + cancellations


class Requests:
    """The relay's requests for a response (sends keyed `response.create`) against those of a
    recording: one beyond the number of its key the recording holds has no recorded answer
    coming. A request sent again keeps its event id and counts once."""

    def __init__(self, frames: list[Frame], recorded: ReplaySends) -> None:
        ids: dict[str, Key] = {}
        for frame in frames:
            event = recorded.sent_event(frame) if frame.direction == RELAY_TO_UPSTREAM else None
            for key, part in recorded(event) if event is not None else ():
                if key[0] == REQUEST:
                    ids[str(part.get("event_id"))] = key
        self._recorded = Counter(ids.values())
        self._sent: Counter[Key] = Counter()
        self._ids: set[str] = set()

    @property
    def sent(self) -> int:
        """How many requests the relay under test has sent (each once)."""
        return len(self._ids)

    def unanswered(self, key: Key, event: dict[str, Any]) -> bool:
        """Count a send; whether it is a new request that no recorded frame answers."""
        event_id = str(event.get("event_id"))
        if key[0] != REQUEST or event_id in self._ids:
            return False
        self._ids.add(event_id)
        self._sent[key] += 1
        return self._sent[key] > self._recorded[key]
