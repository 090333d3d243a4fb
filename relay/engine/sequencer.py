"""The sequencer: the one place that decides when the relay sends `response.create`.

It knows whether a response is active (whoever started it: the client, server VAD, the relay),
coalesces the follow-ups of several calls into one create, waits for `response.done`, tags what
it sends with an `event_id` and `metadata`, and recognises the errors aimed at it. Fillers
(`on_start`, `on_delay`) and spoken messages go through it too, so there are never two active
responses and never a filler after the result it was covering for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from relay.engine.actions import Notice

# Metadata keys the relay puts on its own responses (values must be strings, <= 512 chars).
META_KIND = "relay"
META_EVENT = "relay_event"
META_CALLS = "call_ids"
MAX_META_VALUE = 512

ACTIVE_RESPONSE_CODE = "conversation_already_has_active_response"
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


@dataclass(slots=True)
class FollowUp:
    """Outputs (or streaming updates) injected and waiting for the model to speak about them."""

    call_ids: list[str]
    interrupt: bool
    messages: list[str]
    confirm_item_ids: set[str]      # relay items that must exist upstream before a foreign
    requested_at: float             # response can count as answering this follow-up
    delegated: bool = False         # a released client response.create will answer it


@dataclass(slots=True)
class Filler:
    call_id: str
    kind: str        # on_start | on_delay
    text: str
    requested_at: float


@dataclass(slots=True)
class SentCreate:
    event_id: str
    purpose: str                 # follow_up | filler
    call_ids: list[str]
    frame: dict[str, Any]
    sent_at: float
    messages: list[str] = field(default_factory=list)
    interrupt: bool = False
    attempts: int = 1
    confirm_item_ids: set[str] = field(default_factory=set)
    taken_over: bool = False     # a foreign response already answers it: never retry it


@dataclass(slots=True)
class ForeignCreate:
    event_id: str | None
    expires_at: float


class Sequencer:
    """Response-level state for one session. The engine feeds it upstream facts and asks it,
    after every input, which frames to send now (`poll`)."""

    def __init__(
        self,
        *,
        new_event_id: Callable[[], str],
        build_create: Callable[[dict[str, Any], str], dict[str, Any]],
        ack_timeout: float = 15.0,
        foreign_timeout: float = 10.0,
        max_attempts: int = 4,
        retry_wait: float = 5.0,
    ) -> None:
        self._new_event_id = new_event_id
        self._build_create = build_create
        self.ack_timeout = ack_timeout
        self.foreign_timeout = foreign_timeout
        self.max_attempts = max_attempts
        self.retry_wait = retry_wait
        self.active: dict[str, str] = {}          # response id -> creator
        self.inflight: SentCreate | None = None   # our create, not yet acknowledged
        self.ours: dict[str, SentCreate] = {}     # response id -> our create that made it
        self.foreign: list[ForeignCreate] = []    # client creates forwarded, not yet resolved
        self.follow_ups: list[FollowUp] = []
        self.fillers: list[Filler] = []
        self.delayed_fillers: dict[str, tuple[float, str]] = {}   # call_id -> (when due, text): on_delay
        self.held_creates: list[tuple[str, str | None]] = []      # client creates waiting (frame, event id)
        self.held_for_relay = False     # while they waited, the relay's work (its calls, its responses) was why
        # a create the relay held went up later than the client sent it, and its response may still
        # run; what the client adds to the conversation after it is not in that response
        self.shifted = False
        self.added_since_shift = False
        self.retry: SentCreate | None = None      # our create refused as "already active"
        self.uncertain: dict[str, SentCreate] = {}  # in flight when the connection was replaced
        self.retry_waits_for_done = False
        self.retry_deadline = 0.0
        self.cancel_requested_for: str | None = None
        self.creates_sent = 0
        self.confirmed_items: set[str] = set()
        self._sent: dict[str, tuple[str, str | None]] = {}   # event id of a relay frame -> (what, call_id)

    # ---- facts from upstream -------------------------------------------------------------
    def busy(self, now: float) -> bool:
        self._expire(now)
        return bool(self.active or self.inflight or self.foreign or self.retry_waits_for_done)

    def item_confirmed(self, item_id: str) -> None:
        self.confirmed_items.add(item_id)

    def response_created(self, response_id: str, metadata: Any, now: float) -> tuple[str, SentCreate | None]:
        """Classify a new response and mark it active. Returns its creator and our create that
        made it (or None). A foreign response takes over the follow-ups it answers."""
        ours: SentCreate | None = None
        if isinstance(metadata, dict):
            event_id = metadata.get(META_EVENT)
            if event_id and self.inflight and self.inflight.event_id == event_id:
                ours = self.inflight
                self.inflight = None
            elif event_id and self.retry and self.retry.event_id == event_id:
                ours = self.retry
                self.retry = None
                self.retry_waits_for_done = False
            elif event_id in self.uncertain:
                ours = self.uncertain.pop(event_id)
        if ours is not None:
            creator = "relay"
            self.ours[response_id] = ours
        else:
            self._expire(now)
            if self.foreign:
                self.foreign.pop(0)
                creator = "client"
            else:
                creator = "server"
            self._taken_over_by_foreign_response()
        self.active[response_id] = creator
        return creator, ours

    def _taken_over_by_foreign_response(self) -> None:
        """A response someone else started after our outputs were in answers them. A follow-up
        delegated to a client's create is taken over the same way, not merely because some
        foreign response started: one the server had begun before that create arrived would
        otherwise take the follow-up with it, and the create be refused as "already active"
        (that refusal gives the follow-up back, see `_foreign_refused`)."""
        confirmed = self.confirmed_items
        self.follow_ups = [f for f in self.follow_ups if not f.confirm_item_ids <= confirmed]
        retry = self.retry
        if retry is not None and retry.purpose == "follow_up" and retry.confirm_item_ids <= confirmed:
            self.retry = None
            self.retry_waits_for_done = False
        inflight = self.inflight
        if inflight is not None and inflight.purpose == "follow_up" and inflight.confirm_item_ids <= confirmed:
            # our create is on its way and will be refused as "already active": never retry it
            inflight.taken_over = True

    def response_done(self, response_id: str) -> SentCreate | None:
        self.active.pop(response_id, None)
        if self.cancel_requested_for == response_id:
            self.cancel_requested_for = None
        if self.retry_waits_for_done:
            self.retry_waits_for_done = False
        return self.ours.pop(response_id, None)

    def forget_confirmed(self, keep: set[str]) -> None:
        """Drop confirmations nothing waits for any more (a long session makes thousands)."""
        if self.follow_ups or self.retry or self.inflight or self.uncertain:
            return
        self.confirmed_items &= keep

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
            if self.upstream_error(event_id, error, now) is None:
                return None
            return ("response.create", None)
        if ours[0] == "response.create":
            self.upstream_error(event_id, error, now)
        return ours

    def upstream_error(self, event_id: Any, error: dict[str, Any], now: float) -> SentCreate | None:
        """An error event; returns our create it refers to (None if not ours)."""
        ours: SentCreate | None = None
        if event_id and self.inflight and self.inflight.event_id == event_id:
            ours = self.inflight
        elif not event_id and self.inflight and is_active_response_error(error):
            self._expire(now)
            if self.foreign:
                self._foreign_refused(None)
                return None
            ours = self.inflight
        if ours is None:
            if is_active_response_error(error) or (event_id and self._is_foreign(event_id)):
                self._foreign_refused(event_id)
            return None
        self.inflight = None
        if ours.taken_over:
            return ours
        if is_active_response_error(error) and ours.attempts < self.max_attempts:
            ours.attempts += 1
            self.retry = ours
            # Retry after the active response's done. If none is known (a second writer's
            # response we have not seen start), wait for the next done, but not forever.
            self.retry_waits_for_done = not self.active
            self.retry_deadline = now + self.retry_wait
        return ours

    def _is_foreign(self, event_id: Any) -> bool:
        return any(f.event_id == event_id for f in self.foreign)

    def _foreign_refused(self, event_id: Any) -> None:
        for index, foreign in enumerate(self.foreign):
            if event_id is None or foreign.event_id == event_id:
                del self.foreign[index]
                break
        for follow_up in self.follow_ups:
            follow_up.delegated = False

    def client_create_forwarded(self, event_id: str | None, now: float, *, answers_pending: bool) -> None:
        self.foreign.append(ForeignCreate(event_id, now + self.foreign_timeout))
        if answers_pending:
            for follow_up in self.follow_ups:
                follow_up.delegated = True

    def reset_connection(self) -> None:
        """The upstream connection was replaced. A create in flight is not sent again: the edge
        resends what its old socket never took, and what it took has reached the server (whose
        response may have run while we were away); sending it again would answer twice. Its
        response.created, if it comes on the new connection, is still recognised as ours."""
        self.active.clear()
        self.foreign.clear()
        self.cancel_requested_for = None
        self.retry_waits_for_done = False
        if self.inflight is not None:
            self.uncertain[self.inflight.event_id] = self.inflight
            self.inflight = None

    def _expire(self, now: float) -> None:
        if self.retry_waits_for_done and self.retry_deadline <= now:
            self.retry_waits_for_done = False
        if self.foreign and self.foreign[0].expires_at <= now:
            self.foreign = [f for f in self.foreign if f.expires_at > now]
            if not self.foreign:
                for follow_up in self.follow_ups:
                    follow_up.delegated = False
        if self.inflight is not None and self.inflight.sent_at + self.ack_timeout <= now:
            # never acknowledged (a lost frame, a server that does not echo metadata): give up
            # waiting so the session cannot wedge; the request goes back to the queue once.
            stale = self.inflight
            self.inflight = None
            if stale.attempts < self.max_attempts:
                stale.attempts += 1
                self.retry = stale

    def next_deadline(self) -> float | None:
        deadlines = [f.expires_at for f in self.foreign]
        deadlines.extend(due for due, _text in self.delayed_fillers.values())
        if self.inflight is not None:
            deadlines.append(self.inflight.sent_at + self.ack_timeout)
        if self.retry_waits_for_done:
            deadlines.append(self.retry_deadline)
        return min(deadlines) if deadlines else None

    # ---- requests from the engine ----------------------------------------------------------
    def request_follow_up(
        self, call_ids: list[str], *, interrupt: bool, messages: list[str], confirm: set[str], now: float
    ) -> None:
        self.follow_ups.append(FollowUp(list(call_ids), interrupt, list(messages), set(confirm), now))

    def request_filler(self, call_id: str, kind: str, text: str, now: float) -> None:
        self.fillers.append(Filler(call_id, kind, text, now))

    def tool_started(self, call_id: str, on_start: str | None, on_delay: tuple[float, str] | None,
                     now: float) -> None:
        """A handler started: its `on_start` filler is due now, its `on_delay` one after the
        delay, unless the result comes first."""
        if on_start:
            self.request_filler(call_id, "on_start", on_start, now)
        if on_delay:
            delay_ms, text = on_delay
            self.delayed_fillers[call_id] = (now + delay_ms / 1000.0, text)

    def promote_due_fillers(self, now: float) -> None:
        for call_id, (due, text) in list(self.delayed_fillers.items()):
            if due <= now:
                del self.delayed_fillers[call_id]
                self.request_filler(call_id, "on_delay", text, now)

    def drop_fillers(self, call_id: str) -> None:
        """The result is in (or the handler is over): a filler for it would now come after (or
        over) the answer."""
        self.fillers = [f for f in self.fillers if f.call_id != call_id]
        self.delayed_fillers.pop(call_id, None)

    # ---- client creates ------------------------------------------------------------------
    def hold_client_create(self, frame: str, event_id: str | None, *, for_relay: bool) -> None:
        """A client's `response.create` that must wait: a response is active or on its way, or
        the relay's outputs are still to come. `for_relay`: the relay's work is why."""
        self.held_creates.append((frame, event_id))
        self.held_for_relay = self.held_for_relay or for_relay

    def release_held_creates(self, now: float) -> tuple[str | None, list[str | None]]:
        """What becomes of the held creates once nothing is active and the relay's outputs are
        in: the first goes up if the relay's work held it (it answers the outputs just injected;
        the follow-ups waiting are delegated to it); the others, and all of them when only
        someone else's response held them, are refused as the provider would have refused them
        (they met an active response). Returns the frame to send (or None) and the event ids of
        the refused creates."""
        held, for_relay = self.held_creates, self.held_for_relay
        self.held_creates, self.held_for_relay = [], False
        if not for_relay:
            return None, [event_id for _frame, event_id in held]
        (frame, event_id), *rest = held
        self.client_create_forwarded(event_id, now, answers_pending=True)
        self.shifted, self.added_since_shift = True, False
        return frame, [other for _frame, other in rest]

    def client_added_item(self) -> None:
        """The client added an item (its call's output, a message)."""
        if self.shifted:
            self.added_since_shift = True

    def shift_collides(self) -> bool:
        """Whether a client create now meets the response of the create the relay held back and
        the client has added to the conversation since: without the relay's holding, that earlier
        create would have been refused and this one answered, so the relay owes it a response."""
        return self.shifted and self.added_since_shift

    def settle_shift(self, now: float) -> None:
        """Nothing is active or on its way: the shifted create's response is over."""
        if self.shifted and not self.busy(now):
            self.shifted = self.added_since_shift = False

    def pending(self) -> bool:
        return bool(self.follow_ups or self.fillers or self.retry)

    # ---- decisions ----------------------------------------------------------------------
    def poll(self, now: float) -> list[dict[str, Any]]:
        """Frames to send now: at most one `response.create`, or one `response.cancel` when an
        `interrupt` follow-up waits behind someone else's response."""
        if self.busy(now):
            return self._maybe_interrupt()
        if self.retry is not None:
            sent = self.retry
            self.retry = None
            sent.sent_at = now
            self.inflight = sent
            self.creates_sent += 1
            return [sent.frame]
        eligible = [f for f in self.follow_ups if not f.delegated]
        if eligible:
            self.follow_ups = [f for f in self.follow_ups if f.delegated]
            return [self._send_follow_up(eligible, now)]
        if self.fillers:
            filler = self.fillers.pop(0)
            return [self._send_filler(filler, now)]
        return []

    def _maybe_interrupt(self) -> list[dict[str, Any]]:
        if self.cancel_requested_for is not None or self.inflight is not None:
            return []
        if not any(f.interrupt and not f.delegated for f in self.follow_ups):
            return []
        target = next(iter(self.active), None)
        if target is None:
            return []
        self.cancel_requested_for = target
        event_id = self._new_event_id()
        self.remember(event_id, "response.cancel", None)
        return [{"type": "response.cancel", "event_id": event_id, "response_id": target}]

    def _create(self, options: dict[str, Any], event_id: str) -> dict[str, Any]:
        self.remember(event_id, "response.create", None)
        return self._build_create(options, event_id)

    def _send_follow_up(self, follow_ups: list[FollowUp], now: float) -> dict[str, Any]:
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
        sent = SentCreate(event_id, "follow_up", call_ids, frame, now, messages,
                          any(f.interrupt for f in follow_ups), confirm_item_ids=confirm)
        self.inflight = sent
        self.creates_sent += 1
        return frame

    def _send_filler(self, filler: Filler, now: float) -> dict[str, Any]:
        event_id = self._new_event_id()
        metadata = _metadata("filler", event_id, [filler.call_id])
        metadata["filler"] = filler.kind
        options = {
            "conversation": "none",
            "input": [],
            "instructions": say_instructions(filler.text),
            "metadata": metadata,
        }
        frame = self._create(options, event_id)
        self.inflight = SentCreate(event_id, "filler", [filler.call_id], frame, now, [filler.text])
        self.creates_sent += 1
        return frame


def sent_notice(frame: dict[str, Any]) -> Notice | None:
    """The notice for a `response.create` the sequencer sent (`follow_up` or `filler`)."""
    if frame["type"] != "response.create":
        return None
    metadata = frame.get("response", {}).get("metadata", {})
    return Notice("follow_up" if metadata.get(META_KIND) == "follow_up" else "filler",
                  {"event_id": frame["event_id"], "call_ids": metadata.get(META_CALLS, "")})


def _metadata(kind: str, event_id: str, call_ids: list[str]) -> dict[str, str]:
    joined = ""
    for call_id in call_ids:
        candidate = f"{joined},{call_id}" if joined else call_id
        if len(candidate) > MAX_META_VALUE:
            break
        joined = candidate
    return {META_KIND: kind, META_EVENT: event_id, META_CALLS: joined}
