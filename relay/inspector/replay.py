"""`relay replay --html PAGE`: the inspector page of the recording, with every divergence the
replay found marked on the timeline (at the recorded frame it concerns) and its diff shown."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from relay.inspector.model import SessionModel, build_model
from relay.inspector.page import write_page
from relay.recording.format import RELAY_TO_UPSTREAM, Recording

_IDS = re.compile(r"[A-Za-z0-9_\-.]+")


def replay_model(recording: Recording, result: Any) -> SessionModel:
    """The recording's model with the replay's verdict and divergences (`result` is a
    `relay.replay.ReplayResult`)."""
    model = build_model(recording)
    where = _recorded_times(recording)
    for divergence in result.divergences:
        related = None
        for token in _IDS.findall(divergence.what):
            call = model.call_event(token)
            if call is not None:
                related = call
                break
        t = where.get(id(divergence.recorded)) if divergence.recorded is not None else None
        if t is None:
            t = related["t1"] if related is not None and related["t1"] is not None else (
                related["t0"] if related is not None else model.snapshot_duration())
        model.add_divergence(t, f"{divergence.kind}: {divergence.what}", diff=divergence.diff,
                             recorded=divergence.recorded, produced=divergence.produced,
                             related=related["id"] if related is not None else None)
    model.set_extra("replay", {"ok": result.ok, "verdict": result.verdict(),
                               "divergences": len(result.divergences)})
    return model


def write_replay_page(recording: Recording, result: Any, path: str | Path) -> Path:
    return write_page(replay_model(recording, result), path,
                      title=f"relay replay: {recording.path.name}")


def _recorded_times(recording: Recording) -> dict[int, float]:
    """The time of every object the relay sent, by identity: a divergence holds the recorded
    event (OpenAI) or the part of it compared (a Gemini answer or setup)."""
    times: dict[int, float] = {}
    for frame in recording.frames:
        if frame is None or frame.direction != RELAY_TO_UPSTREAM or frame.event is None:
            continue
        times[id(frame.event)] = frame.t
        for value in frame.event.values():
            if isinstance(value, dict):
                times[id(value)] = frame.t
                for inner in value.values():
                    if isinstance(inner, list):
                        for element in inner:
                            times[id(element)] = frame.t
    return times
