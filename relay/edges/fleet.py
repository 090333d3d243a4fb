"""This replica among the `relay sidecar` replicas that share a store: `Fleet`.

A replica learns of calls that no longer have a live owner by looking: every `scan_seconds` it
asks the store for its orphans (sessions whose lease expired, or that their owner offered to a
peer as it drains) and attaches to each one it does not already serve, as a takeover
(`Sidecar(takeover=True)`: attach, take the lease, finish the owed calls). Two replicas that find
the same orphan both attach; the store's lease lets one keep it, and the other detaches at once.
A store that does not answer a scan is tried again at the next (one log line while it fails).
"""

from __future__ import annotations

import logging
from typing import Callable, Collection

import anyio

from relay.edges.sideband import SidecarRuntime, call_field
from relay.store import StoreError

log = logging.getLogger("relay.sidecar")

SCANS_PER_LEASE = 4
SCAN_LIMIT = 100


class Fleet:
    """Finds the store's orphaned calls and hands each to `attach(call_id)` (a takeover), unless
    `attached()` lists it already."""

    def __init__(self, runtime: SidecarRuntime, *, attach: Callable[[str], None],
                 attached: Callable[[], Collection[str]], scan_seconds: float | None = None) -> None:
        self.runtime = runtime
        self.attach = attach
        self.attached = attached
        self.scan_seconds = scan_seconds or runtime.config.lease_seconds / SCANS_PER_LEASE
        self.scans = 0
        self._failing = False

    async def run(self) -> None:
        """Scan on a timer until cancelled."""
        while True:
            await self.scan()
            await anyio.sleep(self.scan_seconds)

    async def scan(self) -> int:
        """One look at the store: how many orphaned calls were handed to `attach`."""
        store = self.runtime.write_ahead.store
        self.scans += 1
        try:
            with anyio.fail_after(self.runtime.write_ahead.timeout * 4):
                orphans = await store.orphans(SCAN_LIMIT)
        except (StoreError, TimeoutError) as exc:
            if not self._failing:
                log.warning("cannot look for orphaned calls (%s): no takeover until the store answers",
                            exc or "the store did not answer", extra={"store": store.name})
            self._failing = True
            return 0
        self._failing = False
        attached, taken = set(self.attached()), 0
        for orphan in orphans:
            if orphan.target and orphan.target not in attached:
                log.info("taking over a call", extra={call_field(self.runtime.dialect): orphan.target,
                                                      "offered": orphan.offered})
                self.attach(orphan.target)
                taken += 1
        return taken
