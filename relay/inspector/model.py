"""The inspector's model of a session: what a person looks at, built frame by frame.

`SessionModel` is fed the frames of a recording one at a time (`feed`) and can say, at any point,
what the session looks like (`snapshot`) or what changed since it last said (`delta`): the page
renders from the first, and the live view (relay/inspector/live/) streams the second. Both have
one shape:

    source      what was recorded: file, kind, dialect, mode, session id, tools
    duration    seconds from the first frame to the last (or the end line)
    frames      [[t, direction, text, binary], ...]: every frame but pure audio ones, audio payloads
                elided (`binary` is 1 for a binary WebSocket frame)
    events      {id: event}: responses, tool calls, the relay's own requests, anomalies, the words
                said; each with its lane, start `t0`, end `t1` (None while open), label and the
                indexes of its frames
    audio       {"caller": side, "assistant": side}: the page's audio encoding, rate, segments
                (where on the time axis each stretch of audio played), levels, and a note when
                there is nothing to play
    summary     duration, turns, responses, calls per tool (count, errors, p50/max handler ms),
                errors, anomalies

The model reads what the recording shows, without running an engine: which response the relay
asked for is in its `metadata` (`relay`: `follow_up` or `filler`, `relay_event`, `call_ids`), its
own frames carry event ids with the recording's `id_prefix`, and a call the client never saw has
no frame toward the client.

This module holds what every dialect shares: the events and the call book they are built into,
the audio tracks, and the views (snapshot, delta, summary). Reading each wire is its parser's job:
`relay.inspector.openai` (the OpenAI family) and `relay.inspector.gemini` (Gemini Live), which
build through the methods in "building" below.
"""

from __future__ import annotations

import base64
import bisect
import json
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

from relay.dialects.gemini import is_gemini_message
from relay.inspector.audio import DEFAULT_MAX_RATE, AudioFormat, SideAudio
from relay.recording.format import (
    CLIENT_TO_RELAY,
    RELAY_TO_CLIENT,
    RELAY_TO_UPSTREAM,
    UPSTREAM_TO_RELAY,
    Frame,
    Recording,
)

MODEL_VERSION = 1

# The format's directions under the names the wire parsers (relay.inspector.openai, .gemini)
# import them by: the one definition is relay.recording.format's.
CLIENT_IN, UPSTREAM_OUT = CLIENT_TO_RELAY, RELAY_TO_UPSTREAM
UPSTREAM_IN, CLIENT_OUT = UPSTREAM_TO_RELAY, RELAY_TO_CLIENT

LANES = (
    ("caller", "caller audio"),
    ("assistant", "assistant audio"),
    ("user_words", "user said"),
    ("assistant_words", "assistant said"),
    ("responses", "responses"),
    ("calls", "tool calls"),
    ("relay", "fillers and follow-ups"),
    ("hidden", "hidden calls"),
    ("anomalies", "anomalies"),
    ("divergences", "divergences"),
)

ELIDED_AUDIO = "<{} bytes of audio elided>"


def recording_dialect(header: dict[str, Any] | None, first_event: Any) -> str:
    """The recording's dialect: its header's, else `gemini` when its first event is a Gemini
    message, else `openai`. (The one guess in the inspector; the reader will know it soon.)"""
    named = (header or {}).get("dialect")
    if isinstance(named, str) and named:
        return named
    return "gemini" if is_gemini_message(first_event) else "openai"


@dataclass
class TrackedCall:
    """A tool call as the model follows it: its event, and the times its latencies come from."""

    event: dict[str, Any]
    ready: float | None = None
    output_t: float | None = None
    answer_response: str | None = None
    seen_by_client: bool = False


@dataclass
class TrackedResponse:
    """A response (an OpenAI response, a Gemini model turn): its event, when it first spoke, and
    the calls it made."""

    event: dict[str, Any]
    first_output: float | None = None
    call_ids: list[str] = field(default_factory=list)


class WireParser(Protocol):
    """Reads one dialect's frames into the model (see relay.inspector.openai and .gemini)."""

    def feed(self, frame: Frame, event: dict[str, Any], binary: bool) -> None: ...


class SessionModel:
    """Builds the inspector's model from frames fed in order. See the module docstring."""

    def __init__(
        self,
        *,
        name: str = "session",
        header: dict[str, Any] | None = None,
        kind: str = "relay",
        max_audio_rate: int = DEFAULT_MAX_RATE,
        embed_audio: bool = True,
        strict: bool = False,
    ) -> None:
        self.strict = strict
        self.header = header or {}
        self.kind = kind
        self.name = name
        self.dialect: str | None = None
        self.gemini = False
        self.id_prefix = self.header.get("id_prefix") if isinstance(self.header.get("id_prefix"), str) else None
        self.relay_tools = {t for t in self.header.get("tools") or () if isinstance(t, str)}
        self.record_audio = self.header.get("record_audio")
        self.embed_audio = embed_audio
        self.duration = 0.0
        self.frames: list[list[Any]] = []
        self.events: dict[str, dict[str, Any]] = {}
        self.warnings: list[str] = []
        self.end: dict[str, Any] | None = None
        self.audio_frames = 0
        self.frame_count = 0
        self.audio = {
            "caller": SideAudio("caller", max_rate=max_audio_rate, keep_data=embed_audio),
            "assistant": SideAudio("assistant", max_rate=max_audio_rate, keep_data=embed_audio),
        }
        self.caller_direction: str | None = None   # which way the caller's audio was seen first
        self.calls: dict[str, TrackedCall] = {}
        self.responses: dict[str, TrackedResponse] = {}
        self._parser: WireParser | None = None
        self._has_client = False
        self._unanswered_outputs: list[str] = []              # calls whose output awaits a response
        self._counters: dict[str, int] = {}
        self._dirty: set[str] = set()
        self._sent_frames = 0
        self._sent_audio: dict[str, tuple[int, int, int]] = {"caller": (0, 0, 0), "assistant": (0, 0, 0)}
        self._extra: dict[str, Any] = {}

    # ==== feeding ====================================================================
    def feed(self, frame: Frame) -> None:
        """Take the next frame of the session. A frame the model cannot make sense of becomes a
        warning (the page still opens) unless the model is `strict` (tests)."""
        try:
            self._feed(frame)
        except Exception as exc:
            if self.strict:
                raise
            self.warnings.append(f"line {frame.line_no}: the inspector could not read this frame "
                                 f"({type(exc).__name__}: {exc})")

    def _feed(self, frame: Frame) -> None:
        self.frame_count += 1
        t = frame.t
        if t > self.duration:
            self.duration = t
        event = frame.event
        binary = False
        if event is None and frame.binary is not None:
            event = _json_object(frame.binary)
            binary = event is not None
        if frame.direction in (CLIENT_IN, CLIENT_OUT):
            self._has_client = True
        if self.dialect is None and (event is not None or self.header):
            self.dialect = recording_dialect(self.header, event)
            self.gemini = self.dialect == "gemini"
        if event is None:
            index = self.store(frame, None)
            if frame.direction in (UPSTREAM_IN, CLIENT_IN):
                what = "text" if frame.raw is not None else "binary"
                source = "the upstream" if frame.direction == UPSTREAM_IN else "the client"
                self.anomaly(t, f"{source} sent a {what} frame that is not a JSON object",
                             source="upstream" if frame.direction == UPSTREAM_IN else "client",
                             frames=[index], error=False)
            return
        self._wire_parser().feed(frame, event, binary)

    def _wire_parser(self) -> WireParser:
        """The parser of the session's dialect, made on the first frame that is an event (the
        dialect is known by then)."""
        if self._parser is None:
            if self.gemini:
                from relay.inspector.gemini import GeminiParser

                self._parser = GeminiParser(self)
            else:
                from relay.inspector.openai import OpenAIParser

                self._parser = OpenAIParser(self)
        return self._parser

    def finish(self, end: dict[str, Any] | None, warnings: Iterable[str] = ()) -> None:
        """The recording is over: its end line (if any) and the reader's warnings."""
        self.end = end
        self.warnings.extend(warnings)
        if end is not None:
            if end.get("failed"):
                self.anomaly(self.duration, f"the recording failed: {end.get('failure')} "
                             f"({end.get('lost_frames')} frames lost)", source="recording")
            reason = str(end.get("reason") or "")
            if reason.startswith("error"):
                self.anomaly(self.duration, f"the session ended with {reason}", source="relay")
        for call in self.calls.values():
            event = call.event
            if event["outcome"] in ("pending", "running"):
                event["outcome"] = "unanswered"
                self.touch(event)

    def add_divergence(self, t: float, label: str, *, diff: str = "", recorded: Any = None, produced: Any = None,
                       related: str | None = None) -> dict[str, Any]:
        """A difference between the recording and a replay of it, marked at `t`."""
        event = self.add_event(self.new_id("divergence"), "divergences", "divergence", t, label, diff=diff,
                               recorded=recorded, produced=produced, related=related)
        event["t1"] = event["t0"]
        return event

    def call_event(self, call_id: str) -> dict[str, Any] | None:
        call = self.calls.get(call_id)
        return call.event if call is not None else None

    def set_extra(self, key: str, value: Any) -> None:
        """Extra top-level data for the page (the replay's verdict)."""
        self._extra[key] = value

    # ==== building (what the wire parsers call) =========================================
    def store(self, frame: Frame, event: dict[str, Any] | None, *, elided: dict[str, Any] | None = None) -> int:
        """Keep a frame for the page (`elided`: the event with its audio left out); its index."""
        if event is not None:
            text = json.dumps(elided if elided is not None else event, ensure_ascii=False, separators=(",", ":"))
        elif frame.raw is not None:
            text = frame.raw
        elif frame.binary is not None:
            text = f"<binary frame, {len(frame.binary)} bytes, not JSON>"
        else:
            text = ""
        self.frames.append([round(frame.t, 6), frame.direction, text, 1 if frame.binary is not None else 0])
        return len(self.frames) - 1

    def new_id(self, prefix: str) -> str:
        number = self._counters.get(prefix, 0) + 1
        self._counters[prefix] = number
        return f"{prefix}:{number}"

    def add_event(self, event_id: str, lane: str, kind: str, t0: float, label: str, **fields: Any) -> dict[str, Any]:
        event = {"id": event_id, "lane": lane, "kind": kind, "t0": round(t0, 6), "t1": None,
                 "label": label, "frames": [], **fields}
        self.events[event_id] = event
        self._dirty.add(event_id)
        return event

    def touch(self, event: dict[str, Any], frame_index: int | None = None) -> None:
        """`event` changed (and, with `frame_index`, that frame is one of its own)."""
        frames = event["frames"]
        if frame_index is not None:
            if not frames or frames[-1] < frame_index:
                frames.append(frame_index)
            elif frame_index not in frames:
                bisect.insort(frames, frame_index)
        self._dirty.add(event["id"])

    def anomaly(self, t: float, message: str, *, source: str, frames: list[int] = (),  # type: ignore[assignment]
                related: str | None = None, error: bool = True) -> dict[str, Any]:
        """Something off in the session; `error` when it is an error (an error event, a refusal,
        a failed response or recording), which the summary counts."""
        event = self.add_event(self.new_id("anomaly"), "anomalies", "anomaly", t, message,
                               source=source, related=related, error=error)
        event["t1"] = event["t0"]
        event["frames"] = list(frames)
        return event

    def relay_marker(self, t: float, kind: str, label: str, index: int) -> dict[str, Any]:
        """A moment on the relay's lane (a declaration, a follow-up, a filler...)."""
        event = self.add_event(self.new_id(kind), "relay", kind, t, label)
        event["t1"] = event["t0"]
        self.touch(event, index)
        return event

    def add_audio(self, side: str, t: float, fmt: AudioFormat, payload: Any, dropped_chars: int) -> None:
        """A side's base64 audio at `t` (or, when the recording dropped it, how much there was)."""
        data: bytes | None = None
        if isinstance(payload, str) and payload:
            try:
                data = base64.b64decode(payload)
            except ValueError:
                data = None
        if data:
            self.audio[side].add(t, fmt, data)
        elif dropped_chars:
            self.audio[side].add(t, fmt, None, dropped_chars * 3 // 4)

    def outputs_answered_by(self, response_id: str) -> None:
        """A response in the conversation began: it answers the outputs sent since the last one."""
        for call_id in self._unanswered_outputs:
            call = self.calls.get(call_id)
            if call is not None and call.answer_response is None:
                call.answer_response = response_id
                call.event["answered_by"] = response_id
                self.touch(call.event)
        self._unanswered_outputs = []

    # -- the call book
    def track_call(self, t: float, call_id: Any, name: Any, response_id: Any, index: int) -> TrackedCall | None:
        """The call `call_id` (announced now if it is new), with what this frame says of it."""
        if not isinstance(call_id, str) or not call_id:
            return None
        call = self.calls.get(call_id)
        if call is None:
            name = name if isinstance(name, str) else ""
            owner = "relay" if name in self.relay_tools else ("client" if self.kind == "relay" else "application")
            event = self.add_event(f"call:{call_id}", "calls", "call", t, name or "(unnamed call)",
                                   call_id=call_id, name=name, arguments="", output=None, status=None,
                                   outcome="pending", owner=owner,
                                   response_id=response_id if isinstance(response_id, str) else None,
                                   output_item_id=None, answered_by=None, handler_ms=None, end_to_end_ms=None,
                                   ready_t=None, output_t=None, answers=[])
            call = TrackedCall(event)
            self.calls[call_id] = call
            response = self.responses.get(str(response_id))
            if response is not None:
                response.call_ids.append(call_id)
                response.event.setdefault("call_ids", []).append(call_id)
        event = call.event
        if isinstance(name, str) and name and not event["name"]:
            event["name"] = event["label"] = name
            if name in self.relay_tools:
                event["owner"] = "relay"
        if isinstance(response_id, str) and event["response_id"] is None:
            event["response_id"] = response_id
        self.touch(event, index)
        return call

    def call_ready(self, t: float, call_id: Any, arguments: Any, index: int) -> None:
        """The call's arguments are complete: it may run."""
        call = self.calls.get(str(call_id))
        if call is None:
            return
        if isinstance(arguments, str) and arguments:
            call.event["arguments"] = arguments
        if call.ready is None:
            call.ready = t
            call.event["ready_t"] = round(t, 6)
            if call.event["outcome"] == "pending":
                call.event["outcome"] = "running"
        self.touch(call.event, index)

    def call_output(self, call: TrackedCall, t: float, output: Any, status: Any, item_id: Any, index: int) -> None:
        """An answer to the call went up (the first one decides its outcome and handler time)."""
        event = call.event
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        event["answers"].append({"t": round(t, 6), "output": text, "status": status})
        if event["output"] is not None:
            self.touch(event, index)
            return
        event["output"] = text
        event["status"] = status if isinstance(status, str) else None
        event["output_item_id"] = item_id if isinstance(item_id, str) else None
        event["t1"] = event["output_t"] = round(t, 6)
        call.output_t = t
        start = call.ready if call.ready is not None else event["t0"]
        event["handler_ms"] = round((t - start) * 1000, 3)
        event["outcome"] = _outcome(text, status)
        self._unanswered_outputs.append(event["call_id"])
        self.touch(event, index)

    def call_cancelled(self, call: TrackedCall, t: float, reason: str, index: int) -> None:
        """The server withdrew the call; unanswered, it ends cancelled."""
        event = call.event
        if event["output"] is None:
            event["outcome"] = "cancelled"
            event["skip_reason"] = reason
            event["t1"] = round(t, 6)
        self.touch(event, index)

    # ==== the model ==================================================================
    def snapshot(self, *, audio_data: bool = True) -> dict[str, Any]:
        """The whole model (audio bytes included as base64 unless `audio_data` is False)."""
        self._dirty.clear()
        self._sent_frames = len(self.frames)
        self._refresh()
        audio = {}
        for side, track in self.audio.items():
            audio[side] = self._audio_part(track, 0, 0, 0, audio_data)
            self._sent_audio[side] = (len(track.segments), len(track.levels), len(track.data))
        return {
            "version": MODEL_VERSION,
            "source": self._source(),
            "lanes": [{"id": lane, "label": label} for lane, label in LANES],
            "duration": round(self._duration(), 6),
            "frames": list(self.frames),
            "events": list(self.events.values()),
            "audio": audio,
            "audio_note": self.audio_note(),
            "summary": self.summary(),
            "warnings": list(self.warnings),
            **self._extra,
        }

    def delta(self) -> dict[str, Any]:
        """What changed since the last `snapshot` or `delta`, in the same shape: new frames, new
        and changed events, the audio added (segments and levels from the first one changed)."""
        self._refresh()
        frames = self.frames[self._sent_frames:]
        self._sent_frames = len(self.frames)
        events = [self.events[event_id] for event_id in sorted(self._dirty, key=_event_order) if event_id in self.events]
        self._dirty.clear()
        audio = {}
        for side, track in self.audio.items():
            segments_sent, levels_sent, data_sent = self._sent_audio[side]
            audio[side] = self._audio_part(track, max(segments_sent - 1, 0), max(levels_sent - 1, 0), data_sent, True)
            self._sent_audio[side] = (len(track.segments), len(track.levels), len(track.data))
        return {"version": MODEL_VERSION, "source": self._source(), "duration": round(self._duration(), 6),
                "frames": frames, "frames_from": self._sent_frames - len(frames), "events": events,
                "audio": audio, "audio_note": self.audio_note(), "summary": self.summary(), **self._extra}

    def audio_bytes(self, side: str) -> bytes:
        """A side's audio as the page carries it (8-bit mu-law at `audio[side].rate`)."""
        return bytes(self.audio[side].data)

    def _audio_part(self, track: SideAudio, segments_from: int, levels_from: int, data_from: int,
                    with_data: bool) -> dict[str, Any]:
        part: dict[str, Any] = {
            "encoding": "mulaw",
            "rate": track.rate,
            "source": track.source.describe() if track.source else None,
            "samples": track.samples,
            "recorded_seconds": round(track.recorded_seconds, 6),
            "playable": bool(track.data) and self.embed_audio,
            "segments_from": segments_from,
            "segments": [list(s) for s in track.segments[segments_from:]],
            "levels_from": levels_from,
            "levels": base64.b64encode(bytes(track.levels[levels_from:])).decode("ascii"),
        }
        if with_data:
            part["data_from"] = data_from
            part["data"] = base64.b64encode(bytes(track.data[data_from:])).decode("ascii") if self.embed_audio else ""
        return part

    def audio_note(self) -> str | None:
        """Why a side has no player, or None when both sides that had audio can be played."""
        dropped = sum(track.dropped_chunks for track in self.audio.values())
        if self.record_audio == "drop" or (dropped and not any(track.data for track in self.audio.values())):
            return ("no audio to play: this session was recorded with --record-audio drop, which keeps "
                    "the events but not the audio; the audio lanes show when audio flowed")
        if not any(track.chunks for track in self.audio.values()):
            if self.kind == "event-log":
                return "no audio to play: this event log holds no audio frames"
            return "no audio to play: no audio crossed the relay in this session"
        if not self.embed_audio:
            return "no audio to play: the page was made without its audio (--no-audio)"
        return None

    def snapshot_duration(self) -> float:
        return round(self._duration(), 6)

    def _duration(self) -> float:
        end_t = max((t for t in (self.duration,) if t is not None), default=0.0)
        for track in self.audio.values():
            if track.segments and track.rate:
                last = track.segments[-1]
                end_t = max(end_t, last[0] + last[2] / track.rate)
        return end_t

    def _source(self) -> dict[str, Any]:
        header = self.header
        return {
            "name": self.name,
            "kind": self.kind,
            "dialect": self.dialect or recording_dialect(header, None),
            "mode": header.get("mode") or ("event log" if self.kind == "event-log" else None),
            "session_id": header.get("session_id"),
            "started_at": header.get("started_at"),
            "upstream": header.get("upstream"),
            "tools": sorted(self.relay_tools),
            "record_audio": self.record_audio,
            "end": self.end,
            "frames": self.frame_count,
            "audio_frames": self.audio_frames,
        }

    def _refresh(self) -> None:
        """Derived facts that depend on frames seen later: end-to-end times, hidden calls."""
        hiding = self._has_client and self.kind == "relay"
        for call in self.calls.values():
            event = call.event
            answer = self.responses.get(str(call.answer_response)) if call.answer_response else None
            start = call.ready if call.ready is not None else event["t0"]
            if answer is not None:
                reached = answer.first_output if answer.first_output is not None else None
                end_to_end = None if reached is None else round((reached - start) * 1000, 3)
                if end_to_end != event["end_to_end_ms"]:
                    event["end_to_end_ms"] = end_to_end
                    self._dirty.add(event["id"])
            hidden_id = f"hidden:{event['call_id']}"
            hidden = hiding and event["owner"] == "relay" and not call.seen_by_client
            existing = self.events.get(hidden_id)
            if hidden:
                if existing is None:
                    existing = self.add_event(hidden_id, "hidden", "hidden", event["t0"],
                                              f"{event['name']}: the client never saw this call", call=event["id"])
                if existing["t1"] != event["t1"] or existing["frames"] != event["frames"] or existing.get("gone"):
                    existing["t1"] = event["t1"]
                    existing["frames"] = list(event["frames"])
                    existing["gone"] = False
                    self._dirty.add(hidden_id)
            elif existing is not None and not existing.get("gone"):
                existing["gone"] = True
                self._dirty.add(hidden_id)

    def summary(self) -> dict[str, Any]:
        tools: dict[str, dict[str, Any]] = {}
        for call in self.calls.values():
            event = call.event
            entry = tools.setdefault(event["name"] or "(unnamed)", {"calls": 0, "errors": 0, "unanswered": 0,
                                                                   "latencies": []})
            entry["calls"] += 1
            if event["outcome"] in ("error", "timeout"):
                entry["errors"] += 1
            if event["outcome"] in ("unanswered", "pending", "running"):
                entry["unanswered"] += 1
            if event["handler_ms"] is not None:
                entry["latencies"].append(event["handler_ms"])
        for entry in tools.values():
            latencies = entry.pop("latencies")
            entry["p50_ms"] = round(statistics.median(latencies), 3) if latencies else None
            entry["max_ms"] = round(max(latencies), 3) if latencies else None
        events = self.events.values()
        responses = [e for e in events if e["kind"] == "response"]
        anomalies = [e for e in events if e["kind"] == "anomaly"]
        errors = (sum(1 for e in anomalies if e.get("error"))
                  + sum(1 for c in self.calls.values() if c.event["outcome"] in ("error", "timeout")))
        return {
            "duration": round(self._duration(), 6),
            "turns": sum(1 for e in events if e["kind"] == "words" and e.get("role") == "user"),
            "responses": len(responses),
            "responses_by_status": _count(e["status"] for e in responses),
            "calls": len(self.calls),
            "tools": dict(sorted(tools.items())),
            "errors": errors,
            "anomalies": len(anomalies),
            "frames": self.frame_count,
        }


# ==== building from a recording =========================================================
def build_model(recording: Recording, *, max_audio_rate: int = DEFAULT_MAX_RATE,
                embed_audio: bool = True, release: bool = False, strict: bool = False) -> SessionModel:
    """The model of a whole recording. With `release`, frames are dropped from the recording as
    they are read (an hour of audio is hundreds of megabytes of frames)."""
    model = SessionModel(name=recording.path.name, header=recording.header, kind=recording.kind,
                         max_audio_rate=max_audio_rate, embed_audio=embed_audio, strict=strict)
    frames = recording.frames
    for position in range(len(frames)):
        model.feed(frames[position])
        if release:
            frames[position] = None  # type: ignore[call-overload]
    model.finish(recording.end, recording.warnings)
    return model


# ==== helpers ===========================================================================
def as_dict(value: Any) -> dict[str, Any]:
    """`value` when it is a dict, else an empty one (to read optional wire fields)."""
    return value if isinstance(value, dict) else {}


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _event_order(event_id: str) -> tuple[str, int]:
    prefix, _, number = event_id.partition(":")
    return (prefix, int(number)) if number.isdigit() else (event_id, 0)


def _count(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def _outcome(output: str, status: Any) -> str:
    try:
        value = json.loads(output)
    except ValueError:
        value = None
    if isinstance(value, dict) and set(value) == {"error"}:
        message = str(value["error"])
        if message.startswith("timed out"):
            return "timeout"
        if message.startswith("cancelled"):
            return "cancelled"
        return "error"
    return "ok" if status in (None, "completed") else str(status)
