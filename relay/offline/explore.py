"""The explorer: a scripted conversation run under many schedules a real session could take, every
invariant checked on each, and the smallest failing schedule handed back as a recording.

    from relay.testing import explore
    result = explore(conversation, budget=2000, seed=7)    # or a Script, with tools=
    assert result.ok, result.report()

A schedule is a set of perturbations (`relay.offline.explore_session.Perturbation`) of the
conversation as scripted: a barge-in at each point of each call's life, a handler finishing
after each provider event of its turn, past its filler or its timeout, raising, hanging,
answered twice, the provider's quirks (a call delivered twice, `response.done` before the call's
item, Gemini's model-turn parts), the connection dropping mid-call, the caller answering its own
calls late or speaking before it answers them. The explorer runs the
conversation once as scripted to learn its shape (its calls, the anchors each reaches, the
provider events after each handler starts), then: every single perturbation (the boundaries),
every pair when the budget holds them all, and seeded random schedules of two and three
perturbations after that, each distinct schedule once, until the schedule budget or the time
budget is spent. What a perturbed run reaches that the scripted one did not (a call only a
barge-in asks for, a call the model makes again after a reconnect) grows the space: its
perturbations are tried beside the schedule that reached it (`relay.offline.explore_growth`).

Our own enumeration and shrinking, not Hypothesis: the space is a small, finite set of named
perturbations known only after the first run, coverage of every boundary is the point (singles
first, exhaustively), and shrinking a failing set is deleting members, which a greedy pass does
in a handful of runs; Hypothesis's strategies would add a dependency to the package, draw the
same schedule many times over, and shrink towards its own idea of simple, not towards fewer
perturbations.

When an invariant breaks, the schedule is shrunk to the fewest perturbations that still break
the same invariant, written as a recording (with its inspector page) and the result names the
`relay replay` command that reproduces it.
"""

from __future__ import annotations

import gc
import itertools
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from relay.errors import UnusableInput
from relay.offline import explore_live as live
from relay.offline import explore_quirks as quirks
from relay.offline.explore_checks import DESCRIPTIONS, REPLAY_INVARIANT, Check, broken, not_applicable
from relay.offline.explore_growth import MAX_PERTURBATIONS, Growth, names_of
from relay.offline.explore_quirks import PerturbedSession, describe
from relay.offline.explore_session import (
    ANCHORS,
    CLIENT_DELAYS,
    Conversation,
    ExploredSession,
    Observed,
    Perturbation,
    Schedule,
)

DEFAULT_BUDGET = 2000
REPLAY_EVERY = 50
"""`replays_same` is checked on the conversation as scripted and on every 50th of the schedules tried
whose perturbations a recording carries (`replayable`), not on every schedule: a replay runs on
virtual time (the demo's takes about 0.07 s of wall time, 30-40 ms of it CPU), but it costs more CPU
than a schedule does (about 13 ms), and checked more often it would slow the exploration down."""
NOT_REPLAYABLE: tuple[tuple[str, str | None, str | None, str], ...] = (
    # (kind, anchor or None: any, "gemini" / "openai" or None: either family, why)
    ("past_timeout", None, None, "the handler's behaviour is the explorer's: the replay runs the real tool"),
    ("raises", None, None, "the handler's behaviour is the explorer's: the replay runs the real tool"),
    ("hangs", None, None, "the handler's behaviour is the explorer's: the replay runs the real tool"),
    ("mcp_dies", None, None, "the server's death is the explorer's: the replay runs the real tool"),
    ("reconnect", None, None, "a recording holds no mark of a reconnect: its replay cannot reconnect where it did"),
    ("reseed", None, None, "a recording holds no mark of the new session: its replay cannot start one where it did"),
    ("interruption", None, None, "the delegate's interruption policy is the explorer's: the replay runs the real one"),
)
"""The perturbations whose schedules `replays_same` is not checked on, and why."""
SETTLES = "settles"
"""The invariant every run keeps before the others are read: the conversation runs to its end (no
endless exchange, no deadline its tick leaves behind, no rule the engine refuses in strict mode)."""
HANDLER_BEHAVIOURS = ("past_timeout", "raises", "hangs", "answers_twice")
YOUNG_COLLECTIONS = 10_000
"""Allocations between two collections of the youngest generation while exploring (Python's
default is 700; see `_collector_for_runs`)."""


_DESCRIBED = {SETTLES: "the conversation runs to its end", **DESCRIPTIONS}


class NothingToExplore(UnusableInput):
    """A conversation that gives the explorer nothing to try: as it runs, the model makes no call of
    the relay's tools (a script whose rules match none of its lines, a tool left out of the
    tools), or a recording holds no response of the model. Explored anyway, it would hold every
    invariant on nothing. `relay explore` says so in one line (exit 2); the pytest plugin skips
    such a recording, with the reason."""


@dataclass
class Finding:
    """A broken invariant and the shrunk schedule that breaks it."""

    invariant: str
    message: str
    schedule: Schedule
    original: Schedule
    recording: Path | None = None
    page: Path | None = None
    command: str | None = None
    unwritten: str | None = None   # why its recording could not be written, if it could not

    def describe(self) -> str:
        lines = [f"invariant broken: {self.invariant} ({_DESCRIBED.get(self.invariant, 'yours')})",
                 f"  {self.message}",
                 f"  shrunk from {len(self.original)} to {len(self.schedule)} perturbation(s):"]
        lines += [f"    - {live.describe(p) or describe(p)}" for p in self.schedule] or ["    - none: the conversation as scripted"]
        if self.recording is not None:
            lines.append(f"  recording: {self.recording}")
        elif self.unwritten is not None:
            lines.append(f"  recording: not written ({self.unwritten})")
        if self.page is not None:
            lines.append(f"  inspector page: {self.page}")
        if self.command:
            lines.append(f"  reproduce it: {self.command}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "message": self.message,
                "schedule": [p.to_json() for p in self.schedule], "original": [p.to_json() for p in self.original],
                "recording": str(self.recording) if self.recording else None,
                "page": str(self.page) if self.page else None, "command": self.command}


@dataclass
class ExploreResult:
    """What an exploration tried and found (`report()` the summary table, `to_json()` the same)."""

    conversation: str
    seed: int
    tried: int = 0
    distinct: int = 0
    boundaries: int = 0
    covered: int = 0
    grown: int = 0           # perturbations only perturbed runs reached (relay.offline.explore_growth)
    grown_covered: int = 0   # of them, those that fired
    seconds: float = 0.0
    replayed: int = 0                                      # schedules whose recordings were replayed
    held: dict[str, int] = field(default_factory=dict)     # invariant -> schedules it held on
    findings: list[Finding] = field(default_factory=list)
    stopped: str = "space"                                 # space | budget | time | interrupted
    history_limit: int | None = None                       # the relay's history limit explored under (None: all)
    recorded_as: str | None = None                         # a relay recording's mode (None: script, event log)
    mode: str = "proxy"                                    # how the relay ran: proxy | sidecar
    not_applicable: dict[str, str] = field(default_factory=dict)   # built-in invariant -> the wire or mode it is for

    @property
    def ok(self) -> bool:
        return not self.findings

    def report(self) -> str:
        rate = self.tried / self.seconds if self.seconds > 0 else 0.0
        rows = [("conversation", self.conversation), ("schedules tried", str(self.tried)),
                ("distinct schedules", str(self.distinct)),
                ("boundaries covered", f"{self.covered} of {self.boundaries}"),
                ("grown from perturbed runs", f"{self.grown_covered} of {self.grown} covered"),
                ("stopped by", {"space": "the space was explored", "budget": "the schedule budget",
                                "time": "the time budget", "interrupted": "an interrupt (Ctrl-C)"}[self.stopped]),
                ("history kept", "all" if self.history_limit is None
                 else f"the last {self.history_limit} items, responses and finished calls"),
                ("the relay runs as", self._runs_as()),
                ("seed", str(self.seed)), ("schedules per second", f"{rate:.0f}"),
                ("replays checked", f"{self.replayed} (the scripted run and every {REPLAY_EVERY}th replayable schedule)"
                 if self.replayed else "none")]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows] + ["", "invariants:"]
        failed = {finding.invariant for finding in self.findings}
        for name, count in self.held.items():
            if name in self.not_applicable and name not in failed:
                lines.append(f"  n/a     {name:<30} {self.not_applicable[name]} only")
            else:
                lines.append(f"  {'BROKEN' if name in failed else 'held  '}  {name:<30} {count} schedule(s)")
        for finding in self.findings:
            lines += ["", finding.describe()]
        return "\n".join(lines)

    def _runs_as(self) -> str:
        if self.mode == "sidecar":
            return "a sidecar (the caller talks to the server; the relay is attached to its session, as relay attach)"
        if self.recorded_as not in (None, "proxy"):
            return f"a proxy (the recording is of a {self.recorded_as}: its conversation is explored through a proxy)"
        return "a proxy"

    def to_json(self) -> dict[str, Any]:
        return {"conversation": self.conversation, "seed": self.seed, "tried": self.tried, "distinct": self.distinct,
                "boundaries": self.boundaries, "covered": self.covered,
                "grown": self.grown, "grown_covered": self.grown_covered, "seconds": round(self.seconds, 3),
                "replayed": self.replayed, "history_limit": self.history_limit, "recorded_as": self.recorded_as,
                "mode": self.mode, "not_applicable": sorted(self.not_applicable),
                "stopped": self.stopped, "ok": self.ok, "held": self.held,
                "findings": [finding.to_json() for finding in self.findings]}


@dataclass
class _Run:
    schedule: Schedule
    broken: list[tuple[str, str]]
    observed: Observed
    session: ExploredSession


def run_schedule(conversation: Conversation, schedule: Schedule, own: dict[str, Check] | None = None,
                 reset: Callable[[], Any] | None = None, keep: bool = False) -> _Run:
    """Run `conversation` on one schedule and check every invariant; `keep` leaves the session
    open (to save it)."""
    if reset is not None:
        reset()
    session = (live.ExploredLiveSession if delegates(conversation.dialect) else PerturbedSession)(conversation, schedule)
    try:
        session.play()
        found = broken(session, own or {})
    except Exception as exc:   # a step the harness refused (a loop, a stuck deadline, an engine error)
        found = [(SETTLES, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")]
    finally:
        if not keep:
            session.close()
    return _Run(schedule, found, session.observed, session)


def boundaries(conversation: Conversation, base: Observed, names: dict[str, str] | None = None) -> list[Perturbation]:
    """Every single perturbation the conversation's shape allows (see the module docstring);
    `names`: call id -> its tool's name, in the run as scripted (for `mcp_dies`)."""
    space: list[Perturbation] = []
    gemini = conversation.dialect == "gemini"
    delegating = delegates(conversation.dialect)
    for number in range(1, len(base.calls) + 1):
        space += [Perturbation("barge_in", number, anchor) for anchor in ANCHORS if (number, anchor) in base.anchors]
        if (number, "running") not in base.anchors:
            continue
        turn = base.events_after_start.get(number, 0)
        space += [Perturbation("finish", number, step=step) for step in range(turn + 1)]
        if number in base.has_filler:
            space.append(Perturbation("past_filler", number))
        space += [Perturbation(kind, number) for kind in HANDLER_BEHAVIOURS]
        space += [Perturbation("duplicate", number), Perturbation("drop", number)]
        if not gemini and not delegating:
            space.append(Perturbation("done_first", number))
    if gemini and base.calls:
        space.append(Perturbation("call_parts", 1))
    if not delegating:   # the client's own calls, delivered twice too (GPT-Live: explore_live's)
        space += [Perturbation("duplicate_client", number) for number in range(1, len(base.client_calls) + 1)]
    for number in range(1, len(base.client_calls) + 1):   # the caller's own calls: answered late, spoken over
        space += [Perturbation("client_late", number, step=step) for step in range(len(CLIENT_DELAYS))]
        space.append(Perturbation("barge_in_client", number, "announced"))
    if delegating:
        return space + live.space(conversation, base)
    return space + quirks.space(conversation, base, names or {})


def _compatible(schedule: Schedule, delegating: bool = False) -> bool:
    """At most one handler behaviour per call (a handler cannot both hang and raise), and no
    GPT-Live `reseed` with a `reconnect`: one relay carries a dropped session on in a new one
    (`relay serve --live-reseed`), the other re-attaches a sideband to the same session (`relay
    attach`). On GPT-Live (`delegating`), no `reconnect` with the caller's late answers either: the
    explorer's caller talks through the relay, and a sideband's caller does not (its answers while
    the sideband is away reach the server unseen, which the proxy's rules for the client's creates,
    `relay.engine.client_asks`, never meet)."""
    if delegating and any(p.kind == live.REATTACH for p in schedule) and any(p.kind == "client_late" for p in schedule):
        return False
    handler_calls = [p.call for p in schedule
                     if p.kind in ("finish", "past_filler", *HANDLER_BEHAVIOURS, *quirks.HANDLER_KINDS)]
    if len(handler_calls) != len(set(handler_calls)) or len(set(schedule)) != len(schedule):
        return False
    kinds = {p.kind for p in schedule}
    return not ("reseed" in kinds and live.REATTACH in kinds)


def fits_for(conversation: Conversation) -> Callable[[Schedule], bool]:
    """Whether a schedule of `conversation` may hold its perturbations together (`_compatible`)."""
    delegating = delegates(conversation.dialect)
    return lambda schedule: _compatible(schedule, delegating)


def growth_of(conversation: Conversation, space: list[Perturbation], base: Observed) -> Growth:
    """What grows the space of `conversation` from its perturbed runs (relay.offline.explore_growth)."""
    return Growth(space, base, lambda observed, names: boundaries(conversation, observed, names),
                  fits_for(conversation))


def schedules(space: list[Perturbation], budget: int, seed: int, growth: Growth | None = None,
              fits: Callable[[Schedule], bool] = _compatible) -> Any:
    """The schedules to try, in order: the empty one, every single, every pair when the budget
    holds them, then seeded random sets of 2 and 3, each distinct set once. With `growth` (which
    the caller teaches each run), each extension it found goes next, and the random sets draw
    grown perturbations too (`relay.offline.explore_growth`)."""
    seen: set[Schedule] = set()

    def fresh(schedule: Schedule) -> bool:
        key = tuple(sorted(schedule))
        if key in seen or not fits(key):
            return False
        seen.add(key)
        return True

    def grown() -> Iterator[Schedule]:
        while growth is not None and growth.queue:
            extension = growth.queue.popleft()
            if fresh(extension):
                yield extension

    yield ()
    seen.add(())
    for single in space:   # every boundary first; what they grow after them all
        if fresh((single,)):
            yield (single,)
    yield from grown()
    pairs = list(itertools.combinations(space, 2))
    if len(pairs) + len(seen) <= budget:
        for pair in pairs:
            yield from grown()
            if fresh(pair):
                yield pair
    draw = random.Random(seed)
    misses = 0
    while misses < 1000 and len(space) >= 2:
        yield from grown()
        size = draw.choice((2, 3)) if len(space) >= 3 else 2
        around = growth.draw(draw, size, space) if growth is not None else None
        schedule = around if around is not None else tuple(sorted(draw.sample(space, size)))
        if fresh(schedule):
            misses = 0
            yield schedule
        else:
            misses += 1


def shrink(conversation: Conversation, schedule: Schedule, invariant: str, own: dict[str, Check],
           reset: Callable[[], Any] | None, breaks: Callable[[Schedule], bool] | None = None) -> Schedule:
    """The fewest perturbations of `schedule` that still break `invariant` (`breaks` says whether a
    schedule does, when a run's own invariants cannot: `replays_same`): drop members one at a time
    while it still breaks, until no single one can go."""
    current = tuple(sorted(schedule))
    if breaks is None:
        def breaks(candidate: Schedule) -> bool:
            return any(name == invariant for name, _ in run_schedule(conversation, candidate, own, reset).broken)
    changed = True
    while changed and current:
        changed = False
        for index in range(len(current)):
            candidate = current[:index] + current[index + 1:]
            if breaks(candidate):
                current, changed = candidate, True
                break
    return current


def explore(conversation: Conversation, *, budget: int = DEFAULT_BUDGET, seed: int = 0,
            time_budget: float | None = None, invariants: dict[str, Check] | None = None,
            reset: Callable[[], Any] | None = None, out: str | Path | None = None, tools_arg: str = "",
            invariant_args: tuple[str, ...] = (), replay_check: bool = True,
            progress: Callable[[ExploreResult], None] | None = None,
            stop: Callable[[], bool] | None = None) -> ExploreResult:
    """Explore `conversation` (see the module docstring): at most `budget` schedules and
    `time_budget` seconds (the conversation as scripted is always tried), and none once `stop`
    says so (`relay explore`'s Ctrl-C: what was tried is reported, `stopped` "interrupted");
    `invariants` the user's own; `reset` is called before each schedule (to clear a tool's own
    state); a finding is written under `out` (default: the harness's sessions folder), its replay
    command naming `tools_arg` and `invariant_args` (the `FILE:FUNCTION` specs of `invariants`,
    which `relay replay --invariant` checks on the replayed session)."""
    if budget <= 0:
        raise ValueError("the schedule budget must be at least 1")
    if time_budget is not None and time_budget <= 0:
        raise ValueError("the time budget must be more than 0 seconds")
    with _collector_for_runs():
        return _explore(conversation, budget=budget, seed=seed, time_budget=time_budget, invariants=invariants,
                        reset=reset, out=out, tools_arg=tools_arg, invariant_args=invariant_args,
                        replay_check=replay_check, progress=progress, stop=stop)


@contextmanager
def _collector_for_runs() -> Iterator[None]:
    """The garbage collector, set for an exploration's thousands of short runs, and put back after.
    What the process held before is frozen (`gc.freeze`): a full collection then walks only what
    the runs made, not every module and object of the process. The youngest generation is
    collected every `YOUNG_COLLECTIONS` allocations: each run's objects live for the whole run, so
    collecting them more often only moves them on. The collector's share of the CPU time, before
    and after, is in docs/benchmarks.md (`scripts/bench_explore.py` times it). A process that froze
    objects of its own (`gc.get_freeze_count()`) keeps them as they were: nothing is frozen or
    unfrozen then."""
    threshold = gc.get_threshold()
    freezing = gc.get_freeze_count() == 0
    if freezing:
        gc.freeze()
    gc.set_threshold(YOUNG_COLLECTIONS, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if freezing:
            gc.unfreeze()


def _explore(conversation: Conversation, *, budget: int, seed: int, time_budget: float | None,
             invariants: dict[str, Check] | None, reset: Callable[[], Any] | None, out: str | Path | None,
             tools_arg: str, invariant_args: tuple[str, ...], replay_check: bool,
             progress: Callable[[ExploreResult], None] | None,
             stop: Callable[[], bool] | None) -> ExploreResult:
    own = dict(invariants or {})
    replay_args = (f" --tools {tools_arg}" if tools_arg else "") + "".join(
        f" --invariant {spec}" for spec in invariant_args)
    result = ExploreResult(conversation.name, seed, held={name: 0 for name in (SETTLES, *DESCRIPTIONS, *own)},
                           history_limit=conversation.history_limit, recorded_as=conversation.recorded_as,
                           mode=conversation.mode,
                           not_applicable=not_applicable(conversation))
    started = time.perf_counter()
    family = "gemini" if conversation.dialect == "gemini" else "live" if delegates(conversation.dialect) else "openai"
    carried = 0   # schedules a recording can carry since the last replayed (see REPLAY_EVERY)
    base = run_schedule(conversation, (), own, reset)
    space = boundaries(conversation, base.observed, {entry.call_id: entry.name for entry in base.session.engine.ledger})
    result.boundaries = len(space)
    if not space and not base.broken:
        raise NothingToExplore(f"{conversation.name}: nothing to explore: as it runs, the model makes no call of the "
                               "relay's tools (do the script's rules match its lines, and is each tool it calls "
                               "among the tools?)")
    covered: set[Perturbation] = set()   # what fired
    fingerprints: set[tuple[Perturbation, ...]] = set()
    failed: set[str] = set()
    growth = growth_of(conversation, space, base.observed)
    source = schedules(space, budget, seed, growth, fits_for(conversation))
    result.stopped = "space"
    for schedule in source:
        if result.tried >= budget:
            result.stopped = "budget"
            break
        if time_budget is not None and result.tried and time.perf_counter() - started > time_budget:
            result.stopped = "time"
            break
        if stop is not None and stop():
            result.stopped = "interrupted"
            break
        run = base if not schedule else run_schedule(conversation, schedule, own, reset)
        result.tried += 1
        growth.learn(schedule, run.observed, names_of(run.session))
        fired = tuple(sorted(run.observed.fired))
        fingerprints.add(fired)
        covered.update(fired)
        names = {name for name, _ in run.broken}
        for name in result.held:
            if name not in names and name != REPLAY_INVARIANT:
                result.held[name] += 1
        for name, message in run.broken:
            if name in failed:
                continue
            failed.add(name)
            result.findings.append(_finding(conversation, schedule, name, message, own, reset, out, replay_args))
        carried += bool(replay_check and schedule and replayable(schedule, family))
        if carried == REPLAY_EVERY and REPLAY_INVARIANT not in failed:
            carried = 0
            _check_replay(conversation, schedule, result, own, reset, out, replay_args)
            failed.update(finding.invariant for finding in result.findings)
        if progress is not None and result.tried % 50 == 0:
            result.grown = growth.count
            result.seconds = time.perf_counter() - started
            progress(result)
    result.distinct = len(fingerprints)
    result.covered = len(covered & set(space))
    result.grown = growth.count
    result.grown_covered = len(covered & growth.found)
    if replay_check and REPLAY_INVARIANT not in failed and result.stopped != "interrupted":
        _check_replay(conversation, (), result, own, reset, out, replay_args)
    result.seconds = time.perf_counter() - started
    return result


def _finding(conversation: Conversation, schedule: Schedule, invariant: str, message: str, own: dict[str, Check],
             reset: Callable[[], Any] | None, out: str | Path | None, replay_args: str,
             breaks: Callable[[Schedule], bool] | None = None) -> Finding:
    smallest = shrink(conversation, schedule, invariant, own, reset, breaks)
    run = run_schedule(conversation, smallest, own, reset, keep=True)
    message = next((text for name, text in run.broken if name == invariant), message)
    finding = Finding(invariant, message, smallest, tuple(sorted(schedule)))
    _write(run.session, finding, out, replay_args)
    return finding


def _write(session: ExploredSession, finding: Finding, out: str | Path | None, replay_args: str) -> None:
    try:
        finding.recording = session.save(out)
    except OSError as exc:
        finding.unwritten = str(exc)
        return
    finally:
        session.close()
    try:
        from relay.inspector.model import build_model
        from relay.inspector.page import write_page
        from relay.recording.reader import load_recording

        finding.page = write_page(build_model(load_recording(finding.recording)),
                                  finding.recording.with_suffix(".html"))
    except (OSError, ValueError):
        finding.page = None
    finding.command = f"relay replay {finding.recording}{replay_args}"


def delegates(dialect: str) -> bool:
    """Whether the dialect's tools come as delegations (GPT-Live: `relay.offline.explore_live`)."""
    from relay.dialects import get_dialect
    from relay.dialects.base import ToolFlow

    return get_dialect(dialect).flow is ToolFlow.DELEGATIONS


def replayable(schedule: Schedule, family: str = "openai") -> bool:
    """Whether the replay of a recording of `schedule` (in a dialect of `family`: `gemini` or
    `openai`) can reproduce what it changed (`NOT_REPLAYABLE`)."""
    return not any(p.kind == kind and anchor in (None, p.anchor) and where in (None, family)
                   for p in schedule for kind, anchor, where, _ in NOT_REPLAYABLE)


def replays_same(conversation: Conversation, schedule: Schedule, own: dict[str, Check],
                 reset: Callable[[], Any] | None) -> str | None:
    """`replays_same` on one schedule: its recording, replayed against the same tools, sends what
    it recorded; what diverged first, else None."""
    import tempfile

    from relay.offline.replay import replay

    with tempfile.TemporaryDirectory(prefix="relay-explore-") as folder:
        run = run_schedule(conversation, schedule, own, reset, keep=True)
        path = run.session.save(folder)
        run.session.close()
        if reset is not None:
            reset()
        replayed = replay(path, conversation.tools)
    if replayed.ok:
        return None
    if not replayed.divergences:
        return "it diverged"
    first = replayed.divergences[0].describe().splitlines()[0]
    if all(d.kind == "changed" and d.what.startswith("output of ") for d in replayed.divergences):
        # the replay's calls come with the recorded arguments: only a tool's own answers changed
        return first + (" (only tools' outputs changed, to the same arguments: a tool that reads the clock, a random "
                        "source or state no `reset` clears answers differently each run, and no recording of it "
                        "replays the same)")
    return first


def _check_replay(conversation: Conversation, schedule: Schedule, result: ExploreResult, own: dict[str, Check],
                  reset: Callable[[], Any] | None, out: str | Path | None, replay_args: str) -> None:
    result.replayed += 1
    divergence = replays_same(conversation, schedule, own, reset)
    if divergence is None:
        result.held[REPLAY_INVARIANT] += 1
        return
    result.findings.append(_finding(
        conversation, schedule, REPLAY_INVARIANT, divergence, own, reset, out, replay_args,
        breaks=lambda candidate: replays_same(conversation, candidate, own, reset) is not None))


__all__ = ["DEFAULT_BUDGET", "NOT_REPLAYABLE", "REPLAY_EVERY", "ExploreResult", "Finding", "NothingToExplore",
           "boundaries", "explore", "fits_for", "growth_of", "replayable", "replays_same", "run_schedule", "schedules",
           "shrink"]
