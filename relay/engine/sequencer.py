"""The sequencer: the one place that decides when the relay sends `response.create`.

It knows whether a response is active (whoever started it: the client, server VAD, the relay),
coalesces the follow-ups of several calls into one create, waits for `response.done`, tags what
it sends with an `event_id` and `metadata`, and recognises the errors aimed at it. Fillers
(`on_start`, `on_delay`) and spoken messages go through it too, so there are never two active
responses and never a filler after the result it was covering for.

Its state is a table, as a call's is (`calls.LIFECYCLE`): two small machines side by side, each
with its own steps (`STEPS`), as h11 keeps a connection's several machines:
- `CreateState`: the relay's own `response.create`, one at a time: idle, sent (its
  response.created awaited), to be sent again once nothing is active, or after the next
  response.done (when no response was known to be active: a second writer's);
- `CancelState`: the relay's `response.cancel` for an `interrupt` follow-up: none, or sent.
Every change goes through `move` (`states.Machines`), which refuses a step the table does not
allow: it raises `IllegalTransition` in strict mode (the tests) and records an anomaly otherwise.
The client's creates a proxy holds back have their own table (`holding.HeldCreates`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterable

from relay.dialects.items import Event, ResponseCancel, ResponseCreate, event_name, wire_type
from relay.engine.actions import Notice
from relay.engine.states import Machines, Steps

ACK_TIMEOUT = 15.0
"""Seconds the relay waits for its `response.create` to be acknowledged (its response to begin)
before it takes the create for lost (the GPT-Live engine's waits for a create are as long)."""

# Metadata keys the relay puts on its own responses (values must be strings, <= 512 chars).
META_KIND = "relay"
META_EVENT = "relay_event"
META_CALLS = "call_ids"
MAX_META_VALUE = 512

ACTIVE_RESPONSE_CODE = "conversation_already_has_active_response"
_CREATE = event_name(ResponseCreate)   # what the relay's creates are remembered as
_REMEMBERED_FRAMES = 64   # errors come right after the frame they refuse: the latest are enough


def is_active_response_error(error: dict[str, Any]) -> bool:
    """Both forms seen in the wild: the GA code, and the early message without a code."""
    if error.get("code") == ACTIVE_RESPONSE_CODE:
        return True
    message = error.get("message")
    return isinstance(message, str) and "already has an active response" in message


def say_instructions(text: str) -> str:
    """Instructions that make the model speak `text` (the mock recognises `Say exactly:`)."""
    return (
        "Speak to the user now in the conversation's language and voice. Say the following and "
        f"nothing else. Say exactly: {text}"
    )


class CreateState(str, Enum):
    """The relay's own `response.create`: one at a time."""

    IDLE = "idle"                    # none in flight, none to send again
    SENT = "sent"                    # sent: its response.created (or its refusal) is awaited
    RETRY = "retry"                  # refused as "already active", or never acknowledged: it goes
                                     # again once nothing is active
    RETRY_AFTER_DONE = "retry_after_done"   # refused while no response was known to be active (a
                                     # second writer's): waits for the next response.done, or `retry_wait`


class CancelState(str, Enum):
    """The relay's `response.cancel`, sent when an `interrupt` follow-up waits behind a response."""

    NONE = "none"
    SENT = "sent"                    # sent for `_cancel_target`, until that response is done


_C, _X = CreateState, CancelState
STEPS: Steps = {
    _C: {
        _C.IDLE: frozenset({_C.SENT}),
        # idle: acknowledged, refused for good, or in flight when the connection was replaced
        _C.SENT: frozenset({_C.IDLE, _C.RETRY, _C.RETRY_AFTER_DONE}),
        # idle: its response came after all, or a foreign response answers its follow-up
        _C.RETRY: frozenset({_C.SENT, _C.IDLE}),
        _C.RETRY_AFTER_DONE: frozenset({_C.RETRY, _C.IDLE}),
    },
    _X: {
        _X.NONE: frozenset({_X.SENT}),
        _X.SENT: frozenset({_X.NONE}),      # its response is done, or the connection was replaced
    },
}
# the members by module names: read from its class, a member costs a descriptor call, and these
# are read after every input
_IDLE, _SENT, _RETRY, _RETRY_AFTER_DONE = _C.IDLE, _C.SENT, _C.RETRY, _C.RETRY_AFTER_DONE
_NO_CANCEL, _CANCEL_SENT = _X.NONE, _X.SENT
_BUSY = frozenset({_SENT, _RETRY_AFTER_DONE})
_RETRYING = frozenset({_RETRY, _RETRY_AFTER_DONE})


@dataclass(slots=True)
class FollowUp:
    """Outputs (or streaming updates) injected and waiting for the model to speak about them."""

    call_ids: list[str]
    interrupt: bool
    messages: list[str]
    confirm_item_ids: set[str]      # relay items that must exist upstream before a foreign
    requested_at: float             # response can count as answering this follow-up


@dataclass(slots=True)
class Filler:
    call_id: str
    kind: str        # on_start | on_delay
    text: str
    requested_at: float


@dataclass(slots=True)
class SentCreate:
    """One `response.create` of the relay's, as sent (and sent again)."""

    event_id: str
    purpose: str                 # follow_up | filler
    call_ids: list[str]
    frame: ResponseCreate
    sent_at: float
    messages: list[str] = field(default_factory=list)
    interrupt: bool = False
    attempts: int = 1
    confirm_item_ids: set[str] = field(default_factory=set)
    # a foreign response already answers its follow-up: a refusal is not retried. A fact about
    # this request that stays with it, not a state of the sequencer.
    taken_over: bool = False


@dataclass(slots=True)
class ForeignCreate:
    event_id: str | None
    expires_at: float


class Sequencer(Machines):
    """Response-level state for one session. The engine feeds it upstream facts and asks it,
    after every input, which frames to send now (`poll`).

    Its state is two machines (`create_state`, `cancel_state`), changed only by `move`. The rest
    is data, none of it a flag: the create, cancel target and deadline those states are about;
    queues (follow-ups waiting for the relay's create or delegated to a client's, fillers); the
    active responses and who made them; the client creates forwarded; the relay's creates in
    flight when the connection was replaced; the relay items confirmed upstream; the frames the
    relay sent lately; and the settings (timeouts, attempts)."""

    steps = STEPS
    attributes = {CreateState: "create_state", CancelState: "cancel_state"}

    def __init__(
        self,
        *,
        new_event_id: Callable[[], str],
        build_create: Callable[[dict[str, Any], str], ResponseCreate],
        strict: bool = True,
        on_refused: Callable[[str], None] | None = None,
        ack_timeout: float = ACK_TIMEOUT,
        foreign_timeout: float = 10.0,
        max_attempts: int = 4,
        retry_wait: float = 5.0,
        fillers_in_conversation: bool = False,
        calls_open: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(strict=strict, on_refused=on_refused)
        self.fillers_in_conversation = fillers_in_conversation
        self._calls_open = calls_open   # a relay call of an ended response is unanswered: follow-ups wait
        self._new_event_id = new_event_id
        self._build_create = build_create
        self.ack_timeout = ack_timeout
        self.foreign_timeout = foreign_timeout
        self.max_attempts = max_attempts
        self.retry_wait = retry_wait
        # the state: changed by `move` only
        self.create_state = _IDLE
        self.cancel_state = _NO_CANCEL
        # what the states are about
        self._own: SentCreate | None = None        # the create of `create_state` (None when idle)
        self._retry_deadline = 0.0                  # RETRY_AFTER_DONE: when to stop waiting for a done
        self._cancel_target: str | None = None      # CancelState.SENT: the response cancelled
        # data
        self._active: dict[str, str] = {}           # response id -> creator
        self._ours: dict[str, SentCreate] = {}      # response id -> our create that made it
        self._foreign: list[ForeignCreate] = []     # client creates forwarded, not yet resolved
        self._follow_ups: list[FollowUp] = []       # waiting for the relay's own create
        self._delegated: list[FollowUp] = []        # a forwarded client create is to answer them
        self._fillers: list[Filler] = []
        self._delayed_fillers: dict[str, tuple[float, str]] = {}   # call_id -> (when due, text): on_delay
        self._uncertain: dict[str, SentCreate] = {}   # in flight when the connection was replaced
        self._confirmed: set[str] = set()           # relay items seen upstream
        self._sent: dict[str, tuple[str, str | None]] = {}   # event id of a relay frame -> (what, call_id)

    # ---- questions -----------------------------------------------------------------------
    def busy(self, now: float) -> bool:
        """Whether a response is active or on its way (a create must not go up now)."""
        self._expire(now)
        return bool(self._active or self._foreign) or self.create_state in _BUSY

    def pending(self) -> bool:
        """Whether the relay still means to send a create (a follow-up, a filler, a retry)."""
        return bool(self._follow_ups or self._delegated or self._fillers) or self.create_state in _RETRYING

    def in_flight(self) -> bool:
        """Whether the relay's create is on its way (sent, not yet acknowledged)."""
        return self.create_state is _SENT

    def active_creators(self) -> Iterable[tuple[str, str]]:
        """The active responses, as (response id, creator)."""
        return self._active.items()

    def is_confirmed(self, item_id: Any) -> bool:
        """Whether the relay's item `item_id` was seen upstream."""
        return item_id in self._confirmed

    def next_deadline(self) -> float | None:
        own, state = self._own, self.create_state
        ack = (own.sent_at + self.ack_timeout if state is _SENT and own is not None
               else self._retry_deadline if state is _RETRY_AFTER_DONE else None)
        if not self._foreign and not self._delayed_fillers:
            return ack   # most rounds: no foreign response and no delayed filler (no list built)
        deadlines = [f.expires_at for f in self._foreign]
        deadlines.extend(due for due, _text in self._delayed_fillers.values())
        return min(deadlines) if ack is None else min(ack, *deadlines)

    # ---- facts from upstream -------------------------------------------------------------
    def item_confirmed(self, item_id: str) -> None:
        self._confirmed.add(item_id)

    def response_created(self, response_id: str, metadata: Any, now: float) -> tuple[str, SentCreate | None]:
        """Classify a new response and mark it active. Returns its creator and our create that
        made it (or None). A foreign response takes over the follow-ups it answers."""
        ours: SentCreate | None = None
        if isinstance(metadata, dict):
            event_id = metadata.get(META_EVENT)
            own = self._own
            if event_id and own is not None and own.event_id == event_id:
                # sent, or refused and waiting to go again: its response came after all
                ours = own
                self._own = None
                self.move(_IDLE)
            elif event_id in self._uncertain:
                ours = self._uncertain.pop(event_id)
        if ours is not None:
            creator = "relay"
            self._ours[response_id] = ours
        else:
            self._expire(now)
            if self._foreign:
                self._foreign.pop(0)
                creator = "client"
            else:
                creator = "server"
            self._taken_over_by_foreign_response()
        self._active[response_id] = creator
        return creator, ours

    def _taken_over_by_foreign_response(self) -> None:
        """A response someone else started after our outputs were in answers them. A follow-up
        delegated to a client's create is taken over the same way, not merely because some
        foreign response started: one the server had begun before that create arrived would
        otherwise take the follow-up with it, and the create be refused as "already active"
        (that refusal gives the follow-up back, see `_foreign_refused`)."""
        confirmed = self._confirmed
        self._follow_ups = [f for f in self._follow_ups if not f.confirm_item_ids <= confirmed]
        self._delegated = [f for f in self._delegated if not f.confirm_item_ids <= confirmed]
        self._own_follow_up_answered(lambda own: own.confirm_item_ids <= confirmed)

    def _own_follow_up_answered(self, answers: Callable[[SentCreate], bool]) -> None:
        """Another response answers our follow-up create, if `answers` it: one on its way will be
        refused as "already active" and is never retried; one waiting to go again does not go."""
        own = self._own
        if own is None or own.purpose != "follow_up" or not answers(own):
            return
        if self.create_state is _SENT:
            own.taken_over = True
        else:
            self._own = None
            self.move(_IDLE)

    def response_done(self, response_id: str) -> SentCreate | None:
        self._active.pop(response_id, None)
        if self.cancel_state is _CANCEL_SENT and self._cancel_target == response_id:
            self._cancel_target = None
            self.move(_NO_CANCEL)
        if self.create_state is _RETRY_AFTER_DONE:
            self.move(_RETRY)
        return self._ours.pop(response_id, None)

    def follow_up_call_ids(self, *, retrying: bool = False) -> list[str]:
        """The calls the relay's own follow-up create is about (`retrying`: one refused that is to
        go again); none when its create is not a follow-up."""
        own = self._own
        if own is None or own.purpose != "follow_up" or (retrying and self.create_state not in _RETRYING):
            return []
        return own.call_ids

    def answered_elsewhere(self, call_ids: set[str]) -> None:
        """Another relay's follow-up about `call_ids` was seen (a session taken over): a
        follow-up of ours for nothing but them does not go up, and one refused meanwhile is not
        sent again."""
        self._follow_ups = [f for f in self._follow_ups if not set(f.call_ids) <= call_ids]
        self._own_follow_up_answered(lambda own: set(own.call_ids) <= call_ids)

    def forget_confirmed(self, keep: set[str]) -> None:
        """Drop confirmations nothing waits for any more (a long session makes thousands)."""
        if self._follow_ups or self._delegated or self.create_state is not _IDLE or self._uncertain:
            return
        self._confirmed &= keep

    def remember(self, event_id: str, what: str, call_id: str | None) -> None:
        """A frame the relay sent (an output, an update, a session.update, a create...), so an
        error the upstream aims at it can be attributed."""
        self._sent[event_id] = (what, call_id)
        if len(self._sent) > _REMEMBERED_FRAMES:
            del self._sent[next(iter(self._sent))]

    def error_about(self, error: dict[str, Any], now: float) -> tuple[str, str | None] | None:
        """Which of the relay's frames an upstream error refuses, as (what, call_id); None when
        it is about the client's. An untagged "already active" refusal while only our create was
        in flight is ours."""
        event_id = error.get("event_id")
        ours = self._sent.get(event_id) if isinstance(event_id, str) else None
        if ours is None:
            if self._create_refused(event_id, error, now) is None:
                return None
            return (_CREATE, None)
        if ours[0] == _CREATE:
            self._create_refused(event_id, error, now)
        return ours

    def _create_refused(self, event_id: Any, error: dict[str, Any], now: float) -> SentCreate | None:
        """An error event; returns our create in flight it refuses (None if not ours)."""
        ours: SentCreate | None = None
        if self.create_state is _SENT:
            if event_id and self._own is not None and self._own.event_id == event_id:
                ours = self._own
            elif not event_id and is_active_response_error(error):
                self._expire(now)
                if self._foreign:
                    self._foreign_refused(None)
                    return None
                ours = self._own if self.create_state is _SENT else None
        if ours is None:
            if is_active_response_error(error) or (event_id and self._is_foreign(event_id)):
                self._foreign_refused(event_id)
            return None
        if not ours.taken_over and is_active_response_error(error) and ours.attempts < self.max_attempts:
            ours.attempts += 1
            if self._active:
                self.move(_RETRY)   # after the active response's done
            else:
                # a second writer's response we have not seen start: the next done, not forever
                self._retry_deadline = now + self.retry_wait
                self.move(_RETRY_AFTER_DONE)
            return ours
        self._own = None
        self.move(_IDLE)
        return ours

    def _is_foreign(self, event_id: Any) -> bool:
        return any(f.event_id == event_id for f in self._foreign)

    def _foreign_refused(self, event_id: Any) -> None:
        for index, foreign in enumerate(self._foreign):
            if event_id is None or foreign.event_id == event_id:
                del self._foreign[index]
                break
        self._undelegate()

    def _undelegate(self) -> None:
        """No forwarded client create will answer the delegated follow-ups: they wait for ours
        again, ahead of those requested since (they came first)."""
        if self._delegated:
            self._follow_ups = self._delegated + self._follow_ups
            self._delegated = []

    def client_create_forwarded(self, event_id: str | None, now: float, *, answers_pending: bool) -> None:
        self._foreign.append(ForeignCreate(event_id, now + self.foreign_timeout))
        if answers_pending and self._follow_ups:
            self._delegated.extend(self._follow_ups)
            self._follow_ups = []

    def reset_connection(self) -> None:
        """The upstream connection was replaced. A create in flight is not sent again: the edge
        resends what its old socket never took, and what it took has reached the server (whose
        response may have run while we were away); sending it again would answer twice. Its
        response.created, if it comes on the new connection, is still recognised as ours."""
        self._active.clear()
        self._foreign.clear()
        if self.cancel_state is _CANCEL_SENT:
            self._cancel_target = None
            self.move(_NO_CANCEL)
        own = self._own
        if self.create_state is _RETRY_AFTER_DONE:
            self.move(_RETRY)
        elif self.create_state is _SENT and own is not None:
            self._uncertain[own.event_id] = own
            self._own = None
            self.move(_IDLE)

    def _expire(self, now: float) -> None:
        if self.create_state is _RETRY_AFTER_DONE and self._retry_deadline <= now:
            self.move(_RETRY)
        if self._foreign and self._foreign[0].expires_at <= now:
            self._foreign = [f for f in self._foreign if f.expires_at > now]
            if not self._foreign:
                self._undelegate()
        own = self._own
        if self.create_state is _SENT and own is not None and own.sent_at + self.ack_timeout <= now:
            # never acknowledged (a lost frame, a server that does not echo metadata): give up
            # waiting so the session cannot wedge; the request goes back to the queue once.
            if own.attempts < self.max_attempts:
                own.attempts += 1
                self.move(_RETRY)
            else:
                self._own = None
                self.move(_IDLE)

    # ---- requests from the engine ----------------------------------------------------------
    def request_follow_up(
        self, call_ids: list[str], *, interrupt: bool, messages: list[str], confirm: set[str], now: float
    ) -> None:
        self._follow_ups.append(FollowUp(list(call_ids), interrupt, list(messages), set(confirm), now))

    def request_filler(self, call_id: str, kind: str, text: str, now: float) -> None:
        self._fillers.append(Filler(call_id, kind, text, now))

    def tool_started(self, call_id: str, on_start: str | None, on_delay: tuple[float, str] | None,
                     now: float) -> None:
        """A handler started: its `on_start` filler is due now, its `on_delay` one after the
        delay, unless the result comes first."""
        if on_start:
            self.request_filler(call_id, "on_start", on_start, now)
        if on_delay:
            delay_ms, text = on_delay
            self._delayed_fillers[call_id] = (now + delay_ms / 1000.0, text)

    def promote_due_fillers(self, now: float) -> None:
        for call_id, (due, text) in list(self._delayed_fillers.items()):
            if due <= now:
                del self._delayed_fillers[call_id]
                self.request_filler(call_id, "on_delay", text, now)

    def drop_fillers(self, call_id: str) -> None:
        """The result is in (or the handler is over): a filler for it would now come after (or
        over) the answer."""
        self._fillers = [f for f in self._fillers if f.call_id != call_id]
        self._delayed_fillers.pop(call_id, None)

    # ---- decisions ----------------------------------------------------------------------
    def poll(self, now: float) -> list[Event]:
        """Frames to send now: at most one `response.create`, or one `response.cancel` when an
        `interrupt` follow-up waits behind someone else's response."""
        if self.busy(now):
            return self._maybe_interrupt()
        # One create after every output: a follow-up sent while a call of a response that ended
        # is still unanswered asks the model to speak over an open call (it may call the tool
        # again). It waits; that call's batch asks for its own follow-up, and both go as one.
        own = self._own
        if self.create_state is _RETRY and own is not None:
            if own.purpose == "follow_up":
                if self._calls_open():
                    return []
                if self._follow_ups:   # the follow-up going again takes the later ones with it
                    eligible, self._follow_ups = self._follow_ups, []
                    again = FollowUp(own.call_ids, own.interrupt, own.messages, own.confirm_item_ids, own.sent_at)
                    return [self._send_follow_up([again, *eligible], now)]
            own.sent_at = now
            self.move(_SENT)
            return [own.frame]
        if self._follow_ups and not self._calls_open():
            eligible, self._follow_ups = self._follow_ups, []
            return [self._send_follow_up(eligible, now)]
        if self._fillers:
            filler = self._fillers.pop(0)
            return [self._send_filler(filler, now)]
        return []

    def _maybe_interrupt(self) -> list[Event]:
        if self.cancel_state is _CANCEL_SENT or self.create_state is _SENT:
            return []
        if not any(f.interrupt for f in self._follow_ups):
            return []
        target = next(iter(self._active), None)
        if target is None:
            return []
        self._cancel_target = target
        self.move(_CANCEL_SENT)
        event_id = self._new_event_id()
        command = ResponseCancel(event_id=event_id, response_id=target)
        self.remember(event_id, wire_type(command), None)
        return [command]

    def _create(self, options: dict[str, Any], event_id: str) -> ResponseCreate:
        self.remember(event_id, _CREATE, None)
        return self._build_create(options, event_id)

    def _send(self, sent: SentCreate) -> ResponseCreate:
        self._own = sent
        self.move(_SENT)
        return sent.frame

    def _send_follow_up(self, follow_ups: list[FollowUp], now: float) -> ResponseCreate:
        call_ids: list[str] = []
        messages: list[str] = []
        confirm: set[str] = set()
        for follow_up in follow_ups:
            call_ids.extend(c for c in follow_up.call_ids if c not in call_ids)
            messages.extend(m for m in follow_up.messages if m not in messages)
            confirm |= follow_up.confirm_item_ids
        event_id = self._new_event_id()
        options: dict[str, Any] = {"metadata": _metadata("follow_up", event_id, call_ids)}
        if messages:
            options["instructions"] = say_instructions(" ".join(messages))
        frame = self._create(options, event_id)
        return self._send(SentCreate(event_id, "follow_up", call_ids, frame, now, messages,
                                     any(f.interrupt for f in follow_ups), confirm_item_ids=confirm))

    def _send_filler(self, filler: Filler, now: float) -> ResponseCreate:
        event_id = self._new_event_id()
        metadata = _metadata("filler", event_id, [filler.call_id])
        metadata["filler"] = filler.kind
        options = {
            # out of band unless the session wants its fillers in the conversation; either way the
            # model reads nothing but the words to say (an empty input)
            "conversation": "auto" if self.fillers_in_conversation else "none",
            "input": [],
            "instructions": say_instructions(filler.text),
            "metadata": metadata,
        }
        frame = self._create(options, event_id)
        return self._send(SentCreate(event_id, "filler", [filler.call_id], frame, now, [filler.text]))


def sent_notice(command: Event) -> Notice | None:
    """The notice for a `response.create` the sequencer sent (`follow_up` or `filler`)."""
    if not isinstance(command, ResponseCreate):
        return None
    metadata = (command.response or {}).get("metadata", {})
    return Notice("follow_up" if metadata.get(META_KIND) == "follow_up" else "filler",
                  {"event_id": command.event_id, "call_ids": metadata.get(META_CALLS, "")})


def _metadata(kind: str, event_id: str, call_ids: list[str]) -> dict[str, str]:
    joined = ""
    for call_id in call_ids:
        candidate = f"{joined},{call_id}" if joined else call_id
        if len(candidate) > MAX_META_VALUE:
            break
        joined = candidate
    return {META_KIND: kind, META_EVENT: event_id, META_CALLS: joined}
