"""What a replay found, and the report `relay replay` prints of it: the divergences between what
the relay under test sent and what was recorded, the calls it ran, and the replayed session.
`relay.offline.replay` produces a `ReplayResult`; the CLI, the pytest plugin and
`relay.testing` read it."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

from relay.engine import Engine
from relay.engine.calls import CallOutcome
from relay.offline.replaying import clip, counted
from relay.recording.format import Frame


@dataclass
class Divergence:
    kind: str                       # missing | extra | changed
    what: str                       # e.g. "output call_x", "follow-up for call_x", "session.update"
    recorded: dict[str, Any] | None
    produced: dict[str, Any] | None
    diff: str = ""
    call_id: str | None = None      # the call the send concerns (of a follow-up, its first), if any
    t: float | None = None          # seconds into the recording: when the recorded send went up, or
                                    # (extra) when the relay under test sent it

    def describe(self) -> str:
        head = f"{self.kind}: {self.what}"
        return head + ("\n" + self.diff if self.diff else "")


@dataclass
class ReplayCall:
    call_id: str
    name: str
    arguments: str
    output: str | None
    status: str | None
    outcome: CallOutcome | None
    response_id: str | None
    follow_up_response_id: str | None
    recorded_output: str | None = None
    skipped: str | None = None


_CALL_ID = "call_id="


@dataclass
class ReplayResult:
    path: Path
    kind: str
    calls: list[ReplayCall]
    sent: list[dict[str, Any]]               # every frame the relay under test sent upstream
    divergences: list[Divergence]
    timeline: list[str]
    warnings: list[str]
    anomalies: list[str]
    engine: Engine = dataclass_field(repr=False)
    frames: list[Frame] = dataclass_field(default_factory=list, repr=False)
    """The session as replayed: the frames the engine was given and those it sent upstream, at
    the replay's times (what `relay.testing.Timeline.from_replay` reads)."""
    internal_errors: list[str] = dataclass_field(default_factory=list)
    """The engine's own failures during the replay (a bug in the relay, not a divergence)."""
    broken: list[tuple[str, str]] = dataclass_field(default_factory=list)
    """The invariants of the caller's own (`replay(..., invariants=)`, `--invariant`) that the session
    as replayed breaks: (name, what broke). An explorer's finding replays to the same one."""

    @property
    def ok(self) -> bool:
        return not self.divergences and not self.broken

    @property
    def handler_starts(self) -> dict[str, int]:
        """How many times the replay started each call's handler (call id -> starts), read from
        its timeline's `run` lines (`relay.offline.replay`: `run   name(...) call_id=ID`)."""
        starts: dict[str, int] = {}
        for line in self.timeline:
            words = line.split()
            if len(words) > 2 and words[1] == "run" and words[-1].startswith(_CALL_ID):
                call_id = words[-1][len(_CALL_ID):]
                starts[call_id] = starts.get(call_id, 0) + 1
        return starts

    def verdict(self) -> str:
        if self.ok and self.kind == "event-log":
            return "event log (no relay sends recorded): nothing to compare"
        if self.ok:
            return "no divergence: the relay under test sent what was recorded"
        found = [counted(len(self.divergences), "divergence")] if self.divergences or not self.broken else []
        found += [f"invariant broken: {name} ({message})" for name, message in self.broken]
        return "; ".join(found)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path), "kind": self.kind, "ok": self.ok, "verdict": self.verdict(),
            "calls": [vars(c) for c in self.calls], "sent": self.sent,
            "divergences": [vars(d) for d in self.divergences], "warnings": self.warnings,
            "anomalies": self.anomalies, "broken": [{"invariant": name, "message": message}
                                                    for name, message in self.broken],
        }


def render_report(result: ReplayResult) -> str:
    lines = [f"replay of {result.path.name} ({result.kind}, {counted(len(result.engine.ledger), 'call')} seen)", "",
             "timeline:"]
    lines += ["  " + line for line in result.timeline] or ["  (the relay did nothing)"]
    lines += ["", "calls the relay ran:"]
    if not result.calls:
        lines.append("  none: no call in this session belongs to the given tools")
    for call in result.calls:
        if call.skipped:
            what = "cancelled" if call.outcome is CallOutcome.CANCELLED else "not executed"   # Gemini cancels running calls
            lines.append(f"  {call.name} {call.call_id}: {what} ({call.skipped})")
            continue
        lines.append(f"  {call.name} {call.call_id}: {call.outcome} [{call.status}] -> {clip(call.output or '')}")
        if call.follow_up_response_id:
            lines.append(f"      follow-up response: {call.follow_up_response_id}")
    others = [e for e in result.engine.ledger if not e.relay_owned]
    if others:
        lines += ["", "calls left to the client (no tool of that name given):"]
        lines += [f"  {e.name} {e.call_id}" for e in others]
    if result.divergences:
        lines += ["", "divergences:"]
        for divergence in result.divergences:
            lines += ["  " + line for line in divergence.describe().splitlines()]
    lines += ["", f"verdict: {result.verdict()}"]
    return "\n".join(lines)
