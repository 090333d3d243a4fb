"""How a recorded session of each wire is read back for replay: which frames the engine under
test is fed, which of the relay's sends are compared and by what key (free of the ids the relay
chose), what part of each must match, and what the timeline shows of the upstream's frames.
`relay.offline.replay` runs the comparison; `replay_sends` gives a side of it its reader here.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from relay.dialects import Dialect, OpenAIFamily
from relay.dialects.gemini import field, first_key, key_of, media_frame, response_text
from relay.engine.sequencer import META_CALLS, META_EVENT, META_KIND
from relay.recording.format import CLIENT_TO_RELAY, RELAY_TO_UPSTREAM, Frame

Key = tuple[str, ...]
Sent = tuple[Key, dict[str, Any]]   # what a send is (its key), and the part compared
Answer = tuple[str, str, str]       # the call answered, the output's text, its status or kind



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


def json_object(frame: str | bytes) -> dict[str, Any] | None:
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
        if key[0] == "output":
            return f"output of {key[1]}"
        if key[0] == "answer":
            return f"answer {int(key[2]) + 1} to {key[1]}"
        if key[0] == "update":
            return "streaming update"
        if key[0] == "approval":
            return f"MCP approval of {key[1]}"
        if key[0] == "response.create":
            return f"{key[1].replace('_', '-')} response for {key[2] or 'no call'}"
        return key[0]

    @staticmethod
    def call_of(key: Key) -> str | None:
        """The call a send concerns: the one an output or an answer is for, the first of those a
        follow-up or a filler response is about; None for a send about no call."""
        if key[0] in ("output", "answer"):
            return key[1]
        if key[0] == "response.create":
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
    """The OpenAI family. The relay's own sends are whole events, known by the event ids it chose
    (`<id_prefix>_e...`): its outputs, streaming updates, responses and session updates. Frames it
    forwarded from the client are the client's and are not compared (`id_prefix` None: a plain
    event log, in which the relay sent nothing)."""

    def __init__(self, dialect: OpenAIFamily, id_prefix: str | None) -> None:
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
        event_type = event.get("type")
        event_id = str(event.get("event_id") or "")
        ours = self.id_prefix is not None and event_id.startswith(f"{self.id_prefix}_e")
        if event_type == "conversation.item.create":
            item = event.get("item") or {}
            if ours and item.get("type") == "function_call_output":
                return ("output", str(item.get("call_id")))
            if ours and item.get("type") == "message":
                return ("update",)
            if ours and item.get("type") == "mcp_approval_response":
                return ("approval", str(item.get("approval_request_id")))
            return None
        if not ours:
            return None
        if event_type == "response.create":
            metadata = (event.get("response") or {}).get("metadata") or {}
            return ("response.create", str(metadata.get(META_KIND)), str(metadata.get(META_CALLS)))
        return (str(event_type),)

    @staticmethod
    def provider_answer(event: dict[str, Any], number: int) -> list[str]:
        """The response starts and ends at once (response.created, response.done), carrying the
        request's metadata as the provider's responses do, which is how the relay knows it for
        its own."""
        request = event.get("response") if isinstance(event.get("response"), dict) else {}
        response = {"object": "realtime.response", "id": f"resp_replay{number}", "status": "in_progress",
                    "output": [], "metadata": request.get("metadata")}
        return [json.dumps({"type": "response.created", "event_id": f"event_replay{number}a", "response": response}),
                json.dumps({"type": "response.done", "event_id": f"event_replay{number}b",
                            "response": {**response, "status": "completed"}})]

    @staticmethod
    def answer(key: Key, part: dict[str, Any]) -> Answer | None:
        """For an output: the call, the output's text and its status."""
        if key[0] != "output":
            return None
        item = part.get("item") or {}
        return key[1], str(item.get("output")), str(item.get("status"))

    @staticmethod
    def compared(event: dict[str, Any]) -> dict[str, Any]:
        event_type = event.get("type")
        if event_type == "conversation.item.create":
            item = {k: v for k, v in (event.get("item") or {}).items() if k not in ("id", "created_at")}
            return {"type": event_type, "item": item}
        if event_type == "response.create":
            response = dict(event.get("response") or {})
            metadata = {k: v for k, v in (response.get("metadata") or {}).items() if k != META_EVENT}
            response["metadata"] = metadata
            return {"type": event_type, "response": response}
        return ReplaySends.compared(event)

    def payload(self, frame: Frame) -> str | bytes | None:
        """Text frames, but those the engine would only forward, audio (replay has nobody to
        forward them to); binary frames are not part of this wire."""
        if frame.event is not None and frame.event.get("type") in self._forwarded_only:
            return None
        return frame_text(frame)

    def timeline(self, frame: Frame) -> list[str]:
        """What the timeline shows of an upstream frame: responses done, calls made. A call is
        shown once, on the first frame that completes it (its arguments done, or its item done),
        which is the frame on which the relay starts its handler."""
        event = frame.event or {}
        kind = event.get("type")
        if kind == "response.done":
            response = event.get("response") or {}
            return [f"recv  response.done {response.get('id')} {response.get('status')}"]
        call = event if kind == "response.function_call_arguments.done" else event.get("item")
        if not isinstance(call, dict) or (call is not event and call.get("type") != "function_call"):
            return []
        call_id = str(call.get("call_id"))
        if isinstance(call.get("name"), str):
            self._call_names.setdefault(call_id, call["name"])
        if kind not in _CALL_COMPLETE or call_id in self._calls_shown:
            return []
        self._calls_shown.add(call_id)
        return [f"recv  call {self._call_names.get(call_id)}({clip(call.get('arguments', ''))}) call_id={call_id}"]


_CALL_COMPLETE = frozenset({"response.function_call_arguments.done", "conversation.item.done",
                            "response.output_item.done"})
"""The OpenAI family's events that complete a call, the first of which starts its handler."""

_GEMINI_CALL_KEYS = frozenset({"toolCall", "tool_call", "toolCallCancellation", "tool_call_cancellation"})
_GEMINI_SENT_KEYS = frozenset({"setup", "toolResponse", "tool_response"})


class GeminiSends(ReplaySends):
    """Gemini Live. The comparable parts of a frame sent upstream are the setup and each answer,
    numbered per call in the order sent (the n-th answer recorded meets the n-th replayed; a
    streaming tool answers several times). Gemini frames carry no ids the relay chose, so answers
    forwarded from the client are compared too; they come out the same as long as the client's
    frames do. The server's JSON comes in binary frames, fed as they were."""

    def __init__(self) -> None:
        self._answers: dict[str, int] = {}

    def __call__(self, event: dict[str, Any]) -> list[Sent]:
        setup_key = key_of(event, "setup")
        if setup_key is not None and isinstance(event[setup_key], dict):
            return [(("setup",), event[setup_key])]
        responses = field(field(event, "toolResponse"), "functionResponses")
        sent: list[Sent] = []
        for response in responses if isinstance(responses, list) else []:
            if isinstance(response, dict) and isinstance(response.get("id"), str):
                count = self._answers.get(response["id"], 0)
                self._answers[response["id"]] = count + 1
                sent.append((("answer", response["id"], str(count)), response))
        return sent

    @staticmethod
    def answer(key: Key, part: dict[str, Any]) -> Answer | None:
        """For an answer: the call, the response as text, and whether more answers follow."""
        if key[0] != "answer":
            return None
        return key[1], response_text(part.get("response")), \
            "interim" if field(part, "willContinue") is True else "final"

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
        message = json_object(payload)
        lines = []
        calls = field(field(message, "toolCall"), "functionCalls")
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict):
                lines.append(f"recv  call {call.get('name')}({clip(json.dumps(call.get('args')))}) "
                             f"call_id={call.get('id')}")
        ids = field(field(message, "toolCallCancellation"), "ids")
        if isinstance(ids, list):
            lines.append(f"recv  cancellation of {', '.join(map(str, ids))}")
        return lines


class Requests:
    """The relay's requests for a response (sends keyed `response.create`) against those of a
    recording: one beyond the number of its key the recording holds has no recorded answer
    coming. A request sent again keeps its event id and counts once."""

    def __init__(self, frames: list[Frame], recorded: ReplaySends) -> None:
        ids: dict[str, Key] = {}
        for frame in frames:
            event = recorded.sent_event(frame) if frame.direction == RELAY_TO_UPSTREAM else None
            for key, part in recorded(event) if event is not None else ():
                if key[0] == "response.create":
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
        if key[0] != "response.create" or event_id in self._ids:
            return False
        self._ids.add(event_id)
        self._sent[key] += 1
        return self._sent[key] > self._recorded[key]


def replay_sends(dialect: Dialect, id_prefix: str | None) -> ReplaySends:
    """What replay compares of the frames sent to `dialect`'s upstream, for a relay whose own
    event ids start with `id_prefix`: Gemini's setups and answers numbered per call, or the
    OpenAI family's events keyed free of the relay's ids."""
    if isinstance(dialect, OpenAIFamily):
        return OpenAISends(dialect, id_prefix)
    return GeminiSends()
