"""The forwarding pipe: what one reader forwards without the engine's round, declared once, and
the Python lane that carries it out.

    ForwardRule   what may pass: the frame kinds the engine forwards as they came (audio: its
                  `forwards_upstream` / `forwards_client`), the redactor of frames to a client,
                  the client's event budget, its cut-off
    Pipe          where it goes: the other side's transport and queue, what the recording takes
                  (the recorder chain's `ForwardLane` of counts, or its calls)
    pipe_for      a reader's rule and pipe, from the parts a session holds (the session builds
                  one per reader: `relay.session.loop.forwarding`)
    express_lane  the Python lane over a pipe: an `Express` for `Transport.receive`, which
                  carries its pipe as `express.pipe`

Two lanes carry a pipe out: `express_lane` here, and picows' compiled one over raw payloads
(relay/transports/_picows_lane.pyx, `FrameLane(pipe)`), which the picows transport builds from
`express.pipe` when the pipe is `raw`. Both read the rule and the pipe and nothing of the session
(tests/test_forwarding_rule.py builds them against a session that refuses every read): a frame
they forward goes from one transport to the other, recorded and redacted as any sent frame,
without the session loop's `deliver` or the engine ever seeing it. This module imports nothing
of the session loop nor of the engine (`.importlinter`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from relay.errors import REDACTED
from relay.recording.format import RELAY_TO_CLIENT, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY
from relay.recording.taps import forwarding_of
from relay.session.transport import Express, Frame, FrameQueue, QueueOverflow


@dataclass(slots=True)
class ForwardRule:
    """What a reader forwards without the engine, declared once per reader (`pipe_for`, from the
    engine's declaration of the frames it forwards as they came): the frame kinds, the redaction
    anchors, the client's event budget and its cut-off. `cut_off` is the one field that changes:
    set once the client went over its budget (nothing more of it passes, here or in the engine's
    round)."""

    passes: Callable[[Frame], bool]   # the frame kinds: the engine's `forwards_upstream` / `forwards_client`
    prefixes: tuple[str, ...] | None  # the same kinds as compact prefixes of a frame (None: not told by a prefix)...
    after_type: int                   # ... which hold no second "type" after this offset
    redactor: Any = None              # the Redactor of frames to a client (its `texts`, `byte_texts`), or None
    budget: Any = None                # the client's EventBudget (its frames only), or None
    cut_off: bool = False             # the client went over its budget: nothing more of it is forwarded


@dataclass(slots=True)
class Pipe:
    """Where a `ForwardRule`'s frames go, from one reader to the other side: the other side's
    transport and its queue, and what the recording takes of them. A transport that reads raw
    payloads (picows' compiled lane) runs the rule over them from it when the pipe is `raw`, and
    hands every frame the rule's prefixes do not cover to `express` itself."""

    rule: ForwardRule
    peer: Any                      # the other side's Transport; None: none (a sidecar's client); replaced on reconnect
    queue: FrameQueue              # the other side's queue
    counts: Any                    # the recorder chain's ForwardLane, or None
    record: Any                    # else the recorder's call for a forwarded frame, or None: no recorder
    received: str                  # the directions the recording counts a frame under
    sent_as: str
    seen: Any = None               # the recorder's `record`, for a frame with no peer to go to (None: no recorder)

    @property
    def raw(self) -> bool:
        """A lane over raw payloads can run it: its frames are told by a prefix, and what the
        recording takes of them is counts."""
        return self.rule.prefixes is not None and self.record is None


def pipe_for(passes: Callable[[Frame], bool], received: str, *, peer: Any, queue: FrameQueue, recorder: Any,
             redactor: Any = None, budget: Any = None) -> Pipe:
    """The rule and pipe of the reader of `received`'s frames (`UPSTREAM_TO_RELAY`: the
    upstream's, whose frames go to the client; `CLIENT_TO_RELAY`: the client's): frames `passes`
    takes (with its `prefixes` and `after_type` when the engine's test has them) go to `peer` by
    `queue`, recorded by `recorder` as received and as sent (a chain of recorders counts on a
    lane: integer adds, no call; any other recorder is called), redacted by `redactor`, within
    `budget`."""
    sent_as = RELAY_TO_CLIENT if received == UPSTREAM_TO_RELAY else RELAY_TO_UPSTREAM
    lane_of = getattr(recorder, "lane", None)
    counts = lane_of(received, sent_as) if lane_of is not None else None
    record = forwarding_of(recorder) if recorder is not None and counts is None else None
    rule = ForwardRule(passes, getattr(passes, "prefixes", None), getattr(passes, "after_type", 0), redactor, budget)
    return Pipe(rule, peer, queue, counts, record, received, sent_as, recorder.record if recorder is not None else None)


def express_lane(pipe: Pipe) -> Express:
    """The Python lane of `pipe`, for its reader's `Transport.receive`: a frame the rule passes
    (audio) goes to the pipe's peer here, without the engine's round.

    It does what the session's round would do with the engine's `SendClient(frame)` /
    `SendUpstream(frame)`: the frame redacted for a client, queued, recorded as received and as
    sent, and written at once unless `more` frames of the same read follow (one write after the
    last frame of a burst; should the burst stop short, a write once the event loop's turn comes).
    A lone frame (realtime audio) with nothing queued ahead of it and the writer asleep goes to the
    socket without being queued (`Transport.write(queue, frame)`). Whatever needs more than that
    (a client over its event budget or cut off, a full queue) is left to `deliver`, which runs the
    full round: it returns False then, having changed nothing (so a client's frame spends its
    budget once). It needs no task context (a transport may call it from its own read callback),
    and it runs on every audio frame: one call each for the test and the socket (or the queue),
    the redaction inline, and the recorders' counts as integer adds."""
    rule = pipe.rule
    passes, redactor, budget = rule.passes, rule.redactor, rule.budget
    queue, lane, record_forwarded, seen = pipe.queue, pipe.counts, pipe.record, pipe.seen
    received, sent_as = pipe.received, pipe.sent_as
    hold, queued = queue.hold, queue.frames

    def express(frame: Frame, more: bool) -> bool:
        if not passes(frame):
            return False
        if budget is not None and (rule.cut_off or not queue.fits(frame) or not budget.take()):
            return False   # a full queue first: `deliver` would charge the budget a second time
        peer = pipe.peer
        if peer is None:   # no client (a sidecar): the frame was only to be seen
            if seen is not None:
                seen(received, frame)
            return True
        sent = frame
        if redactor is not None:   # `Redactor.text` inline: a call would cost as much as the loop
            try:   # (the redactor replaces its list when it changes, never changes it in place)
                for anchor, secret in redactor.texts:
                    if anchor in sent and secret in sent:
                        sent = sent.replace(secret, REDACTED)   # type: ignore[union-attr]
            except TypeError:   # a binary frame (no engine forwards one unparsed today)
                sent = redactor.frame(frame)
        if more or queued or queue.waiter is None or not peer.write(queue, sent):   # (`write` checks too)
            try:
                waiting = hold(sent)
            except QueueOverflow:
                return False   # `deliver`'s round reports it and closes the side that does not read
        else:   # a lone frame, nothing ahead of it: written already
            waiting = 0
        if lane is not None:
            frames = lane.frames + 1
            lane.frames = frames
            lane.bytes += len(frame)
            if sent is not frame:
                lane.resized += len(sent) - len(frame)
            if lane.others is not None:
                lane.others(received, frame, sent_as, sent)
            if frames >= lane.settle_at:
                lane.settle()
        elif record_forwarded is not None:
            record_forwarded(received, frame, sent_as, sent)
        if waiting:   # the writer task sleeps: the reader writes
            if not more:
                peer.write(queue)
            elif waiting == 1:
                peer.write(queue, None, True)
        return True

    express.pipe = pipe   # type: ignore[attr-defined]
    return express
