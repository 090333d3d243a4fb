"""Replay a recorded session against (possibly changed) tool handlers, offline.

The relay under test is the relay's own `SessionLoop`, with a fresh engine and the given tools,
on a virtual clock (relay/offline/replay_play.py): the recording's upstream is its upstream socket
(relay/offline/recorded_upstream.py), its client the recorded client; its handlers really run, on
that clock (a tool's `asyncio.sleep` takes no real time). **Causal gating**: an upstream event
that, in the recording, came after the relay sent something is released only once the relay
under test has sent its counterpart (matched by kind and call id, ids re-mapped), or it is clear
that it never will (nothing runs and the engine has no deadline, or the gate timeout, in virtual
seconds, passed with only handlers running). Time runs as fast as the loop goes; `realtime=True`
paces the loop's clock against the wall clock (the recorded pacing).

What the relay under test sent is compared with what was recorded: outputs (text and status),
streaming updates, follow-up and filler responses, cancels and tool declarations. Every
difference is a divergence: `missing` (recorded, not sent now), `extra` (sent now, not recorded)
or `changed` (both, different), with a readable diff. Forwarded client frames are the client's
and are not compared. Plain event logs (server events only, as an application logs them) replay
without gating and report what the relay would have done.

A request for a response the recording holds no answer to (a new filler) is answered at once,
as a provider would (else the relay sends it again every 15 s); one sent again is one divergence.

MCP tools (the recording's header lists them) are answered from the recording by default, or by
live servers with `mcp_answers="live"` (relay/offline/mcp_answers.py): their connections are the
caller's event loop's, where their calls are made; the replay's own loop runs in a worker thread
meanwhile.

The recording says its dialect (`Recording.dialect`), and the dialect says how its frames are
read back (`replay_sends` in relay/offline/sends.py, a reader per tool flow): which are fed to the engine, which
sends are compared and by what key. Gemini Live recordings replay on a `GeminiEngine`, with the
server's binary frames as they were; there the relay's sends are its answers, one
`FunctionResponse` at a time, matched by call id and by their order for that call, and the setup
it forwarded with its declarations.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterator

import anyio

from relay.dialects import DIALECT_CHOICES, DIALECTS, Dialect, get_dialect
from relay.engine import CancelHandler, EngineConfig, Outcome, StartHandler, new_engine
from relay.engine.calls import CallOutcome
from relay.engine.records import CallRecord
from relay.errors import UnusableInput
from relay.mcp.servers import ToolSet
from relay.offline.expect import own_verdict
from relay.offline.mcp_answers import MCP_ANSWERS, Moments, on_the_callers_loop, with_recorded_mcp_tools
from relay.offline.peers import KeptFrames, PeerTransport, Remembered
from relay.offline.recorded_upstream import RecordedUpstream
from relay.offline.replay_finishes import RecordedFinishes, Report
from relay.offline.replay_play import RecordedPlay, ReplayLoop
from relay.offline.replay_result import Divergence, ReplayCall, ReplayResult, render_report
from relay.offline.replaying import REQUEST, Requests, clip, counted, history_limit_of
from relay.offline.sends import replay_sends
from relay.offline.timeline import Timeline
from relay.offline.virtual import DEFAULT_THREAD_LIMIT, VirtualLoop, VirtualTimeError
from relay.recording.format import HANDLER_FINISHED_NOTE, HANDLER_YIELDED_NOTE, RELAY_TO_CLIENT, Frame, Recording
from relay.recording.audio import without_audio
from relay.recording.reader import iter_frames, read_recording
from relay.session.policy import NORMAL_CLOSURE
from relay.tools import ToolRegistry
from relay.tools.mcp_config import ApprovalPolicy, McpSettings
from relay.tools.sources import ToolSources

log = logging.getLogger("relay.replay")

DEFAULT_GATE_TIMEOUT = 10.0
IDLE_STEP = 3600.0
"""Virtual seconds the replay's loop is let run at a time (the play always waits with a timeout:
a step ends early, when the play is over)."""
REALTIME_STEP = 0.01
"""Real seconds between two steps of a replay in the recorded pacing (`realtime=True`)."""
wall_clock: Callable[[], float] = time.monotonic
wall_sleep: Callable[[float], None] = time.sleep
"""The wall clock the recorded pacing follows, and how a step waits for it."""

# what a replay found is relay.offline.replay_result's; named here too, beside what produces it
__all__ = ["DEFAULT_GATE_TIMEOUT", "Divergence", "ReplayCall", "ReplayResult", "check_same_wire",
           "render_report", "replay", "replay_async"]


# ---- the replay --------------------------------------------------------------------------------
class _Replayer:
    """One replay: the relay's own `SessionLoop` (a `ReplayLoop`, relay/offline/replay_play.py) on a
    `VirtualLoop` whose clock starts at the recording's, between the recording's upstream (a
    `RecordedUpstream`: what the relay sends it is compared with the recording) and its client
    (a socket that answers nothing: what the relay sends the client is compared through the
    upstream's side only). It is the loop's harness: the loop tells it of a handler's start, a
    handler's report (held until the recording's play reaches where it was recorded), a round's
    end (the recording's missing answers given) and hands it the frames to pass on."""

    def __init__(self, recording: Recording, registry: ToolRegistry, *, dialect: Dialect | None,
                 realtime: bool, gate_timeout: float, progress: Callable[[int, int], None] | None,
                 moments: Moments | None = None) -> None:
        header = recording.header or {}
        self.recording = recording
        self._failed: BaseException | None = None   # what a task of the session raised (`task_failed`)
        self.relay_recording = recording.kind == "relay"
        self.id_prefix: str | None = header.get("id_prefix") if self.relay_recording else None
        mode = header.get("mode", "proxy") if self.relay_recording else "replay"
        if mode not in ("proxy", "sidecar"):
            mode = "replay"
        config = EngineConfig(
            mode=mode,
            hide_tool_events=bool(header.get("hide_tool_events", True)),
            declare_tools=bool(header.get("declare_tools", mode == "proxy")),
            unknown_tools=header.get("unknown_tools", "client"),
            mcp_approvals=recorded_policy(header.get("mcp_approvals")),
            history_limit=history_limit_of(header),
        )
        dialect = dialect or recording.dialect
        self.records: list[CallRecord] = []   # what the replayed engine wrote ahead (`Remember`)
        self.engine = new_engine(registry, dialect=dialect, config=config,
                                 session_id=str(header.get("session_id", recording.path.stem)),
                                 id_prefix=self.id_prefix or "replay")
        # the loop's clock (the engine's) starts at 0, as the harness's does: seconds since the
        # epoch would be too coarse for asyncio's timers (a float's step there is 0.24 µs, above
        # the loop's clock resolution, and a timer at `now` would never be due)
        self.base_time = 0.0
        self.moments = moments or Moments()   # handlers waiting for a recorded moment
        self.moments.base = self.base_time
        self.realtime = realtime
        self.timeline: list[str] = []
        self.frames: list[Frame] = []                     # the session as replayed
        self.finishes = RecordedFinishes(recording)   # each handler's finish where it was recorded
        self.closed = False   # the session has ended (the loop says so)
        # every call the engine had, for the report: under a history limit it forgets some
        self.calls_seen: dict[str, Any] | None = {} if config.history_limit is not None else None
        self._inbox: deque[tuple[str, str | bytes]] = deque()   # frames on their way to the relay
        self._pumping = False
        self.loop = VirtualLoop(start=self.base_time, thread_limit=max(DEFAULT_THREAD_LIMIT, gate_timeout))
        self.upstream = RecordedUpstream(
            replay_sends(dialect, self.engine.id_prefix), replay_sends(dialect, self.id_prefix),
            Requests(recording.frames, replay_sends(dialect, self.id_prefix)), id_prefix=self.id_prefix,
            t=self._t, timeline=self.timeline, progress=self._moved)
        self.caller = PeerTransport(_answers_nothing) if config.has_client else None
        self.session = ReplayLoop(self, self.loop, self.engine, upstream=self.upstream, client=self.caller,
                                  clock=self.loop.time, recorder=KeptFrames(self._keep, _no_line),
                                  write_ahead=Remembered(self.records))
        self.play = RecordedPlay(self, self._frames(), len(recording.frames), gate_timeout=gate_timeout,
                                 progress=progress)

    def task_failed(self, error: BaseException) -> None:
        """A task of the replayed session raised (not a handler's failure, which is an outcome):
        the replay stops with it at the end of the loop's step, rather than leave it unretrieved."""
        if self._failed is None:
            self._failed = error

    def _raise_failed(self) -> None:
        if self._failed is not None:
            raise self._failed

    @property
    def divergences(self) -> list[Divergence]:
        return self.upstream.divergences

    def _t(self) -> float:
        return self.loop.time() - self.base_time

    def _moved(self) -> None:
        self.play.moved()

    def _keep(self, direction: str, frame: str | bytes) -> None:
        """The loop's recorder: a frame of the session as replayed, without its audio
        (`without_audio`); what the relay sent the client is not the replay's."""
        if direction == RELAY_TO_CLIENT:
            return
        text, data = (frame, None) if isinstance(frame, str) else (None, frame)
        self.frames.append(without_audio(Frame(self._t(), direction, None, text, data, 0)))

    # ---- what the relay's loop tells the replay (relay/offline/peers.py's `HarnessLoop`) -----------
    def act_start_handler(self, action: StartHandler) -> None:
        self.timeline.append(f"{self._t():9.3f}  run   {action.tool.name}({_args(action)}) "
                             f"call_id={action.call_id}")
        self.session.start_handler(action)

    def _stand_in(self, action: StartHandler) -> None:
        """The tool's own handler runs."""

    def cancelled(self, action: CancelHandler) -> None:
        self.finishes.drop(action.call_id)   # what a cancelled call's handler reported is never heard
        self.timeline.append(f"{self._t():9.3f}  cancel {action.call_id}: {action.reason}")

    def _handler_finished(self, call_id: str, outcome: Outcome) -> None:
        if not self.finishes.hold(call_id, HANDLER_FINISHED_NOTE, outcome):   # else it lands where it was recorded
            self.session.report_finished(call_id, outcome)
        self._moved()

    def _handler_yielded(self, call_id: str, value: Any) -> None:
        if not self.finishes.hold(call_id, HANDLER_YIELDED_NOTE, value):
            self.session.report_yielded(call_id, value)
        self._moved()

    def report(self, call_id: str, report: Report) -> None:
        """What a handler reported, reached where the recording placed it: to the engine."""
        kind, value = report
        if kind == HANDLER_FINISHED_NOTE:
            self.session.report_finished(call_id, value)
        else:
            self.session.report_yielded(call_id, value)

    def _round_over(self, outermost: bool, more: bool) -> None:
        """A round's frames are written: the requests the recording holds no answer to are
        answered, as a provider would (the loop hands the answers on)."""
        if outermost and not self.closed and self.upstream.unanswered:
            self._inbox.extend(("upstream", frame) for frame in self.upstream.answers())
        if self.calls_seen is not None:
            for entry in self.engine.ledger:
                self.calls_seen.setdefault(entry.call_id, entry)

    def arrives(self, side: str, frame: str | bytes) -> None:
        """A frame of the recording's, for the relay's reader of `side`."""
        self._inbox.append((side, frame))
        self._pump()

    def _pump(self) -> None:
        """Hand the loop's readers what arrived, in order; what it causes arrives after."""
        if self._pumping:
            return
        self._pumping = True
        try:
            while self._inbox and not self.closed:
                side, frame = self._inbox.popleft()
                peer = self.upstream if side == "upstream" else self.caller
                if peer is not None:
                    peer.arrive(frame)
        finally:
            self._pumping = False

    # ---- the run -----------------------------------------------------------------------------
    def _frames(self) -> Iterator[Frame]:
        """The recording's frames, audio included: read from its file one at a time when the
        recording was read without its audio (the second of two passes; no more frames than the
        first read, should a session still being written have grown since), else those it holds."""
        if self.recording.audio == "drop":
            return islice(iter_frames(self.recording.path, warnings=[]), len(self.recording.frames))
        return iter(self.recording.frames)

    def run(self) -> None:
        """The replay, start to end, on its virtual loop (in this thread): as fast as the loop
        goes, or, `realtime`, with the loop's clock paced against the wall clock from outside."""
        loop = self.loop
        try:
            self.session.open()
            task = loop.create_task(self._run())
            task.add_done_callback(lambda _: loop.stop())
            started = wall_clock()
            while not task.done():
                if self.realtime:
                    loop.run_until(self.base_time + wall_clock() - started)
                    if not task.done():
                        wall_sleep(REALTIME_STEP)
                else:
                    loop.run_until(loop.time() + IDLE_STEP)
                self._raise_failed()
            loop.run_until(loop.time())   # the cancelled handlers end
            self._raise_failed()
            task.result()
        except VirtualTimeError as exc:   # the tasks a thread holds are dropped as the loop closes
            raise VirtualTimeError(f"{exc}; a replay waits as long as its gate timeout (--gate-timeout) for a "
                                   f"sync tool, at least {DEFAULT_THREAD_LIMIT:g} s") from None
        finally:
            loop.close()
        self.upstream.extra(REQUEST)
        unseen = self._calls_unseen()
        if unseen is not None:
            self.divergences.insert(0, unseen)

    async def _run(self) -> None:
        await self.play.run()
        engine = self.engine
        runner = self.session._runner
        running = set(engine.running.call_ids()) | set(runner.calls if runner is not None else ())
        ended_with = self._abandoned() | self.finishes.never_finished(running)
        if running and running <= ended_with:   # what they do now goes nowhere: it ends here, as it did
            self.session._apply(engine.close(self.loop.time(), "the recorded session ended"))
        else:
            await self.play.drain()
        self.session.stop("relay", NORMAL_CLOSURE, "replay finished")

    def _abandoned(self) -> set[str]:
        """The calls the recorded session ended with unanswered (the relay's note says
        `abandoned`: its connection went first). When the handlers still running at the
        recording's end are all theirs, or handlers the recorded session ended with still running
        (a streaming tool's, its call answered, whose next values went nowhere:
        `RecordedFinishes.never_finished`), the replay ends there, as the session did, instead of
        waiting for what went nowhere."""
        return {call_id for call_id, fields in self.recording.tool_calls_decided().items()
                if fields.get("outcome") == CallOutcome.ABANDONED.value}

    def _calls_unseen(self) -> Divergence | None:
        """A replay that saw none of the calls the recording holds compared nothing that matters:
        never "no divergence". The recorded calls are read from the frames by either family's
        reader, whatever the header says: a dialect that cannot read them is the case in point."""
        if self.engine.ledger:
            return None
        source = str(self.recording.path)
        recorded = max((Timeline.from_frames(self.recording.frames, dialect=family, source=source).calls()
                        for family in ("openai", "gemini")), key=len)
        if not recorded:
            return None
        names = sorted({str(call.name) for call in recorded})
        return Divergence("missing", f"every call: the recording holds {counted(len(recorded), 'call')} "
                                     f"({', '.join(names)}), the relay under test saw none of them",
                          {"calls": [{"call_id": c.call_id, "name": c.name} for c in recorded]}, None,
                          call_id=recorded[0].call_id, t=recorded[0].t)

    def result(self) -> ReplayResult:
        calls = []
        entries = dict(self.calls_seen or {})
        for entry in self.engine.ledger:
            entries.setdefault(entry.call_id, entry)
        for entry in entries.values():
            if not entry.relay_owned:
                continue
            calls.append(ReplayCall(
                call_id=entry.call_id, name=entry.name, arguments=entry.arguments, output=entry.output,
                status=entry.output_status, outcome=entry.outcome, response_id=entry.response_id,
                follow_up_response_id=entry.follow_up_response_id,
                recorded_output=self.upstream.recorded_outputs.get(entry.call_id), skipped=entry.skip_reason))
        return ReplayResult(
            path=self.recording.path, kind=self.recording.kind, calls=calls, sent=self.upstream.produced,
            divergences=self.divergences, timeline=self.timeline, warnings=list(self.recording.warnings),
            anomalies=[a.message for a in self.engine.anomalies], engine=self.engine, frames=self.frames,
            internal_errors=[a.message for a in self.engine.anomalies if a.internal])


def recorded_policy(recorded: Any) -> ApprovalPolicy | None:
    """The MCP approval policy a recording's header names (None: none, or not one)."""
    if not isinstance(recorded, dict):
        return None
    allow, deny = recorded.get("allow") or [], recorded.get("deny") or []
    if not all(isinstance(p, str) for p in [*allow, *deny]):
        return None
    return ApprovalPolicy(allow=tuple(allow), deny=tuple(deny)) or None


def check_same_wire(recording: Recording, dialect: Dialect) -> None:
    """Refuse to replay a recording in a dialect of another family (Gemini Live's for an OpenAI
    session, or the reverse): its reader would find none of the recording's calls or sends, and
    the replay would pass without having compared anything."""
    recorded = recording.dialect
    if type(dialect) is type(recorded):
        return
    same_wire = [name for name in DIALECT_CHOICES if type(DIALECTS[name]) is type(recorded)]
    raise UnusableInput(f"{recording.path} is a recording of the {recorded.name} dialect; the {dialect.name} "
                        f"dialect reads another wire and would see none of it: leave the dialect out, or "
                        f"choose one of {', '.join(same_wire)}")


def _answers_nothing(frame: str | bytes) -> None:
    """The recorded client: not here to answer."""


def _no_line(kind: str, fields: dict[str, Any]) -> None:
    """The replay keeps the session's frames, not the relay's lines."""


def _args(action: StartHandler) -> str:
    return clip(", ".join(f"{k}={v!r}" for k, v in action.arguments.items()), 60)


async def replay_async(
    path: str | Path | Recording,
    tools: ToolSources = (),
    *,
    dialect: str | Dialect | None = None,
    realtime: bool = False,
    gate_timeout: float = DEFAULT_GATE_TIMEOUT,
    progress: Callable[[int, int], None] | None = None,
    mcp_answers: str = "recording",
    mcp: McpSettings | None = None,
    invariants: dict[str, Callable[[ReplayResult], Any]] | None = None,
) -> ReplayResult:
    """See `replay`. `mcp_answers`: where MCP tools' answers come from (`recording` or `live`,
    with the servers `mcp` names); `invariants`: the caller's own, each a function of the result
    that returns what broke (a message) or None, checked once the replay is over."""
    if mcp_answers not in MCP_ANSWERS:
        raise UnusableInput(f"mcp_answers is recording or live, not {mcp_answers!r}")
    if mcp_answers == "live" and (mcp is None or not mcp.servers):
        raise UnusableInput("live MCP answers need the MCP servers: --mcp or --mcp-config")
    recording = path if isinstance(path, Recording) else read_recording(path, audio="drop")
    chosen = get_dialect(dialect) if isinstance(dialect, str) else dialect
    if chosen is not None:
        check_same_wire(recording, chosen)
    tool_set = ToolSet(tools, mcp if mcp_answers == "live" else None)
    await tool_set.start()
    try:
        moments = Moments()
        warnings: list[str] = []
        registry = tool_set.registry()
        if mcp_answers == "live":   # the servers' connections are this loop's: their calls are made here
            registry = on_the_callers_loop(registry, tool_set.static)
        registry = with_recorded_mcp_tools(registry, recording, moments, warnings, mcp_answers == "live")
        replayer = _Replayer(recording, registry, dialect=chosen, realtime=realtime,
                             gate_timeout=gate_timeout, progress=progress, moments=moments)
        await anyio.to_thread.run_sync(replayer.run)   # the replay's own loop, in a thread of its own
    finally:
        await tool_set.close()
    result = replayer.result()
    result.warnings += warnings
    for name, check in (invariants or {}).items():
        message = own_verdict(check, result)
        if message:
            result.broken.append((name, message))
    return result


def replay(path: str | Path | Recording, tools: Any = (), **options: Any) -> ReplayResult:
    """Replay a recording against `tools` (decorated functions, specs, or `--tools` SPEC strings)
    and return the calls, what was sent and the divergences. For users' own tests. A recording
    named by its path is read twice, a line at a time: first without its audio (what the replay
    holds), then with it, each frame played as it is read. Tools that cannot be loaded raise
    `relay.errors.ConfigError`; a recording that cannot be read, `UnusableInput`."""
    return anyio.run(lambda: replay_async(path, tools, **options))
