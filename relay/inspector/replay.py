"""`relay replay --html PAGE`: the inspector page of the recording, with every divergence the
replay found marked on the timeline (when the recorded send went up or, for an extra one, when the
relay under test sent it; tied to the call it concerns) and its diff shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from relay.inspector.model import SessionModel, build_model
from relay.inspector.page import write_page
from relay.recording.format import Recording


def replay_model(recording: Recording, result: Any) -> SessionModel:
    """The recording's model with the replay's verdict and divergences (`result` is a
    `relay.offline.replay.ReplayResult`)."""
    model = build_model(recording)
    for divergence in result.divergences:
        related = model.call_event(divergence.call_id) if divergence.call_id is not None else None
        t = divergence.t
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
