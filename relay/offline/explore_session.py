"""One schedule of the explorer (`relay.offline.explore`), run: a scripted conversation on virtual
time whose upstream frames are paced and whose perturbations land where the schedule says.

The mock model writes a whole response at once; here its frames reach the relay one every `STEP`
virtual seconds, as a real server streams them, so a handler can finish before, between or after
the provider events of its turn, and a barge-in can land between any two of them. A perturbation
is anchored on what the relay did with the Nth call it owns (`ANCHORS`: the call seen, its
handler started, its output sent, its follow-up begun), read from the engine's call book after
every step, so it lands at the same place of the conversation whatever the perturbations before
it moved in time. Frames the caller's speech makes (a barge-in) go ahead of the frames still in
flight: the server interleaves its voice-activity events with a response it streams. The caller's
answers to its own calls (a script's client tools) go when it has them, or, under `client_late`,
that many seconds later (`CLIENT_DELAYS`); `barge_in_client` has the caller speak as soon as one of
its own calls is seen, before it answers it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

from relay.dialects import openai_codec as wire
from relay.dialects.peek import may_be
from relay.engine import EngineConfig, Outcome, StartHandler
from relay.engine.calls import CallState
from relay.errors import UnusableInput
from relay.mock import MockScript, StreamOptions
from relay.offline import faults as fault_kinds
from relay.offline.replaying import json_object as decode
from relay.offline.harness import SessionOver
from relay.offline.scripted import Script, ScriptedSession, Turn
from relay.offline.sidecar_app import MODES, has_sidecar, sidecar_config
from relay.offline.withdrawn_calls import generating, interrupted_in_flight, withdrawn_in_flight

STEP = 0.01
"""Virtual seconds between two upstream frames."""

ANCHORS = ("announced", "running", "answered", "follow_up")
"""Where on a call's life a perturbation lands: the call seen (before it is complete), its
handler started (while it runs), its output sent (before the follow-up), its follow-up begun."""

MAX_UPSTREAM_FRAMES = 2000
"""Upstream frames one schedule may take after one of the caller's lines (or before the first)
before it is called a loop: the count starts again at each line, so that a long conversation is
not taken for one (a line of the demo's, perturbed, takes a few hundred at most)."""

_EARLY = (CallState.ANNOUNCED, CallState.STREAMING)
_FINAL = frozenset({CallState.ANSWERED, CallState.SKIPPED, CallState.ABANDONED})
"""States a call never leaves: once its follow-up is known too, `_look` reads it no more."""

CLIENT_DELAYS = (0.05, 1.0, 6.0)
"""Virtual seconds the caller takes to answer its own call (`client_late`, by `step`): a few provider
events later; after the relay's handlers of the same batch answered; past the relay's hold of a
client's `response.create` (`EngineConfig.hold_limit`, 5 s)."""
DUPLICATES = {"duplicate": "relay", "duplicate_client": "client"}
"""The explorer's duplicate deliveries and whose calls each numbers (`faults.duplicate_delivery`)."""
_STREAMING = StreamOptions(audio_chunks=1, audio_chunk_bytes=480, argument_deltas=2)


@dataclass(frozen=True, order=True)
class Perturbation:
    """One thing that goes differently in a schedule: `kind` on the relay's `call`th call (from 1),
    at `anchor`, with `step` (a count of provider events, for a handler's finish)."""

    kind: str
    call: int = 1
    anchor: str = "running"
    step: int = 0

    def describe(self) -> str:
        where = {"announced": "before it is complete", "running": "while its handler runs",
                 "answered": "between its output and the follow-up", "follow_up": "during its follow-up"}
        text = {
            "barge_in": f"the caller barges in {where.get(self.anchor, self.anchor)}",
            "finish": f"the handler finishes after {self.step} more provider event(s)",
            "past_filler": "the handler runs past its filler",
            "past_timeout": "the handler runs past its timeout, then answers",
            "raises": "the handler raises",
            "hangs": "the handler never returns",
            "answers_twice": "the handler's answer is reported twice",
            "duplicate": "the provider delivers the call twice",
            "duplicate_client": "the provider delivers the client's call twice",
            "client_late": f"the caller answers it {CLIENT_DELAYS[min(self.step, len(CLIENT_DELAYS) - 1)]:g} s late",
            "barge_in_client": "the caller barges in before answering it",
            "call_parts": "the provider delivers the call twice (Gemini: as a model-turn part too)",
            "done_first": "response.done arrives before the call's item is done",
            "drop": "the upstream connection drops",
        }.get(self.kind, self.kind)
        if self.kind in CLIENT_KINDS:   # numbered among the client's calls, not the relay's
            return f"the client's call {self.call}: {text}"
        return f"call {self.call}: {text}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "call": self.call, "anchor": self.anchor, "step": self.step}


Schedule = tuple[Perturbation, ...]


@dataclass
class Conversation:
    """What the explorer perturbs: the model's script, what the caller says (one line a turn),
    the relay's tools, the dialect, and what the caller says when it barges in (None: it only
    speaks over the assistant)."""

    name: str
    script: MockScript
    lines: tuple[str, ...]
    tools: Any
    dialect: str = "openai"
    barge_text: str | None = None
    quirks: Any = None
    turns: tuple[Any, ...] = ()   # a `Script`'s turns (how each ends), when made from one
    client_tools: tuple[Any, ...] = ()   # the caller's own tools (functions it declares and answers)
    delegation: str | None = None   # GPT-Live's delegation mode (None: Responses delegation)
    history_limit: int | None = None   # the engine's history limit (`--history-items`; None: all)
    recorded_as: str | None = None   # a relay recording's mode (`proxy`, `sidecar`); None: script, event log
    mode: str = "proxy"   # how the relay runs: `proxy` (the caller talks through it) or `sidecar` (beside it)

    def with_dialect(self, dialect: str) -> Conversation:
        """The conversation on `dialect` (a sidecar's on a wire with one: `with_mode`)."""
        moved = replace(self, dialect=dialect, name=f"{self.name.split(' (')[0]} ({dialect})", mode="proxy")
        return moved.with_mode(self.mode, moved.name)

    def with_mode(self, mode: str | None, source: str) -> Conversation:
        """The conversation explored with the relay as `mode` (None: as it is), if its wire has
        one: a sidecar needs a server that takes a second connection to a call (`relay attach`;
        UnusableInput otherwise)."""
        if mode is None or mode == self.mode:
            return self
        if mode not in MODES:
            raise UnusableInput(f"{source}: the relay runs as {' or '.join(MODES)}, not {mode!r}")
        if mode == "sidecar" and not has_sidecar(self.dialect):
            raise UnusableInput(f"{source}: the {self.dialect} dialect has no sidecar (its server takes no second "
                                "connection to a call): explore it as a proxy")
        return replace(self, mode=mode)

    def engine_config(self) -> EngineConfig | None:
        """The relay's configuration where it is not the harness's own (None): a sidecar's, a
        history limit."""
        if self.mode == "sidecar":
            return sidecar_config(strict=False, history_limit=self.history_limit)
        return None if self.history_limit is None else EngineConfig(mode="proxy", history_limit=self.history_limit)


class _ScriptOf(Script):
    """A `Script` over a given mock script (rules and turns), never strict about turns: a
    perturbed conversation asks the model for responses the script did not foresee."""

    def __init__(self, mock: MockScript, turns: tuple[Turn, ...] = ()) -> None:
        super().__init__(*(turns or tuple(Turn(say=reply.say) for reply in mock.turns)), strict=False)
        self._mock = mock.model_copy(update={"options": _STREAMING})

    def mock_script(self) -> MockScript:
        return self._mock


@dataclass
class Observed:
    """What one run saw, for the invariants and the coverage: per call (by its number), the anchors
    reached and the provider events of its turn after its handler started."""

    calls: list[str] = field(default_factory=list)            # the relay's call ids, in order seen
    client_calls: list[str] = field(default_factory=list)     # the client's (its own tools'), in order seen
    anchors: set[tuple[int, str]] = field(default_factory=set)
    starts: dict[str, int] = field(default_factory=dict)      # call id -> handler starts
    events_after_start: dict[int, int] = field(default_factory=dict)
    fired: list[Perturbation] = field(default_factory=list)
    has_filler: set[int] = field(default_factory=set)


class Exploring:
    """What runs a conversation on one schedule (see the module docstring), on a scripted session
    of any wire: `ExploredSession` (the Realtime and Gemini wires), and GPT-Live's
    (`relay.offline.explore_live.ExploredLiveSession`). `_explore` sets it up, before the session
    starts."""

    express_lane = False   # every frame through the engine's round: few of a schedule's are audio
    _app_queue: Any = ()   # what a sidecar's application heard and has not read yet (SidecarApp)
    sidecar = False   # (SidecarApp's: the caller talks to the server, the relay beside it)
    _away = False   # the connection is down (explore_outage's `reconnect`): what the server sends is lost

    kind = "explored session"

    def _explore(self, conversation: Conversation, schedule: Schedule) -> None:
        self.conversation = conversation
        self.schedule = schedule
        self.observed = Observed()
        self._paced: deque[Any] = deque()   # frames, or what makes them when their turn comes
        self._release_at: float | None = None
        self._released = 0
        self._moved: set[Any] = set()   # the calls whose items a `done_first` moved
        self._settled: dict[int, Any] = {}   # call book entries `_look` has nothing more to read of
        self._counting: set[int] = set()   # the calls whose handler started and that are not answered yet
        self._looked = -1   # the call book's size when `_look` last found every entry settled
        self._checked: Any = None   # the timeline the invariants read (see `checking`)
        self._pending: list[Perturbation] = sorted(p for p in schedule if p.kind in ("barge_in", "barge_in_client", "drop"))
        self._handler_kinds = {p.call: p for p in schedule if p.kind in HANDLER_KINDS}
        self._done_first = {p.call for p in schedule if p.kind == "done_first"}
        self._doubling = any(p.kind in DUPLICATES for p in schedule)   # (else no frame is looked at twice)
        self._copies: dict[int, str | bytes] = {}   # the second deliveries in flight (by identity)
        self._late_answers = [p for p in schedule if p.kind == "client_late"]
        self._answers_out = 0   # the caller's answers held back (`client_late`), not sent yet
        if self._late_answers:   # (else every frame to the caller skips a layer)
            self._caller_receive = self._late_caller_receive   # type: ignore[method-assign]

    # ---- pacing ---------------------------------------------------------------------------------
    def _queue_upstream(self, frames: list[str | bytes]) -> None:
        self._paced.extend(self._as_delivered(frames))
        self._schedule_release()

    def _as_delivered(self, frames: list[str | bytes]) -> list[str | bytes]:
        """The frames the relay is handed for those the upstream sent: under `done_first`, a
        response's call items after its `response.done`. (A `duplicate`'s second delivery is
        made as the first reaches the relay: `_release_one`.)"""
        return self._reordered(frames) if self._done_first and not self.gemini else frames

    def _queue_first(self, frames: list[Any]) -> None:
        """Ahead of the frames in flight: the caller's speech, which the server hears (and the mock
        model acts on: a Gemini barge-in withdraws its calls) when its turn to be delivered comes,
        so that no answer of the relay's crosses a withdrawal it could not have seen."""
        self._paced.extendleft(reversed(frames))
        self._schedule_release()

    def _schedule_release(self) -> None:
        if self._paced and self._release_at is None:
            self._release_at = self.now + STEP
            self.loop.call_at(self._release_at, self._release)

    def _release(self) -> None:
        """The next frame in flight reaches the relay; then the next, each `STEP` later, for as
        long as nothing else of the loop's comes first (`VirtualLoop.skip_to`: the same order,
        without a round of the loop per frame); else at its own timer."""
        while True:
            self._release_at = None
            if self.closed or not self._paced:
                self._paced.clear()
                return
            self._release_at = self.now + STEP   # what the frame causes queues behind it, no timer yet
            self._release_one()
            if not self._paced:
                self._release_at = None
                return
            if not self.loop.skip_to(self._release_at):
                self.loop.call_at(self._release_at, self._release)
                return

    def _release_one(self) -> None:
        self._released += 1
        if self._released > MAX_UPSTREAM_FRAMES:
            self._paced.clear()
            self._problems.append(SessionOver(f"the session does not settle: more than {MAX_UPSTREAM_FRAMES} "
                                              "upstream frames after one of the caller's lines (the relay and the "
                                              "model answer each other in a loop?)"))
            self.end("the session does not settle")
            return
        head = self._paced.popleft()
        if callable(head):   # the caller's speech reaches the server now: what it sends back
            self._paced.extendleft(reversed(head()))
            return
        if self._away:   # sent while the connection is down, whichever way it was queued: lost
            self._lose([head])
            return
        if self._doubling:
            head = self._delivered_again(head)
        self._inbox.append(("upstream", head))
        counts = self.observed.events_after_start
        for number in self._counting:   # a provider event of their turn
            counts[number] += 1
        self._pump()

    def _lose(self, frames: list[Any]) -> None:
        """Frames the server sent while the connection was down (explore_quirks keeps them for the
        invariants' timeline)."""

    def _delivered_again(self, head: Any) -> str | bytes:
        """A frame reaching the relay that a `duplicate` delivers twice: its copy comes next.
        Asked as each frame reaches the relay, not as the server sends it: by then the relay's
        call book, by which a `duplicate` names its call (`numbered_calls`), holds every call
        before it, and a frame a server-side cancellation or a barge-in withdrew in flight is
        never looked at."""
        if self._copies.pop(id(head), None) is head:
            return head
        frame, *again = self._deliveries(head)
        self._copies.update((id(copy), copy) for copy in again)   # (held: no other frame takes the id)
        self._paced.extendleft(reversed(again))
        return frame

    def _deliveries(self, frame: str | bytes) -> list[str | bytes]:
        """The frames delivered for one the upstream sent (twice: a `duplicate` delivery)."""
        return self.faults.deliveries(frame)

    def numbered_calls(self, among: str) -> list[str] | None:
        """The calls a `duplicate` counts, as the relay's call book numbers them (the relay's or
        the client's), as the rest of the explorer numbers them: with the calls a reconnect
        learnt back by their items, whose frames never reached the relay."""
        if among not in ("relay", "client"):
            return None
        self._look()
        return self.observed.calls if among == "relay" else self.observed.client_calls

    def _repeated(self) -> set[Any]:
        """The calls a `duplicate` delivery hit."""
        return set(self.faults._repeated)

    def _reordered(self, frames: list[str | bytes]) -> list[str | bytes]:
        """`done_first`: a response's calls' `response.output_item.done` arrive after its
        `response.done` (everything else of the response before it, as it was)."""
        kinds = [wire.event_of(decode(frame) or {}) if _may_move(frame) else None for frame in frames]
        done = next((i for i, kind in enumerate(kinds) if isinstance(kind, wire.ResponseDone)), None)
        late = [i for i, kind in enumerate(kinds[:done]) if isinstance(kind, wire.OutputItemDone)
                and (kind.item or {}).get("type") == wire.FUNCTION_CALL]
        if done is None or not late:
            return frames
        self._moved.update((kinds[i].item or {}).get("call_id") for i in late)   # type: ignore[union-attr]
        kept = [frame for i, frame in enumerate(frames[:done + 1]) if i not in late]
        return kept + [frames[i] for i in late] + frames[done + 1:]

    def _fire_quirk(self, kind: str, call_ids: set[Any], numbered: list[str] | None = None) -> None:
        """Each `kind` perturbation whose call (the Nth of `numbered`: the relay's calls unless
        said) is among `call_ids` fired."""
        calls = self.observed.calls if numbered is None else numbered
        for perturbation in self.schedule:
            if perturbation.kind == kind and perturbation not in self.observed.fired:
                number = perturbation.call
                if number <= len(calls) and calls[number - 1] in call_ids:
                    self.observed.fired.append(perturbation)

    @property
    def timeline(self) -> Any:
        """What happened so far (the harness's), or, while the invariants are checked
        (`checking`), the one timeline read for all of them."""
        return self._checked if self._checked is not None else self._timeline()

    def _timeline(self) -> Any:
        return super().timeline

    @contextmanager
    def checking(self) -> Iterator[None]:
        """The invariants of a run that ended are checked: its timeline is read once for them all
        (nothing happens meanwhile), not once by each check that reads it."""
        self._checked = self._timeline()
        try:
            yield
        finally:
            self._checked = None

    def pending(self) -> bool:
        """Something is still to happen: a frame in flight, a handler, a timer, a fault or a
        caller's late answer."""
        return bool(self._paced or self._handlers or self.engine.next_deadline() is not None
                    or self.faults.pending() or self._answers_out or self._app_queue)

    # ---- the caller's own calls -------------------------------------------------------------------
    def _late_caller_receive(self, frame: str | bytes) -> list[str | bytes]:
        """The caller's answers (its own tools' outputs, and the `response.create` after them),
        held back when a `client_late` perturbation names a call they answer, and sent that many
        seconds later (the latest, when several do): the caller's `_caller_receive` in a
        schedule with one."""
        frames = super()._caller_receive(frame)   # type: ignore[misc]
        if not frames or not self._late_answers:
            return frames
        self._look()   # the calls answered are in the call book by now: number them
        calls = self.observed.client_calls
        late = [p for p in self._late_answers if p.call <= len(calls)
                and any(calls[p.call - 1] in answer for answer in frames)]   # (ids are unique strings)
        if not late:
            return frames
        for perturbation in late:
            self._late_answers.remove(perturbation)
            self.observed.fired.append(perturbation)
        self._answers_out += 1
        self.loop.call_later(max(CLIENT_DELAYS[p.step] for p in late), self._answer_late, frames)
        return []

    def _answer_late(self, frames: list[str | bytes]) -> None:
        """The caller's held answers go now: through the relay; while its connection is away
        (`reconnect`: a sidecar's), to the server by the call's own path, as the caller's audio does
        (a sidecar's caller always talks to the server: `ScriptedSession.from_caller`)."""
        self._answers_out -= 1
        if self.closed:
            return
        if not self._away or self.sidecar:
            self.from_caller(frames)
            return
        for frame in frames:
            self._queue_upstream(self._upstream_receive(frame))

    # ---- anchors ---------------------------------------------------------------------------------
    def _round_over(self, outermost: bool, more: bool) -> None:
        super()._round_over(outermost, more)
        self._look()

    def _look(self) -> None:
        ledger = self.engine.ledger
        if len(ledger) == self._looked:
            return   # every entry settled, and none added since (the book forgets none: no history limit)
        observed = self.observed
        settled = self._settled
        open_entries = 0
        for entry in ledger:
            if settled.get(id(entry)) is entry:
                continue
            if not entry.relay_owned:
                settled[id(entry)] = entry
                if entry.call_id not in observed.client_calls:
                    observed.client_calls.append(entry.call_id)
                    self._reached_client(len(observed.client_calls))
                continue
            open_entries += 1
            if entry.call_id not in observed.calls:
                observed.calls.append(entry.call_id)
            number = observed.calls.index(entry.call_id) + 1
            state = entry.state
            if state in _EARLY:
                self._reached(number, "announced")
            if state == CallState.ANSWERED:
                self._reached(number, "answered")
            if entry.follow_up_response_id is not None:
                self._reached(number, "follow_up")
                if state in _FINAL:   # no anchor of this entry is left to reach
                    settled[id(entry)] = entry
                    open_entries -= 1
        if not open_entries and self.engine.config.history_limit is None:
            self._looked = len(ledger)

    def _watch_forgetting(self) -> None:
        """Under a history limit the call book forgets finished calls, some in the round that
        answered them: the anchors each reached are read before it does (`_look`, the book's
        `before_forgetting`), else such a call would never reach its `answered` anchor, nor a
        perturbation anchored there fire."""
        if self.engine.config.history_limit is not None:
            self.engine.ledger.before_forgetting = self._look

    def _reached(self, number: int, anchor: str) -> None:
        if (number, anchor) in self.observed.anchors:
            return
        self.observed.anchors.add((number, anchor))
        if anchor == "answered":
            self._counting.discard(number)
        for perturbation in [p for p in self._pending if p.call == number and p.anchor == anchor]:
            self._pending.remove(perturbation)
            self.observed.fired.append(perturbation)
            self.loop.call_soon(self._happen, perturbation)

    def _reached_client(self, number: int) -> None:
        """The caller's `number`th call of its own is seen: a barge-in anchored on it lands now,
        while the caller has not answered it (its answer goes when its response completes)."""
        for perturbation in [p for p in self._pending if p.kind == "barge_in_client" and p.call == number]:
            self._pending.remove(perturbation)
            self.observed.fired.append(perturbation)
            self.loop.call_soon(self._happen, perturbation)

    def _happen(self, perturbation: Perturbation) -> None:
        if self.closed:
            return
        if perturbation.kind == "drop":
            self.mark("fault", "the upstream connection dropped")
            self.end("upstream closed the session")
            return
        self.mark("fault", "the caller barges in")
        text = self.conversation.barge_text
        if self.gemini:
            self._queue_first([lambda: self._gemini_speech(text)])
            return
        self._queue_first([lambda: self._speech(text)])

    def _gemini_speech(self, text: str | None) -> list[str | bytes]:
        """The server hears the caller (Gemini): the model stops and withdraws (or drops) its open
        calls now (one still in flight was never made), and the rest of its turn in flight is not delivered
        (relay/offline/withdrawn_calls.py); the caller's
        words, if any, reach it after that, so that the turn they start is not the one withdrawn
        (said at once, they were answered first and that new turn's calls withdrawn). Speech
        with no words is a turn too, which the model answers (its default reply)."""
        if text is not None:
            self.loop.call_soon(self.say_now, text)
        seen = {entry.call_id for entry in self.engine.ledger}
        said = self.model.barge_in(generating(self._paced))  # type: ignore[call-arg]
        dropped = [call.id for call in self.model.mock.calls.values() if call.state == "dropped"]  # type: ignore[attr-defined]
        said = withdrawn_in_flight(self._paced, said, seen, dropped)
        interrupted_in_flight(self._paced)   # the turn stops where it is: the rest of it never comes
        if text is None:   # speech the mock cannot read: the model answers the turn it made all the same
            said += self.model._carry(self.model.mock.answer_unheard())   # type: ignore[attr-defined]
        return said

    def _speech(self, text: str | None) -> list[str | bytes]:
        """The server hears the caller (OpenAI family): its speech starts now, ahead of the frames
        in flight; what its end brings (a new response, with words) follows them, as a server
        ends the response it streams before it starts the next."""
        mock = self.model.mock   # type: ignore[attr-defined]
        item_id, actions, _ = mock.speech_started()
        first = self.model._carry(actions)   # type: ignore[attr-defined]
        rest = self.model._carry(mock.speech_stopped(item_id, text, None if text is not None else False))  # type: ignore[attr-defined]
        self._paced.extend(self._as_delivered(rest))
        return first

    # ---- handlers ---------------------------------------------------------------------------------
    def act_start_handler(self, action: StartHandler) -> None:
        self._look()
        starts = self.observed.starts
        starts[action.call_id] = starts.get(action.call_id, 0) + 1
        super().act_start_handler(action)
        if action.call_id in self.observed.calls:
            number = self.observed.calls.index(action.call_id) + 1
            self.observed.events_after_start.setdefault(number, 0)
            if (number, "answered") not in self.observed.anchors:
                self._counting.add(number)
            if action.tool.on_delay is not None:
                self.observed.has_filler.add(number)
            self._reached(number, "running")

    def _handler(self, action: StartHandler) -> Callable[[], Any]:
        original = super()._handler(action)
        number = self.observed.calls.index(action.call_id) + 1 if action.call_id in self.observed.calls else 0
        perturbation = self._handler_kinds.get(number)
        if perturbation is None:
            return original
        self.observed.fired.append(perturbation)
        tool = action.tool
        waits = {"finish": (perturbation.step + 0.5) * STEP,
                 "past_filler": (tool.on_delay[0] / 1000 if tool.on_delay else 0.0) + STEP / 2,
                 "past_timeout": tool.timeout + STEP}

        async def perturbed() -> Any:
            if perturbation.kind == "hangs":
                await asyncio.Event().wait()
            if perturbation.kind == "raises":
                raise fault_kinds.InjectedFault("raised by the explorer")
            outcome = await original()
            await asyncio.sleep(waits.get(perturbation.kind, 0.0))
            return outcome

        return perturbed

    def _handler_finished(self, call_id: str, outcome: Outcome) -> None:
        super()._handler_finished(call_id, outcome)
        number = self.observed.calls.index(call_id) + 1 if call_id in self.observed.calls else 0
        twice = self._handler_kinds.get(number)
        if twice is not None and twice.kind == "answers_twice" and not self.closed:
            # the same call's answer reported again, as a runner that fires twice would
            self._engine_input(lambda: self.engine.handler_finished(call_id, Outcome.returned("again"), self.now))

    # ---- driving ----------------------------------------------------------------------------------
    def play(self, limit: float = 600.0) -> None:
        """The caller's lines, each once the session is quiet, then until nothing is left to do."""
        self.settle(limit)
        for line in self.conversation.lines:
            if self.closed:
                break
            self._released = 0
            self.say_now(line)
            self.settle(limit)
        self.settle(limit)
        self._fire_quirk("duplicate", self._repeated())
        self._fire_quirk("duplicate_client", self._repeated(), self.observed.client_calls)
        self._fire_quirk("done_first", self._moved)
        if self.observed.calls:
            self._fire_quirk("call_parts", {self.observed.calls[0]})

    def settle(self, limit: float) -> None:
        start = self.now
        while not self.closed and self.pending() and self.now - start < limit:
            # the loop runs every frame release and handler step on the way, in order
            nearest = [t for t in (self.engine.next_deadline(), self.now + 1.0) if t is not None]
            self._run(max(self.now + STEP, min(nearest)))


class ExploredSession(Exploring, ScriptedSession):
    """A scripted session of the Realtime or Gemini wire run on one schedule."""

    def __init__(self, conversation: Conversation, schedule: Schedule, **options: Any) -> None:
        self._explore(conversation, schedule)
        quirks = conversation.quirks
        if any(p.kind == "call_parts" for p in schedule):
            from relay.mock.quirks import quirks_of
            quirks = replace(quirks or quirks_of(conversation.dialect), call_parts=True)
        duplicates = [fault_kinds.duplicate_delivery(p.call, among=DUPLICATES[p.kind])
                      for p in schedule if p.kind in DUPLICATES]
        options.setdefault("config", conversation.engine_config())
        super().__init__(_ScriptOf(conversation.script, conversation.turns), conversation.tools, dialect=conversation.dialect,
                         faults=duplicates, quirks=quirks, client_tools=conversation.client_tools, **options)
        self._watch_forgetting()


_MOVED = wire.names_of((wire.ResponseDone, wire.OutputItemDone))


def _may_move(frame: str | bytes) -> bool:
    """Whether a frame may be one `_reordered` moves or moves behind (else it is not decoded: a
    frame whose only plain `type` is another event's, the deltas and the rest)."""
    return not isinstance(frame, str) or may_be(frame, _MOVED)


CLIENT_KINDS = frozenset({"duplicate_client", "client_late", "barge_in_client"})
"""The perturbations numbered among the client's own calls."""
HANDLER_KINDS = frozenset({"finish", "past_filler", "past_timeout", "raises", "hangs", "answers_twice"})
