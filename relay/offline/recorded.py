"""A recording played on the test harness's virtual time, with faults on demand: what the relay
under test answers when something goes wrong in a session that really happened (`replay_with_faults`;
the faults are relay.offline.faults'). The recording's upstream frames are played to the engine at
their recorded times (no causal gating: once a fault changes what the relay does, the recorded
upstream cannot answer the new course anyway) and the tools run for real on that clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from relay.dialects import Dialect, get_dialect
from relay.dialects import gemini_codec as gemini
from relay.dialects import openai_codec as wire
from relay.engine import EngineConfig
from relay.offline.faults import Fault
from relay.offline.harness import HarnessSession
from relay.offline.replaying import history_limit_of
from relay.offline.sends import replay_sends
from relay.recording.format import CLIENT_TO_RELAY, UPSTREAM_TO_RELAY, Recording
from relay.recording.reader import load_recording
from relay.tools.sources import ToolSources


class RecordedSession(HarnessSession):
    """A recording's upstream (and client) frames played to the relay under test at their recorded
    times, on virtual time, with faults. What the relay sent then is its answer to them."""

    kind = "recording"

    def __init__(self, recording: str | Path | Recording, tools: ToolSources, faults: Iterable[Fault] = (), *,
                 dialect: str | Dialect | None = None, **options: Any) -> None:
        # read without its audio: the engine only forwards audio, and its markers stay in the frames
        self.recording = recording if isinstance(recording, Recording) else load_recording(
            recording, allow_incomplete=True, audio="drop")
        header = self.recording.header or {}
        mode = header.get("mode", "proxy") if self.recording.kind == "relay" else "replay"
        mode = mode if mode in ("proxy", "sidecar") else "replay"
        config = EngineConfig(mode=mode, hide_tool_events=bool(header.get("hide_tool_events", True)),
                              declare_tools=bool(header.get("declare_tools", mode == "proxy")),
                              unknown_tools=header.get("unknown_tools", "client"),
                              history_limit=history_limit_of(header))
        chosen = get_dialect(dialect) if isinstance(dialect, str) else dialect or self.recording.dialect
        super().__init__(tools, dialect=chosen, config=config, faults=faults, strict=False,
                         name=f"{self.recording.path.name} with {', '.join(f.describe() for f in faults) or 'no fault'}",
                         **options)
        sends = replay_sends(self.dialect, None)
        moments: dict[float, list[tuple[str, str | bytes]]] = {}   # frames of one time stay in order
        for frame in self.recording.frames:
            payload = sends.payload(frame)
            if payload is None:
                continue
            if frame.direction == UPSTREAM_TO_RELAY or (frame.direction == CLIENT_TO_RELAY and self.config.has_client):
                moments.setdefault(frame.t, []).append((frame.direction, payload))
        for t, frames in moments.items():
            self.loop.call_at(t, self._play, frames)
        self.last_frame_t = max((frame.t for frame in self.recording.frames), default=0.0)

    def _play(self, frames: list[tuple[str, str | bytes]]) -> None:
        for direction, payload in frames:
            if direction == UPSTREAM_TO_RELAY:
                self.from_upstream([payload])
            else:
                self.from_caller([payload])

    def play(self, *, limit: float = 120.0) -> RecordedSession:
        """Play every frame, then let the tools and timers finish (at most `limit` more seconds)."""
        self._run(self.last_frame_t)
        self.run_until_quiet(limit)
        return self

    def barge_in_now(self, text: str | None = None) -> None:
        """The caller speaks over the assistant: what the upstream would say of it."""
        if self.gemini:
            self.from_upstream([gemini.encode(gemini.ServerContent(interrupted=True)).encode()])
        else:
            speech = wire.SpeechStarted(event_id="harness_barge_in", audio_start_ms=int(self.now * 1000),
                                        item_id="harness_item")
            self.from_upstream([wire.encode(speech, self.dialect)])

    def _upstream_receive(self, frame: str | bytes) -> list[str | bytes]:
        return []   # a recording cannot answer what the relay under test sends now


def replay_with_faults(recording: str | Path | Recording, tools: ToolSources = (), faults: Iterable[Fault] = (),
                       **options: Any) -> RecordedSession:
    """Play `recording` to the relay under test with `tools` and `faults` (see the module
    docstring); the session it gives has the relay's answer: `timeline`, `expect()`,
    `check_invariants()`, `report()`."""
    return RecordedSession(recording, tools, list(faults), **options).play()
