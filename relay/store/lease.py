"""One session held under a lease in a shared store: `SessionLease`.

The owner of a session (an attached call) holds it for `ttl` seconds and renews it every third of
that from one task (`keep`); every record the session writes carries the lease's token (the
write-ahead's `guard`), so a store refuses the writes of an owner that lost the lease. The lease
is lost when a renewal is refused (it expired and another replica took it, or a peer took it
after `offer`) or when a write is fenced: `lost` is set and `on_lost` hears why, once. A store
that does not answer a renewal is no loss: the session runs on (the store's degraded mode) and
the next renewal tries again; only the store's own answer ends a lease. An output waits for its
call's record to be marked `sent` under the lease (`mark_sent`), so that whatever moment the lease
moves at, the output goes up from one replica only.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import anyio

from relay.engine.records import Phase
from relay.store.base import Fenced, Lease, StoreError
from relay.store.writeahead import WriteAhead

log = logging.getLogger("relay.store")

DEFAULT_LEASE_SECONDS = 10.0
RENEWALS_PER_LEASE = 3
OFFERED_RENEWAL_SECONDS = 0.05   # once offered, how soon the owner learns that a peer took it


class SessionLease:
    """The lease of `session_id` (listed under `target`) for `owner`, through `write_ahead`'s store."""

    def __init__(self, write_ahead: WriteAhead, session_id: str, *, owner: str, target: str,
                 ttl: float = DEFAULT_LEASE_SECONDS, on_lost: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.write_ahead = write_ahead
        self.store = write_ahead.store
        self.session_id = session_id
        self.owner = owner
        self.target = target
        self.ttl = ttl
        self.on_lost = on_lost
        self.clock = clock
        self.lease: Lease | None = None
        self.lost = anyio.Event()
        self.reason = ""
        self.offered = False
        self._wake = anyio.Event()
        self.acquire_seconds: float | None = None   # how long the store took to grant it

    async def hold(self) -> bool | None:
        """Acquire the lease: True held, False another owner holds it, None the store did not
        answer (the session runs unleased: no takeover for it)."""
        started = self.clock()
        try:
            with anyio.fail_after(self.write_ahead.timeout * 4):
                lease = await self.store.acquire(self.session_id, self.owner, self.ttl, target=self.target)
        except (StoreError, TimeoutError) as exc:
            log.warning("no lease for the session (%s): it runs, but no other replica can take it over",
                        exc or "the store did not answer", extra=self._fields())
            return None
        if lease is None:
            return False
        self.acquire_seconds = self.clock() - started
        self._held(lease)
        return True

    def _held(self, lease: Lease) -> None:
        self.lease = lease
        self.write_ahead.guard(self.session_id, lease.token, lambda: self.lose("a write was fenced"))

    def lose(self, reason: str) -> None:
        """The lease is gone (`reason`): told once."""
        if self.lost.is_set():
            return
        self.reason = reason
        self.lost.set()
        self._wake.set()
        self.write_ahead.unguard(self.session_id)
        if self.on_lost is not None:
            self.on_lost(reason)

    async def keep(self) -> None:
        """Renew the lease every third of its time until it is lost (or the task is cancelled)."""
        while self.lease is not None and not self.lost.is_set():
            interval = OFFERED_RENEWAL_SECONDS if self.offered else self.ttl / RENEWALS_PER_LEASE
            with anyio.move_on_after(min(interval, self.ttl / RENEWALS_PER_LEASE)):
                await self._wake.wait()
            self._wake = anyio.Event()
            if self.lost.is_set():
                return
            await self.renew()

    async def renew(self) -> bool:
        """One renewal: False once the lease is lost."""
        if self.lease is None or self.lost.is_set():
            return False
        try:
            with anyio.fail_after(self.write_ahead.timeout * 2):
                renewed = await self.store.renew(self.lease, self.ttl)
        except (StoreError, TimeoutError) as exc:
            log.warning("lease not renewed (%s): the session runs on", exc or "the store did not answer",
                        extra=self._fields())
            return True
        if renewed is None:
            self.lose("the lease expired or was taken by another replica")
            return False
        self.lease = renewed
        return True

    async def mark_sent(self, call_id: str, item_id: str = "") -> bool:
        """Before a call's output goes up: its record moves to `sent` (as the output item
        `item_id`) under the lease's token, so that a replica that takes the session over
        afterwards sends it again only as that same item (which the provider refuses if it has
        it: relay/edges/takeover.py), never as a second answer. False when
        the write was fenced (the lease is lost: the output must not go); a store that does not
        answer is no reason to hold the output back (True)."""
        if self.lease is None or self.lost.is_set():
            return self.lease is None
        try:
            with anyio.fail_after(self.write_ahead.timeout):
                await self.store.update(self.session_id, call_id, Phase.SENT, fence=self.lease.token,
                                        item_id=item_id, delivered=False)
        except Fenced:
            self.lose("a write was fenced")
            return False
        except (StoreError, TimeoutError):
            pass
        return True

    async def offer(self) -> bool:
        """Offer the session to a peer (a drain): held until the peer takes it, which the owner
        learns within `OFFERED_RENEWAL_SECONDS` from then on."""
        if self.lease is None or self.lost.is_set():
            return False
        try:
            self.offered = await self.store.offer(self.lease)
        except StoreError:
            return False
        self._wake.set()
        return self.offered

    async def end(self) -> None:
        """The session is over: unlisted and released, unless a successor holds it."""
        self.write_ahead.unguard(self.session_id)
        if self.lease is None:
            return
        lease, self.lease = self.lease, None
        try:
            with anyio.fail_after(self.write_ahead.timeout * 2):
                await self.store.end(lease)
        except (StoreError, TimeoutError) as exc:
            log.warning("session not unlisted (%s): a replica may find it and see the call ended",
                        exc or "the store did not answer", extra=self._fields())

    def _fields(self) -> dict[str, object]:
        return {"session_id": self.session_id, "store": self.store.name, "owner": self.owner}
