"""The inspector's model of a session: what a person looks at, built frame by frame.

`SessionModel` is fed the frames of a recording one at a time (`feed`) and can say, at any point,
what the session looks like (`snapshot`) or what changed since it last said (`delta`): the page
renders from the first, and the live view (relay/inspector/live/) streams the second. Both have
one shape:

    source      what was recorded: file, kind, dialect, mode, session id, tools
    duration    the session's length: seconds from its start (the header) to its end line, or to
                the last frame when there is none (a live session, a plain event log)
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
own frames carry event ids with the recording's `id_prefix`, a call the client never saw has no
frame toward the client, and how each relay call ended is the relay's `tool_call` note (`note`).

This module holds what every dialect shares: the frames and events, the audio tracks, feeding;
the call book (relay/inspector/callbook.py) and the views (snapshot, delta, summary:
relay/inspector/views.py) are parts of the model in modules of their own. Reading each wire is its
parser's job: `relay.inspector.itembased` (the OpenAI family) and `relay.inspector.turnbased` (Gemini
Live), which build through `relay.inspector.building.ModelBuilding`'s methods (the part of the
model they see: they do not import this module, which chooses between them).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from relay.dialects import OPENAI, Dialect
from relay.dialects.base import ToolFlow
from relay.inspector.audio import DEFAULT_MAX_RATE, SideAudio
from relay.inspector.building import ModelBuilding, WireParser, as_dict
from relay.inspector.callbook import TrackedCall, TrackedResponse
from relay.inspector.delegations import DelegationParser
from relay.inspector.itembased import OpenAIParser
from relay.inspector.turnbased import GeminiParser
from relay.inspector.views import LANES, MODEL_VERSION, ModelViews, recording_dialect, wire_dialect
from relay.recording.format import (
    CLIENT_TO_RELAY,
    RELAY_TO_CLIENT,
    TOOL_CALL_NOTE,
    UPSTREAM_TO_RELAY,
    Frame,
    Note,
    Recording,
)

PARSERS: dict[ToolFlow, Callable[[ModelBuilding, Dialect], WireParser]] = {
    ToolFlow.ITEMS: OpenAIParser, ToolFlow.TURNS: GeminiParser, ToolFlow.DELEGATIONS: DelegationParser}
"""The inspector's reader of each tool flow (`Dialect.flow`), made with the model and the session's
dialect: a family of a known flow is read by its flow's parser through its codec; a family of a
new flow registers its parser here (`register_parser`)."""


def register_parser(flow: ToolFlow, parser: Callable[[ModelBuilding, Dialect], WireParser]) -> None:
    """Make `parser` the inspector's reader of `flow`'s recordings and live sessions."""
    PARSERS[flow] = parser


__all__ = ["LANES", "MODEL_VERSION", "PARSERS", "register_parser",
           "SessionModel", "TrackedCall", "TrackedResponse", "WireParser", "as_dict", "build_model",
           "recording_dialect"]




class SessionModel(ModelBuilding, ModelViews):
    """Builds the inspector's model from frames fed in order (and the relay's notes beside
    them). See the module docstring; the call book and the views are parts of their own
    (relay.inspector.callbook, relay.inspector.views)."""

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
        self._parser: WireParser | None = None
        self._wire: Dialect = OPENAI
        self._has_client = False
        self._counters: dict[str, int] = {}
        self._dirty: set[str] = set()
        self._init_call_book()
        self._init_views()

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
        if frame.direction in (CLIENT_TO_RELAY, RELAY_TO_CLIENT):
            self._has_client = True
        if self.dialect is None and (event is not None or self.header):
            self.dialect = recording_dialect(self.header, event)
            self._wire = wire_dialect(self.dialect, event)
        if event is None:
            index = self.store(frame, None)
            if frame.direction in (UPSTREAM_TO_RELAY, CLIENT_TO_RELAY):
                what = "text" if frame.raw is not None else "binary"
                source = "the upstream" if frame.direction == UPSTREAM_TO_RELAY else "the client"
                self.anomaly(t, f"{source} sent a {what} frame that is not a JSON object",
                             source="upstream" if frame.direction == UPSTREAM_TO_RELAY else "client",
                             frames=[index], error=False)
            return
        self._wire_parser().feed(frame, event, binary)

    def _wire_parser(self) -> WireParser:
        """The parser of the session's tool flow (`PARSERS`), made on the first frame that is an
        event (the dialect is known by then), reading through the dialect's codec."""
        if self._parser is None:
            self._parser = PARSERS[self._wire.flow](self, self._wire)
        return self._parser

    def finish(self, end: dict[str, Any] | None, warnings: Iterable[str] = (), *, end_t: float | None = None) -> None:
        """The recording is over: its end line (if any, written at `end_t`: the session lasted
        that long, however long before it the last frame crossed) and the reader's warnings."""
        self.end = end
        if end_t is not None and end_t > self.duration:
            self.duration = end_t
        self.warnings.extend(warnings)
        if end is not None:
            if end.get("failed"):
                self.anomaly(self.duration, f"the recording failed: {end.get('failure')} "
                             f"({end.get('lost_frames')} frames lost)", source="recording")
            if end.get("error"):
                self.anomaly(self.duration, f"the session ended with an error: {end['error']} "
                             f"({end.get('reason')})", source="relay")
        self._calls_finished()

    def note(self, note: Note) -> None:
        """Take a `relay` line of the recording (or, live, an engine notice as the recording
        would hold it): what the relay decided about a tool call."""
        if note.kind == TOOL_CALL_NOTE:
            self.call_decided(note.fields)

    def add_divergence(self, t: float, label: str, *, diff: str = "", recorded: Any = None, produced: Any = None,
                       related: str | None = None) -> dict[str, Any]:
        """A difference between the recording and a replay of it, marked at `t`."""
        event = self.add_event(self.new_id("divergence"), "divergences", "divergence", t, label, diff=diff,
                               recorded=recorded, produced=produced, related=related)
        event["t1"] = event["t0"]
        return event

    # ==== building (what the wire parsers call) =========================================


# ==== building from a recording =========================================================
def build_model(recording: Recording, *, max_audio_rate: int = DEFAULT_MAX_RATE,
                embed_audio: bool = True, release: bool = False, strict: bool = False) -> SessionModel:
    """The model of a whole recording. With `release`, frames are dropped from the recording as
    they are read (an hour of audio is hundreds of megabytes of frames)."""
    model = SessionModel(name=recording.path.name, header=recording.header, kind=recording.kind,
                         max_audio_rate=max_audio_rate, embed_audio=embed_audio, strict=strict)
    for fields in recording.tool_calls_decided().values():
        model.call_decided(fields)
    frames = recording.frames
    for position in range(len(frames)):
        model.feed(frames[position])
        if release:
            frames[position] = None  # type: ignore[call-overload]
    model.finish(recording.end, recording.warnings, end_t=recording.end_t)
    return model


# ==== helpers ===========================================================================
def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
