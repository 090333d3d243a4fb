"""A recording played to the relay's own `SessionLoop` on virtual time (relay/offline/replay.py).

The replayed relay is the live one: a `ReplayLoop` (the harness's `HarnessLoop`, relay/offline/
peers.py, with the replay's ports) on a `VirtualLoop`, between the recording's upstream (a
`RecordedUpstream`, relay/offline/recorded_upstream.py) and its client (a `PeerTransport` that
answers nothing). Its handlers run on the virtual loop with the loop's runner, so a tool's sleep
takes no real time; its timer fires the engine's deadlines at their virtual moments.

`RecordedPlay` is the recorded upstream's player, a task of the virtual loop: each recorded frame
is handed to the relay's reader at its recorded moment, or later, once its **gate** opens. A
frame the relay received after it sent something, in the recording, waits until the relay under
test has sent its counterpart (`RecordedUpstream.take`), or until nothing could still make it
send it (no handler runs and the engine has no deadline; or `gate_timeout` virtual seconds passed
with only handlers running). Where the recording says a handler finished (its `handler_finished`
lines, relay/offline/replay_finishes.py), its report is held, or waited for, until the play
reaches that line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from typing import Any, Callable, Iterable

from relay.engine import CancelHandler, Close, GeminiEngine, Notice, SendUpstream
from relay.engine.going_away import GOING_AWAY
from relay.offline.peers import HarnessLoop, PeerTransport
from relay.offline.recorded_upstream import RecordedUpstream
from relay.offline.replaying import ReplaySends
from relay.recording.format import CLIENT_TO_RELAY, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY, Frame, Recording
from relay.session.loop import SessionLoop

log = logging.getLogger("relay.replay")

DUE = 1e-6
"""How near now an engine's deadline is due (`ReplayLoop.fire_due`)."""


class ReplayLoop(HarnessLoop):
    """The relay's `SessionLoop` as a replay runs it: the harness's loop on virtual time, its
    ports the replay's (`harness` is the replay, relay/offline/replay.py): the session ends when
    the recording does, not when the engine closes it; a Gemini session sent away resumes as the
    live one does; a handler's report goes where the recording placed it."""

    def act_close(self, action: Close) -> None:
        """The recording decides when the replayed session ends."""

    def act_notice(self, action: Notice) -> None:
        """A Gemini session the service sent away resumes as the live one did
        (relay/edges/going_away.py); other notices as the loop's."""
        if action.kind == GOING_AWAY and isinstance(self.engine, GeminiEngine):
            frame, actions = self.engine.resumption_setup(self.clock())
            if frame is not None:
                self.act_send_upstream(SendUpstream(frame))
            self._apply(actions)
            return
        super().act_notice(action)

    def act_cancel_handler(self, action: CancelHandler) -> None:
        super().act_cancel_handler(action)
        self.harness.cancelled(action)

    def _handler_yielded(self, call_id: str, value: Any) -> None:
        self.harness._handler_yielded(call_id, value)

    def report_yielded(self, call_id: str, value: Any) -> None:
        """A streaming handler's value to the engine, as every driver gives it."""
        SessionLoop._handler_yielded(self, call_id, value)

    def _deadline_left_behind(self, now: float, after: float) -> None:
        # firing it again would never move time, and the replay would hang: said, and ignored
        log.error("the engine kept a deadline its tick did not move; ignoring it",
                  extra={"t": now - self.harness.base_time, "overdue_seconds": now - after})

    def fire_due(self) -> None:
        """The engine's deadlines due by now fired, each at its own moment (the loop's timer would
        fire them as this moment's turn comes: the play wants them fired before it goes on). A
        deadline within a microsecond of now is due: the recording's times and the engine's sums
        of them differ in their last bits, and the loop's clock would not move for the difference
        (a timer that close is run at once, the clock where it is)."""
        while self.end is None and (deadline := self._next_due()) is not None and deadline <= self.clock() + DUE:
            self._fire_deadline(max(deadline, self.clock()))

    def _timer_fires(self) -> None:
        self.fire_due()
        super()._timer_fires()


class RecordedPlay:
    """The recorded upstream's player (see the module docstring): `run` on the virtual loop."""

    def __init__(self, replay: Any, frames: Iterable[Frame], total: int, *, gate_timeout: float,
                 progress: Callable[[int, int], None] | None) -> None:
        self.replay = replay
        self.session: ReplayLoop = replay.session
        self.upstream: RecordedUpstream = replay.upstream
        self.caller: PeerTransport | None = replay.caller
        self.sends: ReplaySends = replay.upstream.recorded_sends
        self.frames = frames
        self.total = total
        self.gate_timeout = gate_timeout
        self.progress = progress
        self.base = replay.base_time
        self.ended_at = recorded_end(replay.recording)
        self._changed: asyncio.Event | None = None

    # ---- waiting on the virtual clock --------------------------------------------------------
    def _now(self) -> float:
        return self.session.clock()

    def moved(self) -> None:
        """Something happened the play may wait for (a send, a handler's report)."""
        if self._changed is not None:
            self._changed.set()

    async def _until(self, moment: float) -> None:
        """Let the session run to `moment` (its handlers, its timer), then fire what is due."""
        delay = moment - self._now()
        if delay > 0:
            await asyncio.sleep(delay)
        self.session.fire_due()

    async def _wait(self, moment: float) -> None:
        """Let the session run until something happens (`moved`) or `moment` comes."""
        self._changed = changed = asyncio.Event()
        try:
            await asyncio.wait_for(changed.wait(), max(0.0, moment - self._now()))
        except TimeoutError:
            pass
        finally:
            self._changed = None
        self.session.fire_due()

    def _running(self) -> Any:
        runner = self.session._runner
        assert runner is not None
        return runner.calls

    async def _while(self, busy: Callable[[], bool], cap: float) -> None:
        """Run the session while `busy()` and handlers run, until `cap` at the latest (each step
        to the engine's next deadline, if it comes first)."""
        while busy() and self._running() and self._now() < cap:
            deadline = self.session._next_due()
            await self._wait(cap if deadline is None else min(cap, deadline))

    # ---- the play ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Every recorded frame, then what the handlers and timers still do."""
        for index, frame in enumerate(self.frames):
            await self._finishes_before(frame.line_no)
            await self._until(self.base + frame.t)
            await self._play(frame)
            if self.progress is not None:
                self.progress(index + 1, self.total)
        await self._finishes_before(math.inf)

    async def _finishes_before(self, line_no: float) -> None:
        """What the handlers reported (finishes, a streaming handler's values) recorded before line
        `line_no`, each at its recorded moment: a handler still running is waited for (at most the
        gate timeout), what came early was held (`RecordedFinishes`); after the last line, all
        that is still held."""
        finishes = self.replay.finishes
        for note in finishes.reached(line_no):
            call_id = str(note.fields["call_id"])
            await self._while(lambda: call_id in self._running() and not finishes.held(call_id),
                              self._now() + self.gate_timeout)
            await self._until(self.base + note.t)
            for report in finishes.release(call_id):
                self.replay.report(call_id, report)
        if line_no == math.inf:
            for call_id, report in finishes.left():
                self.replay.report(call_id, report)

    async def _play(self, frame: Frame) -> None:
        sends = self.sends
        if frame.direction == RELAY_TO_UPSTREAM:
            sent = sends.sent_event(frame)
            if self.replay.relay_recording and sent is not None:
                for key, recorded in sends(sent):
                    await self._gate(key, recorded, frame.t)
            return
        payload = sends.payload(frame)
        if payload is None:
            return
        if frame.direction == UPSTREAM_TO_RELAY:
            ids = self.upstream.ids
            if frame.event is not None and ids.mapping:
                payload = json.dumps(ids.rewrite(frame.event), ensure_ascii=False)
            # what the frame says goes on the timeline before what the relay did about it
            t = self._now() - self.base
            self.replay.timeline += [f"{t:9.3f}  {line}" for line in sends.timeline(frame)]
            self.replay.arrives("upstream", payload)
        elif frame.direction == CLIENT_TO_RELAY and self.caller is not None:
            self.replay.arrives("client", payload)

    async def _gate(self, key: Any, recorded: dict[str, Any], t: float) -> None:
        """The recorded send `recorded` is reached: wait for the relay's counterpart (see the
        module docstring), then compare them."""
        upstream = self.upstream
        upstream.recorded(key, recorded)
        produced = upstream.take(key)
        cap = self._now() + self.gate_timeout
        while produced is None and self.session.end is None:
            deadline = self.session._next_due()
            if not self._running():
                if deadline is None:
                    break   # nothing could still make the relay send it
                await self._until(deadline)
            elif self._now() >= cap:
                break
            else:
                await self._wait(cap if deadline is None else min(cap, deadline))
            produced = upstream.take(key)
        upstream.match(key, recorded, produced, t)

    async def drain(self) -> None:
        """After the last frame: let running handlers finish (at most the gate timeout) and the
        engine's timers fire (at most 100), those due by the recorded session's end only when the
        recording says when it ended: a timer due later never fired in it (a follow-up asked for
        again when the first went unanswered, after the server had closed the session)."""
        await self._while(lambda: True, self._now() + self.gate_timeout)
        last = math.inf if self.ended_at is None else self.base + self.ended_at + DUE
        for _ in range(100):
            deadline = self.session._next_due()
            if deadline is None or self.session.end is not None or deadline > last:
                break
            await self._until(deadline)


def recorded_end(recording: Recording) -> float | None:
    """When the recorded session ended (its end line's `t`), if the recording says: not without an
    end line (a session still running, or killed), nor with one before its last frame or note
    (the test harness wrote 0 there before it kept its sessions' end)."""
    end_t = recording.end_t
    if recording.end is None or end_t is None:
        return None
    last = max([frame.t for frame in recording.frames] + [note.t for note in recording.notes], default=0.0)
    return end_t if end_t >= last else None


__all__ = ["RecordedPlay", "ReplayLoop", "recorded_end"]
