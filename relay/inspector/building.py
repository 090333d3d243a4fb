"""What the wire parsers build the inspector's model with: a part of
`relay.inspector.model.SessionModel` (its `__init__` sets the state declared here), apart from it
so that the parsers (relay/inspector/itembased.py, gemini.py), which the model chooses between, do not
import the model: events by id on lanes, the relay's markers, anomalies, audio, and the call book
(`CallBook`) these build on.
"""

from __future__ import annotations

import base64
import bisect
import json
from typing import Any, Protocol

from relay.inspector.audio import AudioFormat, SideAudio
from relay.inspector.callbook import CallBook
from relay.recording.format import Frame


class WireParser(Protocol):
    """Reads one dialect's frames into the model (see relay.inspector.itembased and .gemini)."""

    def feed(self, frame: Frame, event: dict[str, Any], binary: bool) -> None: ...


class ModelBuilding(CallBook):
    """The model as its wire parsers see it: what they add to it, and the call book."""

    kind: str                          # "relay" or "event-log"
    dialect: str | None
    id_prefix: str | None              # the relay's own event ids start with it
    relay_tools: set[str]
    caller_direction: str | None       # which way the caller's audio was seen first
    audio_frames: int
    events: dict[str, dict[str, Any]]
    audio: dict[str, SideAudio]
    frames: list[list[Any]]
    _counters: dict[str, int]
    _dirty: set[str]

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


def as_dict(value: Any) -> dict[str, Any]:
    """`value` when it is a dict, else an empty one (to read optional wire fields)."""
    return value if isinstance(value, dict) else {}
