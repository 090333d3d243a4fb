"""The relay under test on virtual time: its real engine, the user's real tools, an upstream and a
caller, every frame kept. What a scripted conversation (`relay.offline.scripted`) and a recording
played with faults (`relay.offline.faults`) share; they differ in where the upstream's frames come
from.

The relay under test is the relay's own driver: a `SessionLoop` (relay/session/loop.py) on one
`VirtualLoop`, between two in-memory sockets (`relay.offline.peers.PeerTransport`): the upstream (a
scripted model, or a recording's upstream) and the caller. The loop reads each frame and gives it
to the engine at the loop's time, carries out its actions as it does live (frames to the sockets,
recorded; handlers started and cancelled by its runner, with its error-output policy, loop watch,
idempotency key and streaming tools; records written ahead; the session closed), and its timer
fires the engine's deadlines; the tools' own `asyncio.sleep`s are virtual too. So `advance(3)` runs
three virtual seconds of the session, in order, in no real time. What differs from a live session
is around the loop, not in it (`relay.offline.peers.HarnessLoop`): the peers answer at once, the
recorder keeps the frames here, the faults stand in for a handler, sync handlers run in the
virtual loop's own daemon threads, which it waits for with its clock standing still (see
`relay.offline.virtual`).
"""

from __future__ import annotations

import os
import tempfile
from bisect import bisect_right
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from relay.dialects import Dialect, GeminiDialect, get_dialect
from relay.engine import Action, Close, Engine, EngineConfig, Notice, Outcome, StartHandler, new_engine
from relay.engine.records import CallRecord
from relay.offline.events import CLOSED, Event
from relay.offline.expect import Expect, check_invariants, failure
from relay.offline.peers import HarnessLoop, KeptFrames, PeerTransport, Remembered
from relay.offline.timeline import Timeline, decided_outcomes, not_owed_speech
from relay.offline.virtual import DEFAULT_THREAD_LIMIT, VirtualLoop
from relay.recording.format import Frame
from relay.tools import ToolRegistry
from relay.tools.sources import ToolSources, tool_registry
from relay.session.policy import NORMAL_CLOSURE
from relay.session.runner import Run

EngineFactory = Callable[..., Engine]
"""Builds the engine under test, as `relay.engine.new_engine` (tools, dialect=, config=,
session_id=, id_prefix=): a test double can wrap the real one to break a rule on purpose."""

SESSIONS_DIR_NAME = "relay-sessions"
SESSIONS_DIR_ENV = "RELAY_SESSIONS_DIR"
MAX_FRAMES_AT_ONCE = 10_000
"""Frames one step may pass between the relay and its peers before the harness calls it a loop
(a relay and an upstream answering each other forever, as a broken rule can make them)."""


class SessionOver(RuntimeError):
    """A step was asked of a session that has ended (closed, or its upstream dropped)."""


class CallerFailed(RuntimeError):
    """The scripted caller's own code (a tool of its own, which it answers) raised: the session
    cannot go on as the test wrote it."""


class HarnessSession:
    """One session of the relay under test on virtual time (see the module docstring). Subclasses
    say what the upstream is (`_upstream_receive`) and what the caller does with what it gets
    (`_caller_receive`)."""

    kind = "session"
    express_lane = True
    """Whether the sockets offer the loop's express lane (audio forwarded without the engine's
    round, as live), or hand every frame to the engine's round (`PeerTransport`'s `express`)."""

    def __init__(self, tools: ToolSources, *, dialect: str | Dialect = "openai", config: EngineConfig | None = None,
                 engine: EngineFactory | None = None, faults: Any = (), strict: bool = True,
                 thread_limit: float = DEFAULT_THREAD_LIMIT, name: str | None = None) -> None:
        from relay.offline.faults import FaultPlan

        self.dialect = get_dialect(dialect) if isinstance(dialect, str) else dialect
        self.gemini = isinstance(self.dialect, GeminiDialect)
        self.tools: ToolRegistry = tool_registry(tools)
        self.strict = strict
        self.name = name or f"{self.kind} ({self.dialect.name})"
        self.loop = VirtualLoop(thread_limit=thread_limit)
        self._time = self.loop.time
        self.config = config or EngineConfig(mode="proxy", strict=strict)
        built: Engine = (engine or new_engine)(self.tools, dialect=self.dialect, config=self.config,
                                               session_id="harness", id_prefix="relay")
        self.engine = built
        self.records: list[CallRecord] = []   # what the engine wrote ahead (`Remember`), in order
        self.frames: list[Frame] = []
        self.notices: list[Notice] = []
        self.notes: list[tuple[int, float, str, dict[str, Any]]] = []   # relay lines: (frames before, t, kind, fields)
        self.marks: list[tuple[int, float, str, str]] = []   # (frames before it, t, kind, text)
        self.closed = False   # the session has ended (closed, or its upstream dropped)
        self.saved: Path | None = None
        self.faults = FaultPlan(faults, self)
        self._inbox: deque[tuple[str, str | bytes]] = deque()   # the wire: frames on their way in
        self._pumping = False
        self._problems: list[BaseException] = []
        self.upstream = PeerTransport(self._upstream_gets, express=self.express_lane)
        self.caller = PeerTransport(self._caller_gets, express=self.express_lane)
        self.session = HarnessLoop(self, self.loop, built, upstream=self.upstream,
                                   client=self.caller if self.config.has_client else None, clock=self.loop.time,
                                   recorder=KeptFrames(self._log, self._note), on_notice=self.notices.append,
                                   write_ahead=Remembered(self.records))   # type: ignore[arg-type]
        self.session.open()   # its readers start reading as the loop first runs

    # ---- time --------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Virtual seconds since the session began."""
        return self.loop.time()

    def advance(self, seconds: float) -> None:
        """Let `seconds` of virtual time pass: tools run, timers fire, the upstream answers."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        self._run(self.now + seconds)

    def run_until_quiet(self, limit: float = 120.0) -> float:
        """Advance until nothing is left to happen (no handler running, no timer pending), at most
        `limit` virtual seconds; returns the seconds that passed."""
        start = self.now
        while self.now - start < limit and not self.closed:
            deadline = self.engine.next_deadline()
            running = self._handlers
            if not running and deadline is None and not self.faults.pending():
                break
            self._run(min(start + limit, deadline if deadline is not None and not running
                          else self.now + 1.0))
        return self.now - start

    def _run(self, moment: float) -> None:
        if self.closed and moment > self.now:
            raise SessionOver(f"the session ended at {self.now:.3f} s")
        self.loop.run_until(moment)
        self._raise_problems()

    def _raise_problems(self) -> None:
        if self._problems:
            problem = self._problems.pop(0)
            self._problems.clear()
            raise problem

    def task_failed(self, error: BaseException) -> None:
        """A task of the session's (a handler's, whose outcome went to the engine) raised: the
        engine's own failure (strict mode), raised at the end of the step it happened in."""
        self._problems.append(error)

    def fail(self, expected: str, came: str) -> None:
        """Strict mode: stop the step with a failure pointing at the latest event."""
        timeline = self.timeline
        self._problems.append(failure(timeline, expected, came, len(timeline) - 1 if len(timeline) else None))

    # ---- frames between the engine and its peers ------------------------------------------------
    def _log(self, direction: str, frame: str | bytes) -> None:
        """The loop's recorder (`KeptFrames`): a frame as it crossed, at the loop's time."""
        frames = self.frames
        # numbered as the lines of the recording `save` writes (its header is line 1)
        if type(frame) is str:
            frames.append(Frame(self._time(), direction, None, frame, None, len(frames) + 2))
        else:
            frames.append(Frame(self._time(), direction, None, None, frame, len(frames) + 2))   # type: ignore[arg-type]

    def _note(self, kind: str, fields: dict[str, Any]) -> None:
        """The loop's recorder: a relay line (a tool call's notice, a handler's finish), after the
        frames kept so far, at the loop's time."""
        self.notes.append((len(self.frames), self._time(), kind, fields))

    def mark(self, kind: str, text: str, *, ahead: int = 0) -> None:
        """Something the timeline should show that is no frame (the session closing, a fault), after
        the frames kept so far and `ahead` more (a fault on a frame not kept yet)."""
        self.marks.append((len(self.frames) + ahead, self.now, kind, text))

    def from_upstream(self, frames: list[str | bytes]) -> None:
        self._queue_upstream(frames)
        self._pump()

    def _queue_upstream(self, frames: list[str | bytes]) -> None:
        for frame in frames:
            self._inbox.extend(("upstream", delivered) for delivered in self.faults.deliveries(frame))

    def from_caller(self, frames: list[str | bytes]) -> None:
        self._inbox.extend(("client", frame) for frame in frames)
        self._pump()

    def _upstream_gets(self, frame: str | bytes) -> None:
        """The relay wrote `frame` on the upstream's socket: what the upstream answers joins the
        wire (handed to the relay once the round that wrote it is over)."""
        self._queue_upstream(self._upstream_receive(frame))

    def _caller_gets(self, frame: str | bytes) -> None:
        """The relay wrote `frame` on the caller's socket: what the caller answers joins the wire."""
        try:
            answers = self._caller_receive(frame)
        except Exception as exc:   # the test's own code: the step fails with it, not the loop's callback
            self._problems.append(CallerFailed(f"the caller's own tool raised {type(exc).__name__}: {exc}"))
            return
        if answers:
            self._inbox.extend(("client", answer) for answer in answers)

    def _pump(self) -> None:
        """Hand the loop's readers what arrived, in order; what it causes arrives after (never
        nested: the loop's rounds end with a pump, which the outer one carries on)."""
        if self._pumping:
            return
        self._pumping = True
        passed = 0
        upstream, caller = self.upstream, self.caller
        try:
            while self._inbox and not self.closed:
                passed += 1
                if passed > MAX_FRAMES_AT_ONCE:
                    self._inbox.clear()
                    raise SessionOver(f"the session does not settle: more than {MAX_FRAMES_AT_ONCE} frames passed at "
                                      f"{self.now:.3f} s without a pause (the relay and its peers answer each other "
                                      "in a loop?)")
                side, frame = self._inbox.popleft()
                (upstream if side == "upstream" else caller).arrive(frame)
        finally:
            self._pumping = False

    # ---- what the relay's loop tells the harness (relay/offline/peers.py) -------------------------
    def _round_over(self, outermost: bool, more: bool) -> None:
        """The loop carried out a round of the engine's actions (its frames written)."""

    def act_start_handler(self, action: StartHandler) -> None:
        """The engine starts a handler: the loop's runner runs it (or a fault's stand-in)."""
        self.session.start_handler(action)
        self.faults.started(action)

    def relay_closes(self, action: Close) -> None:
        """The engine closes the session (the loop ends it)."""
        self.mark(CLOSED, f"the relay closed the {action.target} ({action.code}: {action.reason})")

    # ---- handlers: the relay's runner, on the virtual loop ----------------------------------------
    @property
    def _handlers(self) -> Any:
        """The calls whose handler runs (those the runner has not reported or been told to cancel)."""
        runner = self.session._runner
        assert runner is not None
        return runner.calls

    def _stand_in(self, action: StartHandler) -> Run:
        return self.faults.handler(action) or self._handler(action)

    def _handler(self, action: StartHandler) -> Run:
        """The tool's own handler, as the relay's runner runs it (a sync tool in a thread of the
        virtual loop): what a fault or the explorer's perturbation wraps."""
        runner = self.session._runner
        assert runner is not None
        return lambda: runner.call_handler(action)

    def _handler_finished(self, call_id: str, outcome: Outcome) -> None:
        """The runner's report, to the engine as every driver gives it (unless the session is
        over); what it causes is delivered as the round ends."""
        if not self.closed:
            self.session.report_finished(call_id, outcome)

    def _engine_input(self, give: Callable[[], list[Action]]) -> None:
        """Something for the engine beside the loop's own inputs (what a perturbation makes): its
        actions carried out by the loop."""
        if not self.closed:
            self.session._apply(give())

    # ---- ending -------------------------------------------------------------------------------
    def end(self, reason: str) -> None:
        """The session is over (the relay closes it): running handlers are cancelled, unanswered
        calls abandoned."""
        if self.session.stop("relay", NORMAL_CLOSURE, reason):
            self.mark(CLOSED, reason)

    def close(self) -> None:
        """End the session (if it has not ended) and free its loop."""
        if self.loop.is_closed():
            return
        self.end("session closed")
        self.loop.run_until(self.now)   # let the cancelled handlers finish
        self.loop.close()

    def __enter__(self) -> HarnessSession:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ---- looking ------------------------------------------------------------------------------
    @property
    def ledger(self) -> Any:
        """The engine's call book: every call, its state, output and outcome."""
        return self.engine.ledger

    @property
    def timeline(self) -> Timeline:
        """What happened so far, as events (`relay.offline.timeline`)."""
        outcomes = decided_outcomes(self.engine.ledger)
        silent = not_owed_speech(self.engine.ledger)
        timeline = Timeline.from_frames(self.frames, dialect=self.dialect, source=self.name,
                                        relay_tools=[spec.name for spec in self.tools], outcomes=outcomes,
                                        silent_calls=silent, inspect=self._inspect_command)
        if self.marks:
            timeline.events = _with_marks(timeline.events, self.marks)
        return timeline

    def expect(self) -> Expect:
        """Expectations walking this session's events from the start."""
        return Expect(self.timeline)

    def check_invariants(self, *names: str, silent: Any = ()) -> None:
        """Fail when a session-wide invariant does not hold (all of them unless named)."""
        check_invariants(self.timeline, *names, silent=silent)

    def report(self) -> str:
        """The session as a replay report shows one: its timeline and how each relay call ended."""
        lines = [f"{self.name}: {self.now:.3f} s", "", "timeline:", self.timeline.render(), "", "calls the relay ran:"]
        relay_calls = [entry for entry in self.engine.ledger if entry.relay_owned]
        outcomes = decided_outcomes(relay_calls)
        for entry in relay_calls:
            lines.append(f"  {entry.name} {entry.call_id}: {outcomes.get(entry.call_id) or entry.state.value} "
                         f"[{entry.output_status}] -> {_clip(entry.output)}")
        if not relay_calls:
            lines.append("  none")
        return "\n".join(lines)

    def save(self, directory: str | Path | None = None) -> Path:
        """Write the session as a relay recording (for `relay inspect`, `relay replay`); into
        `directory`, else `sessions_dir()`. A failing expectation saves it there for the `relay
        inspect` command its message ends with. Raises OSError when it cannot be written whole."""
        from relay.recording.writer import RecordingWriter

        target = Path(directory) if directory is not None else sessions_dir()
        clock = 0.0   # the frames and notes carry their own times; the end line's is set below
        writer = RecordingWriter(target, session_id=f"{self.kind}-{self.dialect.name}", dialect=self.dialect.name,
                                 upstream="harness", tools=[spec.name for spec in self.tools],
                                 mode=self.config.mode.value,
                                 clock=lambda: clock, extra_header=self.engine.recording_header())
        def frames_up_to(end: int) -> None:
            for frame in self.frames[written:end]:
                writer.record(frame.direction, frame.raw if frame.raw is not None else frame.binary or b"", t=frame.t)

        written = 0
        with writer:   # each relay line after the frames that came before it, at its virtual time
            for before, t, kind, fields in self.notes:
                frames_up_to(before)
                written = max(written, before)
                writer.record_notice(kind, fields, t=t)
            frames_up_to(len(self.frames))
            # the end line's `t`: when the session ended (a replay fires no timer due after it),
            # or, for one still open, how long it has run
            clock = next((t for _, t, kind, _ in reversed(self.marks) if kind == CLOSED), self.now)
        if writer.failed:   # the writer stops rather than raise (a live session goes on): a save must not
            raise OSError(writer.failure or f"cannot write {writer.path}")
        self.saved = writer.path
        return writer.path

    def _inspect_command(self) -> str | None:
        try:
            path = self.saved or self.save()
        except OSError:
            return None
        return f"relay inspect {path}"

    # ---- what a subclass supplies ------------------------------------------------------------------
    def _upstream_receive(self, frame: str | bytes) -> list[str | bytes]:
        """A frame the relay sent upstream arrives; what the upstream sends back at once."""
        raise NotImplementedError

    def _caller_receive(self, frame: str | bytes) -> list[str | bytes]:
        """A frame the relay sent the caller arrives; what the caller sends back at once."""
        return []

    def overhear(self, frame: str | bytes) -> None:
        """A frame the upstream sent the relay, lost on its way (its connection away): whoever
        else is on the server's session hears it all the same (a sidecar's application:
        relay/offline/scripted.py); here, nobody."""


def sessions_dir() -> Path:
    """Where a session is saved when no directory is given: `$RELAY_SESSIONS_DIR`, else
    `relay-sessions/` in the system's temporary directory (shared by every test run on the
    machine, so a suite that wants its own sets the variable, as the relay's own does)."""
    chosen = os.environ.get(SESSIONS_DIR_ENV)
    return Path(chosen) if chosen else Path(tempfile.gettempdir()) / SESSIONS_DIR_NAME


def _with_marks(events: list[Any], marks: list[tuple[int, float, str, str]]) -> list[Any]:
    """The events with the session's marks put where they happened (after the events read from
    the frames before them), renumbered."""
    lines = sorted(event.line for event in events if event.line is not None)
    placed: list[tuple[tuple[int, int], Any]] = [((index, 1), event) for index, event in enumerate(events)]
    for count, t, kind, text in marks:
        after = bisect_right(lines, count + 1)   # the events read from a line up to the mark's
        placed.append(((after, 0), Event(0, round(t, 6), kind, text=text, by="relay")))
    ordered = [event for _, event in sorted(placed, key=lambda pair: pair[0])]
    return [event if event.index == index else replace(event, index=index) for index, event in enumerate(ordered)]


def _clip(text: str | None, limit: int = 100) -> str:
    text = (text or "").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."
