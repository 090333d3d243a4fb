"""What the inspector's model says: the whole of it (`snapshot`, what the page renders from) or
what changed since it last said (`delta`, what the live view streams), in one shape (see
relay/inspector/model.py), with the summary and the audio parts.

`ModelViews` is a part of `relay.inspector.model.SessionModel`; it reads the model's frames,
events, audio tracks and call book."""

from __future__ import annotations

import base64
from typing import Any, Iterable

from relay.dialects import DIALECTS, GEMINI, OPENAI, Dialect
from relay.dialects.gemini import is_gemini_message
from relay.inspector.audio import SideAudio

MODEL_VERSION = 1

LANES = (
    ("caller", "caller audio"),
    ("assistant", "assistant audio"),
    ("user_words", "user said"),
    ("assistant_words", "assistant said"),
    ("responses", "responses"),
    ("calls", "tool calls"),
    ("provider_mcp", "provider's MCP"),
    ("relay", "fillers and follow-ups"),
    ("anomalies", "anomalies"),
    ("divergences", "divergences"),
)


def recording_dialect(header: dict[str, Any] | None, first_event: Any) -> str:
    """The recording's dialect: its header's, else `gemini` when its first event is a Gemini
    message, else `openai`. (The one guess in the inspector; the reader will know it soon.)"""
    named = (header or {}).get("dialect")
    if isinstance(named, str) and named:
        return named
    return "gemini" if is_gemini_message(first_event) else "openai"


def wire_dialect(name: str, first_event: Any) -> Dialect:
    """The dialect whose codec reads the session: the registered one of that name; for a name
    this relay does not know, Gemini Live when the first event is a Gemini message, else OpenAI."""
    known = DIALECTS.get(name)
    if known is not None:
        return known
    return GEMINI if is_gemini_message(first_event) else OPENAI


class ModelViews:
    """The model's views: a part of `SessionModel`, whose `__init__` calls `_init_views`."""

    # the model's, read here
    header: dict[str, Any]
    name: str
    kind: str
    dialect: str | None
    relay_tools: set[str]
    record_audio: Any
    embed_audio: bool
    duration: float
    frames: list[list[Any]]
    events: dict[str, dict[str, Any]]
    warnings: list[str]
    end: dict[str, Any] | None
    audio: dict[str, SideAudio]
    audio_frames: int
    frame_count: int
    _dirty: set[str]

    def _init_views(self) -> None:
        self._sent_frames = 0
        self._sent_audio: dict[str, tuple[int, int, int]] = {"caller": (0, 0, 0), "assistant": (0, 0, 0)}
        self._extra: dict[str, Any] = {}

    def set_extra(self, key: str, value: Any) -> None:
        """Extra top-level data for the page (the replay's verdict)."""
        self._extra[key] = value

    def snapshot(self, *, audio_data: bool = True) -> dict[str, Any]:
        """The whole model (audio bytes included as base64 unless `audio_data` is False)."""
        self._dirty.clear()
        self._sent_frames = len(self.frames)
        self._refresh_calls()
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
        self._refresh_calls()
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

    def summary(self) -> dict[str, Any]:
        events = self.events.values()
        responses = [e for e in events if e["kind"] == "response"]
        anomalies = [e for e in events if e["kind"] == "anomaly"]
        return {
            "duration": round(self._duration(), 6),
            "turns": sum(1 for e in events if e["kind"] == "words" and e.get("role") == "user"),
            "responses": len(responses),
            "responses_by_status": _count(e["status"] for e in responses),
            "calls": len(self.calls),
            "tools": self.tools_summary(),
            "errors": sum(1 for e in anomalies if e.get("error")) + self.failed_calls(),
            "anomalies": len(anomalies),
            "frames": self.frame_count,
        }


def _event_order(event_id: str) -> tuple[str, int]:
    prefix, _, number = event_id.partition(":")
    return (prefix, int(number)) if number.isdigit() else (event_id, 0)


def _count(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts
