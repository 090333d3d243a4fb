"""Replay a recorded session against (possibly changed) tool handlers, offline.

The upstream side of the recording is played to a fresh engine with the given tools; its
handlers really run. **Causal gating**: an upstream event that, in the recording, came after the
relay sent something is released only once the relay under test has sent its counterpart
(matched by kind and call id, ids re-mapped), or it is clear that it never will (the engine is
idle and nothing it waits for is running, or the gate timeout passed). Time is virtual by default
(the recorded `t`, as fast as possible); `realtime=True` keeps the recorded pacing.

What the relay under test sent is compared with what was recorded: outputs (text and status),
streaming updates, follow-up and filler responses, cancels and tool declarations. Every
difference is a divergence: `missing` (recorded, not sent now), `extra` (sent now, not recorded)
or `changed` (both, different), with a readable diff. Forwarded client frames are the client's
and are not compared. Plain event logs (server events only, as an application logs them) replay
without gating and report what the relay would have done.

A request for a response the recording holds no answer to (a new filler) is answered at once,
as a provider would (else the relay sends it again every 15 s); one sent again is one divergence.

MCP tools (the recording's header lists them) are answered from the recording by default, or by
live servers with `mcp_answers="live"` (relay/offline/mcp_answers.py).

The recording says its dialect (`Recording.dialect`), and the dialect says how its frames are
read back (`replay_sends` in relay/offline/sends.py, a reader per tool flow): which are fed to the engine, which
sends are compared and by what key. Gemini Live recordings replay on a `GeminiEngine`, with the
server's binary frames as they were; there the relay's sends are its answers, one
`FunctionResponse` at a time, matched by call id and by their order for that call, and the setup
it forwarded with its declarations.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import time
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterator

import anyio

from relay.dialects import DIALECT_CHOICES, DIALECTS, Dialect, get_dialect
from relay.engine import (
    CancelHandler,
    Close,
    EngineConfig,
    GeminiEngine,
    Notice,
    Outcome,
    SendClient,
    SendUpstream,
    StartHandler,
    new_engine,
)
from relay.engine.calls import CallOutcome
from relay.engine.going_away import GOING_AWAY
from relay.engine.records import CallRecord
from relay.errors import UnusableInput
from relay.mcp.servers import ToolSet
from relay.offline.mcp_answers import MCP_ANSWERS, Moments, with_recorded_mcp_tools
from relay.offline.replay_finishes import RecordedFinishes, Report
from relay.offline.replay_result import Divergence, ReplayCall, ReplayResult, render_report
from relay.offline.replaying import (
    REQUEST,
    Key,
    ReplaySends,
    Requests,
    clip,
    counted,
    json_object,
)
from relay.offline.sends import replay_sends
from relay.offline.timeline import Timeline
from relay.recording.format import (
    CLIENT_TO_RELAY,
    HANDLER_FINISHED_NOTE,
    HANDLER_YIELDED_NOTE,
    RELAY_TO_UPSTREAM,
    UPSTREAM_TO_RELAY,
    Frame,
    Recording,
)
from relay.recording.audio import without_audio
from relay.recording.reader import iter_frames, read_recording
from relay.session.driver import DriverCore
from relay.tools import ToolRegistry
from relay.tools.mcp_config import ApprovalPolicy, McpSettings
from relay.tools.sources import ToolSources

log = logging.getLogger("relay.replay")

DEFAULT_GATE_TIMEOUT = 10.0

# what a replay found is relay.offline.replay_result's; named here too, beside what produces it
__all__ = ["DEFAULT_GATE_TIMEOUT", "Divergence", "ReplayCall", "ReplayResult", "check_same_wire",
           "render_report", "replay", "replay_async"]


# ---- matching what was sent ---------------------------------------------------------------------
def diff_of(recorded: dict[str, Any], produced: dict[str, Any], sends: ReplaySends) -> str:
    def lines(event: dict[str, Any]) -> list[str]:
        shown = sends.compared(event)
        item = shown.get("item")
        if isinstance(item, dict) and isinstance(item.get("output"), str):
            # outputs are usually JSON text: show them structured so the diff points at the field
            try:
                item = {**item, "output": json.loads(item["output"])}
            except ValueError:
                pass
            shown = {**shown, "item": item}
        return json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False).splitlines()

    return "\n".join(difflib.unified_diff(lines(recorded), lines(produced), "recorded", "replayed",
                                          lineterm="", n=2))


class _IdMap:
    """Recorded relay ids -> the ids the relay under test chose for the same things."""

    def __init__(self, id_prefix: str | None) -> None:
        self.id_prefix = id_prefix
        self.mapping: dict[str, str] = {}

    def learn(self, recorded: dict[str, Any], produced: dict[str, Any]) -> None:
        for path in (("event_id",), ("item", "id")):
            old, new = _dig(recorded, path), _dig(produced, path)
            if isinstance(old, str) and isinstance(new, str) and old != new:
                self.mapping[old] = new

    def rewrite(self, event: dict[str, Any]) -> dict[str, Any]:
        if not self.mapping:
            return event
        return _replace_strings(event, self.mapping)


def _dig(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _replace_strings(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        return mapping.get(value, value)
    if isinstance(value, dict):
        return {k: _replace_strings(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_strings(v, mapping) for v in value]
    return value


# ---- the replay --------------------------------------------------------------------------------
class _Replayer(DriverCore):
    """The replay's driver of the engine (relay/session/driver.py): its ports compare what the
    relay sends with the recording and answer what it asks of the provider; its clock is the
    recording's."""

    def __init__(self, recording: Recording, registry: ToolRegistry, *, dialect: Dialect | None,
                 realtime: bool, gate_timeout: float, progress: Callable[[int, int], None] | None,
                 moments: Moments | None = None) -> None:
        header = recording.header or {}
        self.recording = recording
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
        )
        dialect = dialect or recording.dialect
        self.records: list[CallRecord] = []   # what the replayed engine wrote ahead (`Remember`)
        self._init_driver(new_engine(registry, dialect=dialect, config=config,
                                     session_id=str(header.get("session_id", recording.path.stem)),
                                     id_prefix=self.id_prefix or "replay"), records=self.records)
        self._produced_sends = replay_sends(dialect, self.engine.id_prefix)
        self._recorded_sends = replay_sends(dialect, self.id_prefix)
        self._requests = Requests(recording.frames, replay_sends(dialect, self.id_prefix))
        self._unanswered: list[tuple[Key, dict[str, Any]]] = []   # requests the recording holds no answer to
        self._answering = False   # see _answer_requests
        self.base_time = _epoch(header.get("started_at"))
        self.now = self.base_time
        self.realtime = realtime
        self.gate_timeout = gate_timeout
        self.progress = progress
        self.ids = _IdMap(self.id_prefix)
        self.produced: list[dict[str, Any]] = []          # every SendUpstream, in order
        self.unmatched: list[tuple[Key, dict[str, Any], float]] = []   # with when it was sent
        self.divergences: list[Divergence] = []
        self.timeline: list[str] = []
        self.recorded_outputs: dict[str, str] = {}
        self.frames: list[Frame] = []                     # the session as replayed
        self._progress = anyio.Event()
        self.moments = moments or Moments()   # handlers waiting for a recorded moment
        self.finishes = RecordedFinishes(recording)   # each handler's finish where it was recorded

    # ---- the driver's ports (relay/session/driver.py) ----
    def _moment(self) -> float:
        return self.now

    def _round_over(self, outermost: bool, more: bool) -> None:
        self._answer_requests()

    def act_send_upstream(self, action: SendUpstream) -> None:
        event = json_object(action.frame)   # Gemini forwards a client's malformed frame as it is
        if event is None:
            return
        self._keep(RELAY_TO_UPSTREAM, action.frame)
        self.produced.append(event)
        for key, part in self._produced_sends(event):
            self.unmatched.append((key, part, round(self._t(), 6)))
            self._note_send(part, key)
            if self._requests.unanswered(key, part):
                self._unanswered.append((key, part))
        self._progress.set()

    def act_start_handler(self, action: StartHandler) -> None:
        self.timeline.append(f"{self._t():9.3f}  run   {action.tool.name}({_args(action)}) "
                             f"call_id={action.call_id}")
        super().act_start_handler(action)

    def act_cancel_handler(self, action: CancelHandler) -> None:
        super().act_cancel_handler(action)
        self.finishes.drop(action.call_id)   # what a cancelled call's handler reported is never heard
        self.timeline.append(f"{self._t():9.3f}  cancel {action.call_id}: {action.reason}")

    def act_send_client(self, action: SendClient) -> None:
        """The recorded client is not here to answer: what the relay sends it is compared with the
        recording through the upstream's side only."""

    def act_notice(self, action: Notice) -> None:
        """A replay reports divergences and its timeline, not the live session's notices; a Gemini
        session the service sent away resumes as the live one did (relay/edges/going_away.py)."""
        if action.kind == GOING_AWAY and isinstance(self.engine, GeminiEngine):
            frame, actions = self.engine.resumption_setup(self.now)
            if frame is not None:
                self.act_send_upstream(SendUpstream(frame))
            self._apply(actions)

    def act_close(self, action: Close) -> None:
        """The recording decides when the replayed session ends."""

    def _answer_requests(self) -> None:
        """Answer the requests no recorded frame answers, as a provider would, once the actions
        that came with them are sent."""
        if self._answering:
            return
        self._answering = True
        try:
            while self._unanswered:
                key, event = self._unanswered.pop(0)
                self.timeline.append(f"{self._t():9.3f}  recv  the replay's answer to {self._produced_sends.describe(key)}")
                for frame in self._produced_sends.provider_answer(event, self._requests.sent):
                    self._keep(UPSTREAM_TO_RELAY, frame)
                    self._apply(self.engine.receive_upstream(frame, self.now))
        finally:
            self._answering = False

    def _keep(self, direction: str, frame: str | bytes) -> None:
        """Keep a frame of the session as replayed, without its audio (`without_audio`)."""
        text, data = (frame, None) if isinstance(frame, str) else (None, frame)
        self.frames.append(without_audio(Frame(self._t(), direction, None, text, data, 0)))

    def _note_send(self, event: dict[str, Any], key: Key) -> None:
        answer = self._produced_sends.answer(key, event)
        if answer is not None:
            call_id, text, status = answer
            self.timeline.append(f"{self._t():9.3f}  send  {key[0]} {call_id} [{status}] {clip(text)}")
        else:
            self.timeline.append(f"{self._t():9.3f}  send  {self._produced_sends.describe(key)}")

    def _handler_finished(self, call_id: str, outcome: Outcome) -> None:
        if not self.finishes.hold(call_id, HANDLER_FINISHED_NOTE, outcome):   # else it lands where it was recorded
            super()._handler_finished(call_id, outcome)
        self._progress.set()

    def _handler_yielded(self, call_id: str, value: Any) -> None:
        if not self.finishes.hold(call_id, HANDLER_YIELDED_NOTE, value):
            super()._handler_yielded(call_id, value)
        self._progress.set()

    def _report(self, call_id: str, report: Report) -> None:
        kind, value = report
        if kind == HANDLER_FINISHED_NOTE:
            super()._handler_finished(call_id, value)
        else:
            super()._handler_yielded(call_id, value)

    async def _finishes_before(self, line_no: float) -> None:
        """What the handlers reported (finishes, a streaming handler's values) recorded before line
        `line_no`, each at its recorded moment: a handler still running is waited for (at most the
        gate timeout), what came early was held (`RecordedFinishes`); after the last line, all
        that is still held."""
        for note in self.finishes.reached(line_no):
            call_id = str(note.fields["call_id"])
            deadline = time.monotonic() + self.gate_timeout
            while (self._runner is not None and call_id in self._runner.calls and not self.finishes.held(call_id)
                   and time.monotonic() < deadline):
                self._progress = anyio.Event()
                with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
                    await self._progress.wait()
            self._advance_to(self.base_time + note.t)
            for report in self.finishes.release(call_id):
                self._report(call_id, report)
        if line_no == math.inf:
            for call_id, report in self.finishes.left():
                self._report(call_id, report)

    def _t(self) -> float:
        return self.now - self.base_time

    def _advance_to(self, moment: float) -> None:
        """Move virtual time forward, firing the engine's timers on their way. A deadline that a
        tick leaves where it was (the engine's fault) is logged and not fired again: firing it
        would never move time, and the replay would hang (`DriverCore._fire_deadline`)."""
        while True:
            deadline = self._next_due()
            if deadline is None or deadline > moment:
                break
            self.now = max(self.now, deadline)
            self.moments.release(self._t())
            self._fire_deadline(self.now)
        self.now = max(self.now, moment)
        self.moments.release(self._t())

    def _deadline_left_behind(self, now: float, after: float) -> None:
        log.error("the engine kept a deadline its tick did not move; ignoring it",
                  extra={"t": self._t(), "overdue_seconds": now - after})

    def _fire_next_timer(self) -> bool:
        """Move virtual time to the engine's next deadline; False when it has none."""
        deadline = self._next_due()
        if deadline is None:
            return False
        self._advance_to(deadline)
        return True

    # -- gating --
    def _take(self, key: Key) -> dict[str, Any] | None:
        for index, (candidate, event, _) in enumerate(self.unmatched):
            if candidate == key:
                del self.unmatched[index]
                return event
        return None

    async def _gate(self, recorded_frame: dict[str, Any], t: float) -> None:
        for key, recorded in self._recorded_sends(recorded_frame):
            await self._gate_one(key, recorded, t)

    async def _gate_one(self, key: Key, recorded: dict[str, Any], t: float) -> None:
        sends = self._recorded_sends
        answer = sends.answer(key, recorded)
        if answer is not None:
            self.recorded_outputs[answer[0]] = answer[1]
        produced = self._take(key)
        deadline = time.monotonic() + self.gate_timeout
        while produced is None:
            waiting_on_handlers = self._runner is not None and self._runner.running > 0
            if not waiting_on_handlers:
                # nothing running: only a timer could still make the relay send it
                if not self._fire_next_timer():
                    break
                produced = self._take(key)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._progress = anyio.Event()
            with anyio.move_on_after(remaining):
                await self._progress.wait()
            produced = self._take(key)
        what, call_id = sends.describe(key), sends.call_of(key)
        if produced is None:
            self.divergences.append(Divergence("missing", what, recorded, None, call_id=call_id, t=t))
            self.timeline.append(f"{self._t():9.3f}  MISSING {what}")
            return
        self.ids.learn(recorded, produced)
        if sends.compared(recorded) != sends.compared(produced):
            self.divergences.append(Divergence("changed", what, recorded, produced,
                                               diff_of(recorded, produced, sends), call_id=call_id, t=t))
            self.timeline.append(f"{self._t():9.3f}  CHANGED {what}")

    # -- the run --
    def _frames(self) -> Iterator[Frame]:
        """The recording's frames, audio included: read from its file one at a time when the
        recording was read without its audio (the second of two passes; no more frames than the
        first read, should a session still being written have grown since), else those it holds."""
        if self.recording.audio == "drop":
            return islice(iter_frames(self.recording.path, warnings=[]), len(self.recording.frames))
        return iter(self.recording.frames)

    async def run(self) -> None:
        total = len(self.recording.frames)
        start_wall = time.monotonic()
        async with anyio.create_task_group() as task_group:
            self._run_handlers(task_group)
            for index, frame in enumerate(self._frames()):
                if self.realtime:
                    delay = frame.t - (time.monotonic() - start_wall)
                    if delay > 0:
                        await anyio.sleep(delay)
                await self._finishes_before(frame.line_no)
                self._advance_to(self.base_time + frame.t)
                await self._play(frame)
                if self.progress is not None:
                    self.progress(index + 1, total)
            await self._finishes_before(math.inf)
            running = set(self.engine.running.call_ids())
            if running and running <= self._abandoned():   # their answers went nowhere: it ends here, as it did
                self._apply(self.engine.close(self.now, "the recorded session ended"))
            else:
                await self._drain()
            self._apply(self.engine.close(self.now, "replay finished"))
            task_group.cancel_scope.cancel()
        sends = self._produced_sends
        extra: set[tuple[Key, str]] = set()   # a request sent again is one divergence
        for key, event, t in self.unmatched:
            if key[0] != REQUEST or (key, event.get("event_id")) not in extra:
                extra.add((key, event.get("event_id")))
                self.divergences.append(Divergence("extra", sends.describe(key), None, event,
                                                   call_id=sends.call_of(key), t=t))
        unseen = self._calls_unseen()
        if unseen is not None:
            self.divergences.insert(0, unseen)

    def _abandoned(self) -> set[str]:
        """The calls the recorded session ended with unanswered (the relay's note says
        `abandoned`: its connection went first). When the handlers still running at the
        recording's end are all theirs, the replay ends there, as the session did, instead of
        waiting for answers that went nowhere."""
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

    async def _play(self, frame: Frame) -> None:
        sends = self._recorded_sends
        if frame.direction == RELAY_TO_UPSTREAM:
            sent = sends.sent_event(frame)
            if self.relay_recording and sent is not None:
                await self._gate(sent, frame.t)
            return
        payload = sends.payload(frame)
        if payload is None:
            return
        if frame.direction == UPSTREAM_TO_RELAY:
            if frame.event is not None and self.ids.mapping:
                payload = json.dumps(self.ids.rewrite(frame.event), ensure_ascii=False)
            self._keep(UPSTREAM_TO_RELAY, payload)
            # what the frame says goes on the timeline before what the relay did about it
            self.timeline += [f"{self._t():9.3f}  {line}" for line in sends.timeline(frame)]
            self._apply(self.engine.receive_upstream(payload, self.now))
        elif frame.direction == CLIENT_TO_RELAY and self.engine.config.has_client:
            self._keep(CLIENT_TO_RELAY, payload)
            self._apply(self.engine.receive_client(payload, self.now))

    async def _drain(self) -> None:
        """After the last frame: let running handlers finish (bounded) and timers fire."""
        deadline = time.monotonic() + self.gate_timeout
        while self._runner is not None and self._runner.running and time.monotonic() < deadline:
            self._progress = anyio.Event()
            with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
                await self._progress.wait()
            if not self._runner.running:
                break
        for _ in range(100):
            if not self._fire_next_timer():
                break

    def result(self) -> ReplayResult:
        calls = []
        for entry in self.engine.ledger:
            if not entry.relay_owned:
                continue
            calls.append(ReplayCall(
                call_id=entry.call_id, name=entry.name, arguments=entry.arguments, output=entry.output,
                status=entry.output_status, outcome=entry.outcome, response_id=entry.response_id,
                follow_up_response_id=entry.follow_up_response_id,
                recorded_output=self.recorded_outputs.get(entry.call_id), skipped=entry.skip_reason))
        return ReplayResult(
            path=self.recording.path, kind=self.recording.kind, calls=calls, sent=self.produced,
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


def _epoch(started_at: Any) -> float:
    from datetime import datetime

    if isinstance(started_at, str):
        try:
            return datetime.fromisoformat(started_at.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return 1_700_000_000.0


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
        registry = with_recorded_mcp_tools(tool_set.registry(), recording, moments, warnings, mcp_answers == "live")
        replayer = _Replayer(recording, registry, dialect=chosen, realtime=realtime,
                             gate_timeout=gate_timeout, progress=progress, moments=moments)
        await replayer.run()
    finally:
        await tool_set.close()
    result = replayer.result()
    result.warnings += warnings
    for name, check in (invariants or {}).items():
        message = check(result)
        if message:
            result.broken.append((name, str(message)))
    return result


def replay(path: str | Path | Recording, tools: Any = (), **options: Any) -> ReplayResult:
    """Replay a recording against `tools` (decorated functions, specs, or `--tools` SPEC strings)
    and return the calls, what was sent and the divergences. For users' own tests. A recording
    named by its path is read twice, a line at a time: first without its audio (what the replay
    holds), then with it, each frame played as it is read. Tools that cannot be loaded raise
    `relay.errors.ConfigError`; a recording that cannot be read, `UnusableInput`."""
    return anyio.run(lambda: replay_async(path, tools, **options))
