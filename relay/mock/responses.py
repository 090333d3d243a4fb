"""One model response as a sans-I/O stream of server events.

`ResponseRun.steps()` yields the events of a response in the order the real server sends them
(the OpenAI codec's typed events, written by the session's `Wire`),
and `Pause` markers where time should pass (real-time audio pacing, a scripted hold). It never
sleeps or touches a socket: the caller sends each event, honours each pause (waking early when the
run is cancelled or released), and the generator reads the run's state again on every step, so a
`response.cancel` that arrives mid-stream cuts the response where it is: the item being streamed is
closed with its `.done` events and status `incomplete`, later items are dropped, and `response.done`
says `cancelled`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from relay.dialects import openai_codec as codec
from relay.mock.conversation import Conversation
from relay.mock.mcp import PlannedApprovalRequest, PlannedMcpCall, approval_item, call_item, call_steps
from relay.mock.script import StreamOptions
from relay.mock.wire import Wire, new_call_id, new_id, obfuscation
from relay.tools.render import json_copy


@dataclass(frozen=True)
class Pause:
    """Let time pass before the next step: `seconds`, or None for "until released or cancelled"."""

    seconds: float | None


@dataclass(frozen=True)
class PlannedMessage:
    text: str


@dataclass(frozen=True)
class PlannedCall:
    name: str
    arguments: str
    call_id: str | None = None
    """The scripted call_id; None draws a random one."""
    hold_after: bool = False
    """The response waits after this call's item is done, until released."""


Planned = PlannedMessage | PlannedCall | PlannedMcpCall | PlannedApprovalRequest


def _chunks(text: str, count: int) -> list[str]:
    """Split into at most `count` non-empty pieces of near-equal length."""
    if not text:
        return []
    count = min(count, len(text))
    size, extra = divmod(len(text), count)
    pieces, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def _tokens(text: str) -> int:
    """A rough token count (four characters a token), enough for realistic-looking usage."""
    return max(1, len(text) // 4) if text else 0


@dataclass
class _Usage:
    input_text: int = 0
    input_audio: int = 0
    output_text: int = 0
    output_audio: int = 0

    def to_wire(self) -> dict[str, Any]:
        input_tokens = self.input_text + self.input_audio
        output_tokens = self.output_text + self.output_audio
        return {
            "total_tokens": input_tokens + output_tokens,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "input_token_details": {
                "text_tokens": self.input_text,
                "audio_tokens": self.input_audio,
                "image_tokens": 0,
                "cached_tokens": 0,
                "cached_tokens_details": {"text_tokens": 0, "audio_tokens": 0, "image_tokens": 0},
            },
            "output_token_details": {"text_tokens": self.output_text, "audio_tokens": self.output_audio},
        }


@dataclass(eq=False, repr=False)
class ResponseRun:
    """A response from `response.created` to `response.done`, and its record afterwards."""

    wire: Wire
    plan: list[Planned]
    options: StreamOptions
    conversation: Conversation | None
    """The conversation its items enter; None for an out-of-band response."""
    conversation_id: str | None
    modality: str
    """Either "audio" (audio deltas with a transcript) or "text"."""
    voice: str
    output_format: Any
    output_bytes_per_ms: int
    max_output_tokens: Any
    metadata: dict[str, str] | None
    input_tokens: tuple[int, int]
    """Text and audio tokens the response reads, for its usage."""
    request: dict[str, Any]
    """The `response` object of the `response.create` that started it ({} for the server's own)."""
    origin: str
    """Either "client" (a response.create) or "server" (VAD, a fault, `MockUpstream.start_response`)."""
    hold: bool = False
    """Wait after the first delta until released or cancelled."""
    hold_before_done: bool = False
    """Wait after the last output, before `response.done`, until released or cancelled."""
    pace_audio: bool = False
    id: str = field(default_factory=lambda: new_id("resp"))
    status: str = "in_progress"
    status_details: dict[str, Any] | None = None
    output: list[dict[str, Any]] = field(default_factory=list)
    audio_ms: dict[str, int] = field(default_factory=dict)
    """Item id -> milliseconds of audio streamed for it."""

    def __post_init__(self) -> None:
        self.pace_audio = self.pace_audio or self.options.pace_audio
        self._joining: list[dict[str, Any]] = []   # call items that join the conversation at the end
        self._usage = _Usage(input_text=self.input_tokens[0], input_audio=self.input_tokens[1])
        self._cancel_reason: str | None = None
        self._released = False
        self._hold_used = False

    def __repr__(self) -> str:
        return (
            f"ResponseRun(id={self.id!r}, status={self.status!r}, origin={self.origin!r}, outputs={len(self.output)})"
        )

    @property
    def out_of_band(self) -> bool:
        return self.conversation is None

    @property
    def active(self) -> bool:
        return self.status == "in_progress"

    def cancel(self, reason: str) -> bool:
        """Ask the stream to stop (`client_cancelled`, `turn_detected`); False when already over."""
        if not self.active or self._cancel_reason is not None:
            return False
        self._cancel_reason = reason
        return True

    def release(self) -> None:
        """Let a held response run to its end (past every hold point)."""
        self._released = True

    # -- the stream ----------------------------------------------------------------------------
    def _object(self, usage: dict[str, Any] | None) -> dict[str, Any]:
        return self.wire.response_object(
            response_id=self.id,
            status=self.status,
            status_details=self.status_details,
            output=self.output,   # copied as the event is written (`Wire.frame`)
            conversation_id=self.conversation_id,
            modality=self.modality,
            voice=self.voice,
            output_format=self.output_format,
            max_output_tokens=self.max_output_tokens,
            usage=usage,
            metadata=self.metadata,
        )

    def _hold_point(self) -> Iterator[Pause]:
        """Where a held response waits: after its first delta (or at once when it has none)."""
        if self.hold and not self._hold_used:
            self._hold_used = True
            yield from self._wait_for_release()

    def _wait_for_release(self) -> Iterator[Pause]:
        while not (self._released or self._cancel_reason):
            yield Pause(None)

    def steps(self) -> Iterator[dict[str, Any] | Pause]:
        if self.wire.quirks.pings:
            yield self.wire.ping()
        yield self.wire.frame(codec.ResponseCreated(response=self._object(None)))
        if self.wire.has_event(codec.RateLimitsUpdated):
            yield self.wire.frame(codec.RateLimitsUpdated(rate_limits=self._rate_limits()))
        if not self.plan:
            yield from self._hold_point()
        for output_index, planned in enumerate(self.plan):
            if self._cancel_reason:
                break
            if isinstance(planned, PlannedMessage):
                yield from self._message(output_index, planned.text)
            elif isinstance(planned, PlannedCall):
                yield from self._function_call(output_index, planned)
            else:
                yield from self._mcp_item(output_index, planned)
        if self.hold_before_done:
            yield from self._wait_for_release()
        if self._cancel_reason:
            self.status = "cancelled"
            self.status_details = {"type": "cancelled", "reason": self._cancel_reason}
        else:
            self.status = "completed"
        if self.conversation is not None:
            for item in self._joining:   # `Quirks.calls_join_at_done`, `calls="in_done"`
                self.conversation.insert(json_copy(item))
        yield self.wire.frame(codec.ResponseDone(response=self._object(self._usage.to_wire())))

    def _rate_limits(self) -> list[dict[str, Any]]:
        return [
            {"name": "requests", "limit": 10000, "remaining": 9999, "reset_seconds": 0.006},
            {"name": "tokens", "limit": 4000000, "remaining": 3995000, "reset_seconds": 0.075},
        ]

    def _open_item(self, output_index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
        self.output.append(item)
        yield self.wire.frame(codec.OutputItemAdded(response_id=self.id, output_index=output_index, item=item))
        if self.conversation is None:
            return
        quirks = self.wire.quirks
        call = item["type"] == codec.FUNCTION_CALL
        if call and quirks.calls_join_at_done:
            # announced where it will join: after the response's calls before it, else at the end
            previous = self._joining[-1]["id"] if self._joining else self.conversation.last_id()
            self._joining.append(item)
        else:
            previous = self.conversation.insert(json_copy(item))
        if call and quirks.call_added_twice:
            # the xAI quirk, off OpenAI's shape on purpose: the call's item says role "tool", twice
            added = self.wire.frame(codec.ItemAdded(previous_item_id=previous, item={**item, "role": "tool"}))
            yield added
            yield {**added, "event_id": new_id("event")}
            return
        yield self.wire.frame(codec.ItemAdded(previous_item_id=previous, item=item))

    def _close_item(self, output_index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if item["type"] in (codec.MESSAGE, codec.FUNCTION_CALL):   # MCP items have no status on the wire
            item["status"] = "incomplete" if self._cancel_reason else "completed"
        if self.conversation is not None:
            self.conversation.replace(json_copy(item))
            if self.wire.has_event(codec.ItemDone) and item not in self._joining:
                yield self.wire.frame(codec.ItemDone(previous_item_id=self.conversation.previous_id(item["id"]),
                                                     item=item))
        yield self.wire.frame(codec.OutputItemDone(response_id=self.id, output_index=output_index, item=item))

    def _message(self, output_index: int, text: str) -> Iterator[dict[str, Any] | Pause]:
        audio = self.modality == "audio"
        item = self.wire.item(id=new_id("item"), type=codec.MESSAGE, status="in_progress", role="assistant",
                              content=[])
        yield from self._open_item(output_index, item)
        where = {"response_id": self.id, "item_id": item["id"], "output_index": output_index, "content_index": 0}
        text_key = "transcript" if audio else "text"
        kind = "audio" if audio else "text"
        yield self.wire.frame(codec.ContentPartAdded(**where, part={"type": kind, text_key: ""}))

        size = self.options.text_chunk_chars
        text_deltas = [text[start : start + size] for start in range(0, len(text), size)]
        audio_count = self.options.audio_chunks if audio else 0
        chunk = base64.b64encode(bytes(self.options.audio_chunk_bytes)).decode("ascii")
        chunk_ms = self.options.audio_chunk_bytes / self.output_bytes_per_ms
        text_delta = codec.AudioTranscriptDelta if audio else codec.TextDelta
        sent_text, sent_audio = "", 0
        for step in range(max(len(text_deltas), audio_count)):
            if self._cancel_reason:
                break
            if step < len(text_deltas):
                sent_text += text_deltas[step]
                yield self.wire.frame(text_delta(**where, delta=text_deltas[step], obfuscation=obfuscation()))
                yield from self._hold_point()
            if step < audio_count and not self._cancel_reason:
                sent_audio += 1
                yield self.wire.frame(codec.AudioDelta(**where, delta=chunk))
                yield from self._hold_point()
            if step < audio_count and self.pace_audio and not self._cancel_reason:
                yield Pause(chunk_ms / 1000)

        if audio:
            self.audio_ms[item["id"]] = int(sent_audio * chunk_ms)
            self._usage.output_audio += int(sent_audio * chunk_ms) // 50
            yield self.wire.frame(codec.AudioDone(**where))
            yield self.wire.frame(codec.AudioTranscriptDone(**where, transcript=sent_text))
        else:
            yield self.wire.frame(codec.TextDone(**where, text=sent_text))
        self._usage.output_text += _tokens(sent_text)
        yield self.wire.frame(codec.ContentPartDone(**where, part={"type": kind, text_key: sent_text}))
        item["content"] = [{"type": self.wire.assistant_part_type(kind), text_key: sent_text}]
        yield from self._close_item(output_index, item)

    def _mcp_item(self, output_index: int, planned: PlannedMcpCall | PlannedApprovalRequest
                  ) -> Iterator[dict[str, Any] | Pause]:
        """The provider's own MCP call (its arguments and result events), or an approval request."""
        if isinstance(planned, PlannedApprovalRequest):
            item = approval_item(self.wire, planned)
            yield from self._open_item(output_index, item)
        else:
            item = call_item(self.wire, planned)
            yield from self._open_item(output_index, item)
            yield from call_steps(self.wire, self.id, output_index, planned, item)
        yield from self._close_item(output_index, item)

    def _function_call(self, output_index: int, planned: PlannedCall) -> Iterator[dict[str, Any] | Pause]:
        call_id = planned.call_id or new_call_id()
        extra = {"response_id": self.id, "created_at": int(self.wire.wall())} if self.wire.foundry else {}
        item = self.wire.item(
            id=new_id("item"),
            type=codec.FUNCTION_CALL,
            status="in_progress",
            name=planned.name,
            call_id=call_id,
            arguments="",
            **extra,
        )
        if self.wire.quirks.calls == "in_done":
            # the call comes only in response.done's output (reported of xAI): no event of its own
            item.update(status="completed", arguments=planned.arguments)
            self.output.append(item)
            self._joining.append(item)
            self._usage.output_text += _tokens(planned.arguments)
            if planned.hold_after:
                yield from self._wait_for_release()
            return
        yield from self._open_item(output_index, item)
        where = {"response_id": self.id, "item_id": item["id"], "output_index": output_index, "call_id": call_id}
        sent = ""
        for delta in _chunks(planned.arguments, self.options.argument_deltas):
            if self._cancel_reason:
                break
            sent += delta
            yield self.wire.frame(codec.FunctionCallArgumentsDelta(**where, delta=delta, obfuscation=obfuscation()))
            yield from self._hold_point()
        name = None if self.wire.beta else planned.name   # beta's `.done` has no name
        yield self.wire.frame(codec.FunctionCallArgumentsDone(**where, name=name, arguments=sent))
        self._usage.output_text += _tokens(sent)
        item["arguments"] = sent
        yield from self._close_item(output_index, item)
        if planned.hold_after:
            yield from self._wait_for_release()
