"""GPT-Live's Responses delegation: the batch rule, when the one `response.create` of a batch may
go up.

A Responses delegation runs a backend response; the function calls it makes arrive (nested in
`response.event`) as finished output items, and its end as the nested `response.completed`, whose
snapshot lists no output even when calls are pending. The calls of one response are a batch: each
gets one `function_call_output`, and then exactly one `response.create` continues the response.
Results do not continue it by themselves, and a create before every result is in is a partial
batch, which the server rejects. So a batch is continued when, and only when, its response has
completed, it holds a call of the relay's, every call of it has its output (the relay's sent, the
client's seen on their way up) and it was not continued before. Who sends that create is as on
Realtime: the relay for a batch of its calls only; the client for a batch with calls of its own
(it asks, and its create waits until the batch is whole); a batch with no relay call is the
client's alone, as it would be without the relay. The continuation is a new response of the
same delegation: a new round of the batch.

The batch of each delegation (or, for an event the server could not correlate, of its
response) is data here; the engine (`delegations.LiveEngine`) feeds it and sends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from relay.engine.calls import UNANSWERED, CallEntry, CallState, Owner

MAX_BATCHES_KEPT = 64
"""Batches a session keeps: the recent ones (a continued batch older than these is over)."""


@dataclass(slots=True)
class Batch:
    """One delegation's current round: its response, its calls in order, whether the response
    completed (or failed), whether it was continued, and the client's create held for it."""

    key: str
    response_id: str | None = None
    calls: list[str] = field(default_factory=list)
    owners: dict[str, Owner] = field(default_factory=dict)   # each call's owner, as it came
    completed: bool = False
    failed: bool = False
    continued: bool = False
    held_create: Any = None   # a client's create for a batch of both, until the batch is whole
    rounds: int = 1
    answered_at: float | None = None   # when the client's latest output for a call of it went up
    completed_at: float | None = None   # when its response completed (or failed)


class Batches:
    """The batches of one session's Responses delegations, by delegation id."""

    def __init__(self, lookup: Callable[[str], CallEntry | None]) -> None:
        self._lookup = lookup                   # the call book's entry of a call id
        self._by_key: dict[str, Batch] = {}
        self._by_call: dict[str, str] = {}

    def __iter__(self):   # type: ignore[no-untyped-def]
        return iter(list(self._by_key.values()))

    def get(self, key: str) -> Batch | None:
        return self._by_key.get(key)

    def of_call(self, call_id: str) -> Batch | None:
        key = self._by_call.get(call_id)
        return self._by_key.get(key) if key is not None else None

    def open(self, key: str, response_id: str | None = None) -> Batch:
        """The batch of `key`, made if it is new."""
        batch = self._by_key.get(key)
        if batch is None:
            batch = self._by_key[key] = Batch(key, response_id)
            self._forget_old()
        elif response_id is not None and batch.response_id is None:
            batch.response_id = response_id
        return batch

    def response_started(self, key: str, response_id: str | None) -> Batch:
        """A backend response of `key` began: after a continuation (or an end), a new round."""
        batch = self.open(key, response_id)
        if batch.continued or batch.completed or batch.failed:
            batch.calls.clear()
            batch.owners.clear()
            batch.completed = batch.failed = batch.continued = False
            batch.held_create = None
            batch.rounds += 1
        if response_id is not None:
            batch.response_id = response_id
        return batch

    def add_call(self, batch: Batch, call_id: str, owner: Owner) -> None:
        batch.calls.append(call_id)
        batch.owners[call_id] = owner
        self._by_call[call_id] = batch.key

    def relay_calls(self, batch: Batch) -> list[CallEntry]:
        return [entry for entry in self._entries(batch) if entry.owner is Owner.RELAY]

    @staticmethod
    def has_relay_calls(batch: Batch) -> bool:
        return Owner.RELAY in batch.owners.values()

    @staticmethod
    def has_client_calls(batch: Batch) -> bool:
        return Owner.CLIENT in batch.owners.values()

    def missing(self, batch: Batch) -> list[str]:
        """The calls of the batch whose output is not in yet (the relay's not sent, the client's
        not seen)."""
        return [call_id for call_id in batch.calls
                if (entry := self._lookup(call_id)) is not None and entry.state is not CallState.ANSWERED]

    def due(self, batch: Batch) -> bool:
        """Whether the relay continues the batch now: its response completed, it holds a relay
        call, every output is in, and it was not continued yet."""
        return (batch.completed and not batch.failed and not batch.continued
                and self.has_relay_calls(batch) and not self.missing(batch))

    def awaiting_relay(self) -> list[Batch]:
        """Batches the relay will continue once complete: a relay call, not continued, not
        failed. A client's create meant for one of them is the relay's to send."""
        return [batch for batch in self._by_key.values()
                if not batch.continued and not batch.failed and self.has_relay_calls(batch)]

    def others_under_way(self, batch: Batch | None, begun: set[str]) -> bool:
        """Whether another delegation's backend work makes a create for `batch` wrong now: its
        response begun (`begun`: the response ids begun) and not ended, which a create would meet
        with a second response at once; or a relay call of its ended response unanswered (a
        create names no delegation: it continues the session's calls, and before that call's
        output it is a partial batch, or has the model speak over an open call). A delegation
        announced whose response has not begun does not count: nothing on the wire ends it."""
        for other in self._by_key.values():
            if other is batch or other.continued or other.failed:
                continue
            if not other.completed:
                if other.response_id is not None and other.response_id in begun:
                    return True
            elif any(entry.state in UNANSWERED for entry in self.relay_calls(other)):
                return True
        return False

    def _entries(self, batch: Batch) -> list[CallEntry]:
        return [entry for call_id in batch.calls if (entry := self._lookup(call_id)) is not None]

    def _forget_old(self) -> None:
        if len(self._by_key) <= MAX_BATCHES_KEPT:
            return
        for key in list(self._by_key)[: len(self._by_key) - MAX_BATCHES_KEPT]:
            batch = self._by_key[key]
            if batch.continued or batch.failed or (batch.completed and not self.has_relay_calls(batch)):
                del self._by_key[key]
                for call_id in batch.calls:
                    self._by_call.pop(call_id, None)


class CreatesUp:
    """A session's `response.create`s whose response has not begun, in the order they went up, and
    when each went. A create the server never starts a response for (refused, lost) is not kept for
    ever: past `KEPT` the oldest go first, and it holds nothing past a wait (`wait_ends`)."""

    KEPT = 32

    def __init__(self) -> None:
        self._up: list[tuple[str | None, float]] = []

    def went_up(self, event_id: str | None, now: float) -> None:
        self._up.append((event_id, now))
        del self._up[:-self.KEPT]

    def remove(self, event_id: str | None) -> None:
        """Its response began, or it was refused: it is no longer on its way."""
        for index, (up, _) in enumerate(self._up):
            if up == event_id:
                del self._up[index]
                return

    def pop_earliest(self) -> str | None:
        return self._up.pop(0)[0] if self._up else None

    def clear(self) -> None:
        self._up.clear()

    def wait_ends(self, now: float, wait: float) -> float | None:
        """When the wait for the creates on their way sent less than `wait` seconds ago ends, or
        None when none is that recent."""
        ends = [at + wait for _, at in self._up if at + wait > now]
        return min(ends) if ends else None


__all__ = ["Batch", "Batches", "CreatesUp", "MAX_BATCHES_KEPT"]
