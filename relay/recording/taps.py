"""Where a session's traffic goes besides its sockets: the `Recorder` protocol the session loop
records into, and `Taps`, the guarded chain the edges build it from (the traffic counter, the
session's recording, a caller's frame tap, the live inspector's view while someone watches).

One rule, kept here once: a failing recorder is dropped, never the session."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("relay.recording")


class Recorder(Protocol):
    """What crossed a session's sockets (`record`: the direction, one of
    relay.recording.format.DIRECTIONS, and the frame as it crossed), what the engine decided
    (`record_notice`: its notices, of which a recording keeps some), and the session's end
    (`close`, with the reason)."""

    def record(self, direction: str, frame: str | bytes) -> None: ...
    def record_notice(self, kind: str, fields: dict[str, Any]) -> None: ...
    def close(self, reason: str) -> None: ...


Frame = str | bytes
RecordForwarded = Callable[[str, Frame, str, Frame], None]


def forwarding_of(recorder: Recorder) -> RecordForwarded:
    """How `recorder` records a frame forwarded as it came (`received` as `frame`, then `sent_as`
    as `sent`: the same frame but for redaction), as one call: its own `record_forwarded` where it
    has one (`Taps`, the traffic counter: both directions at once, on the per-frame path), else
    `record` twice."""
    method = getattr(recorder, "record_forwarded", None)
    if method is not None:
        return method  # type: ignore[no-any-return]
    record = recorder.record

    def record_forwarded(received: str, frame: Frame, sent_as: str, sent: Frame) -> None:
        record(received, frame)
        record(sent_as, sent)

    return record_forwarded


NEVER = 1 << 62   # a lane nobody counts is never settled


class ForwardLane:
    """The frames a session forwards as they came one way (audio: received as `received`, sent
    as `sent_as`), as the loop's express lane counts them: plain integer adds on this object's
    slots, no call (`frames`, and `bytes` as received; `resized`, what redaction changed of the
    sizes sent). The chain's counting member (the traffic counter: `adopt`) takes the counts when
    it publishes, and asks to be settled every `settle_at` frames (`settle`). The chain's other
    members, which see every frame (a recording, the live inspector's view), are `others`: one
    guarded call per frame, or None when there are none. `Taps` rewires its lanes as members come
    and go, so a change reaches the next frame."""

    __slots__ = ("received", "sent_as", "frames", "bytes", "resized", "settle_at", "counter", "others")

    def __init__(self, received: str, sent_as: str) -> None:
        self.received, self.sent_as = received, sent_as
        self.frames = self.bytes = self.resized = 0
        self.settle_at = NEVER
        self.counter: Any = None   # the member that adopted it
        self.others: RecordForwarded | None = None

    def take(self) -> tuple[int, int, int]:
        """The counts so far (frames, bytes received, bytes sent minus received), now zero."""
        counts = self.frames, self.bytes, self.resized
        self.frames = self.bytes = self.resized = 0
        return counts

    def settle(self) -> None:
        """Its counter's batch is full: it publishes (and so takes this lane's counts)."""
        if self.counter is not None:
            self.counter.publish()
        else:
            self.take()


class FrameTap:
    """A function that sees every frame (`relay attach`'s `tap`, e.g. for transcripts), as a
    recorder: notices and the end are not its business."""

    def __init__(self, function: Callable[[str, str | bytes], None]) -> None:
        self.record = function

    def record_notice(self, kind: str, fields: dict[str, Any]) -> None:
        pass

    def close(self, reason: str) -> None:
        pass


class Taps:
    """One session's recorders as the one its loop records into: every frame, notice and the
    close go to each member in order. A member that raises is dropped (logged once, with its
    traceback) and the session goes on; a dropped member is not closed either.

    Members may join and leave while the session runs (the live inspector's view, while someone
    watches it): one that is not a member costs the frames nothing. The members are a tuple,
    replaced on every change, so a change during a call reaches the next frame."""

    __slots__ = ("members", "_forwarding", "_lanes", "_counter", "_others")

    def __init__(self, *members: Recorder | None) -> None:
        self._lanes: list[ForwardLane] = []
        self._counter: Any = None
        self._join(tuple(member for member in members if member is not None))

    def _join(self, members: tuple[Recorder, ...]) -> None:
        counter = next((member for member in members if hasattr(member, "adopt")), None)
        if counter is not self._counter:
            for lane in self._lanes:
                self._rehome(lane, counter)
            self._counter = counter
        self.members = members
        self._forwarding = tuple((member, forwarding_of(member)) for member in members)
        self._others = tuple(pair for pair in self._forwarding if pair[0] is not counter)
        for lane in self._lanes:
            self._call_others(lane)

    def _rehome(self, lane: ForwardLane, counter: Any) -> None:
        """`lane` counted by `counter` from now on: the counts so far go to its old counter first."""
        if self._counter is not None:
            self._counter.release(lane)
        self._adopt(lane, counter)

    @staticmethod
    def _adopt(lane: ForwardLane, counter: Any) -> None:
        lane.counter, lane.settle_at = counter, NEVER
        if counter is not None:
            counter.adopt(lane)   # sets its own settle_at

    def _call_others(self, lane: ForwardLane) -> None:
        lane.others = self._record_forwarded_by_others if self._others else None

    def lane(self, received: str, sent_as: str) -> ForwardLane:
        """A `ForwardLane` for frames forwarded as they came from `received` to `sent_as`,
        counted by the chain's first counting member (one with `adopt`), the others called."""
        lane = ForwardLane(received, sent_as)
        self._lanes.append(lane)
        self._adopt(lane, self._counter)
        self._call_others(lane)
        return lane

    def __len__(self) -> int:
        return len(self.members)

    def add(self, member: Recorder) -> None:
        if member not in self.members:
            self._join((*self.members, member))

    def remove(self, member: Recorder) -> None:
        self._join(tuple(known for known in self.members if known is not member))

    def record(self, direction: str, frame: str | bytes) -> None:
        for member in self.members:
            try:
                member.record(direction, frame)
            except Exception:
                self._drop(member, "recording a frame")

    def record_forwarded(self, received: str, frame: Frame, sent_as: str, sent: Frame) -> None:
        """A frame forwarded as it came (see `forwarding_of`): each member records both crossings
        before the next member does, as two `record` calls would have it."""
        for member, record_forwarded in self._forwarding:
            try:
                record_forwarded(received, frame, sent_as, sent)
            except Exception:
                self._drop(member, "recording a frame")

    def _record_forwarded_by_others(self, received: str, frame: Frame, sent_as: str, sent: Frame) -> None:
        """`record_forwarded` for the members a lane does not count for (`ForwardLane.others`)."""
        for member, record_forwarded in self._others:
            try:
                record_forwarded(received, frame, sent_as, sent)
            except Exception:
                self._drop(member, "recording a frame")

    def record_notice(self, kind: str, fields: dict[str, Any]) -> None:
        for member in self.members:
            try:
                member.record_notice(kind, fields)
            except Exception:
                self._drop(member, "recording a notice")

    def close(self, reason: str) -> None:
        """Close every member, in order; one that fails to close does not keep the next open."""
        members = self.members
        self._join(())
        for member in members:
            try:
                member.close(reason)
            except Exception:
                log.exception("a session recorder (%s) failed to close", type(member).__name__)

    def _drop(self, member: Recorder, doing: str) -> None:
        self.remove(member)
        log.exception("a session recorder (%s) failed %s; it is dropped, the session goes on",
                      type(member).__name__, doing)
