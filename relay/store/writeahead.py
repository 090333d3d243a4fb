"""A process's store as its sessions write ahead to it: `WriteAhead`.

The engine's `Remember` actions come here through the session's driver. A synchronous store (in
memory) keeps the record at once (`write_now` is True), nothing waits, and the session's records
go when it ends (`session_ended`). Any other store is
written by `write`, which the session loop awaits before it carries out the actions that followed
the record (the loop's gate: see `SessionLoop.act_remember`); a write never raises. A store that
fails (unreachable, an error, slower than `timeout` seconds) puts the process in degraded mode:
one warning line says so, `on_event` hears `degraded` (the edge's metric), and for the next
`retry_after` seconds records are not written at all, so sessions run on what this process holds
without waiting; the first write after that tries the store again, and a success says
`recovered` in one line. Writes are whole snapshots: what was skipped meanwhile is repaired by the
call's next record.

A session held under a lease (relay/store/lease.py) writes with its lease's token (`guard`): a
write the store fences is no store failure but the session's loss, told to the session's
`on_fenced` at once (before the loop carries out what the write guarded) and never retried.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Callable

import anyio

from relay.engine.records import CallRecord
from relay.store.base import CallStore, Fenced

log = logging.getLogger("relay.store")

DEFAULT_WRITE_TIMEOUT = 0.5    # seconds a guarded action waits for the store at the most
DEFAULT_RETRY_AFTER = 5.0      # seconds of degraded mode before the store is tried again
LATENCIES_KEPT = 512           # the latest writes' times, for /healthz

StoreEvent = Callable[[str], None]
"""`degraded`, `recovered`, `write_failed` (a write that failed or took too long), `skipped` (a
record not written while degraded), `fenced` (a write refused: its session's lease was lost)."""


class WriteAhead:
    """Writes the engine's records to `store` ahead of the actions they guard, and degrades
    rather than fail. One per process (or per edge), shared by its sessions."""

    def __init__(self, store: CallStore, *, timeout: float = DEFAULT_WRITE_TIMEOUT,
                 retry_after: float = DEFAULT_RETRY_AFTER, clock: Callable[[], float] = time.monotonic,
                 on_event: StoreEvent | None = None, fence: int = 0,
                 on_latency: Callable[[float], None] | None = None) -> None:
        self.store = store
        self.timeout = timeout
        self.retry_after = retry_after
        self.clock = clock
        self.on_event = on_event
        self.on_latency = on_latency   # each write's time in seconds (the edge's histogram)
        self.latencies: deque[float] = deque(maxlen=LATENCIES_KEPT)
        self.fence = fence
        self.degraded = False
        self.reason = ""             # why the store is degraded, while it is
        self._retry_at = 0.0
        self.written = 0
        self.skipped = 0
        self.failed = 0
        self._users = 0   # the edges and attached calls that opened it and have not closed it
        self._guards: dict[str, tuple[int, Callable[[], None]]] = {}   # session -> (token, on_fenced)
        self.fenced = 0

    def guard(self, session_id: str, token: int, on_fenced: Callable[[], None]) -> None:
        """Write `session_id`'s records with `token` from now on; a write the store refuses as
        fenced calls `on_fenced` (the session lost its lease)."""
        self._guards[session_id] = (token, on_fenced)

    def unguard(self, session_id: str) -> None:
        self._guards.pop(session_id, None)

    def fence_of(self, session_id: str) -> int:
        guard = self._guards.get(session_id)
        return self.fence if guard is None else guard[0]

    def _refused(self, record: CallRecord) -> None:
        """The store fenced a write of the record's session: its owner is told, the process is not
        degraded."""
        self.fenced += 1
        self._event("fenced")
        guard = self._guards.pop(record.session_id, None)
        if guard is not None:
            guard[1]()

    def _event(self, event: str) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:   # a listener's failure is not the session's
                log.exception("a store event listener failed")

    async def open(self) -> None:
        """Reach the store at start; an unreachable one degrades the process, never stops it.
        Counted: each `open` (an edge, an attached call) has its `close`; the last one lets go."""
        self._users += 1
        if self._users > 1 or self.store.synchronous:
            return
        try:
            with anyio.fail_after(self.timeout * 4):
                await self.store.open()
        except Exception as exc:
            self._degrade(_why(exc, "at start"))
        else:
            log.info("call store ready", extra={"store": self.store.name})

    async def close(self) -> None:
        if self._users == 0:
            return
        self._users -= 1
        if self._users == 0 and not self.store.synchronous:
            with anyio.move_on_after(self.timeout):
                await self.store.close()

    def write_now(self, record: CallRecord) -> bool:
        """Keep `record` at once where that is possible: True when nothing is left to wait for
        (a synchronous store, or degraded mode, which skips it); False: `await write(record)`."""
        if self.store.synchronous:
            try:
                self.store.put_now(record, fence=self.fence_of(record.session_id))
                self.written += 1
            except Fenced:
                self._refused(record)
            except Exception as exc:
                self._failed(exc)
            return True
        if self.degraded and self.clock() < self._retry_at:
            self.skipped += 1
            self._event("skipped")
            return True
        return False

    async def read(self, session_id: str) -> list[CallRecord]:
        """The session's records (a replica taking it over reads them); none, with a log line,
        when the store does not answer."""
        try:
            with anyio.fail_after(self.timeout * 4):
                return await self.store.session_records(session_id)
        except Exception as exc:
            self._degrade(_why(exc, "reading"))
            return []

    def session_ended(self, session_id: str) -> None:
        """The session is over: a synchronous store lets its records go (nothing reads them after)."""
        if self.store.synchronous:
            self.store.forget_now(session_id)

    async def write(self, record: CallRecord) -> None:
        """Write `record` to the store, waiting `timeout` seconds at the most; never raises (but
        for the session's own cancellation)."""
        started = time.perf_counter()
        try:
            with anyio.fail_after(self.timeout):
                await self.store.put(record, fence=self.fence_of(record.session_id))
            self._took(time.perf_counter() - started)
        except Fenced:
            self._refused(record)
        except Exception as exc:
            self._failed(exc)
        else:
            self.written += 1
            if self.degraded:
                self.degraded, self.reason = False, ""
                log.warning("call store reachable again: calls are written ahead once more",
                            extra={"store": self.store.name})
                self._event("recovered")

    def _took(self, seconds: float) -> None:
        self.latencies.append(seconds)
        if self.on_latency is not None:
            self.on_latency(seconds)

    def health(self) -> dict[str, Any]:
        """What `/healthz` says of the store: its kind, whether it is degraded (and why), what was
        written, skipped, failed and fenced, and the latest writes' median and 99th percentile."""
        times = sorted(self.latencies)

        def ms(share: float) -> float | None:
            return round(times[min(len(times) - 1, int(share * len(times)))] * 1000, 3) if times else None

        return {"kind": self.store.name, "degraded": self.degraded, "reason": self.reason or None,
                "written": self.written, "skipped": self.skipped, "failed": self.failed, "fenced": self.fenced,
                "write_ms_p50": ms(0.5), "write_ms_p99": ms(0.99)}

    def _failed(self, exc: BaseException) -> None:
        self.failed += 1
        self._event("write_failed")
        self._degrade(_why(exc, "writing"))

    def _degrade(self, reason: str) -> None:
        self._retry_at = self.clock() + self.retry_after
        if self.degraded:
            return
        self.degraded, self.reason = True, reason
        log.warning("call store unavailable (%s): sessions keep running on what this process holds; "
                    "no call outlives this process until the store answers again", reason,
                    extra={"store": self.store.name})
        self._event("degraded")


def _why(exc: BaseException, when: str) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer {when} within the time allowed"
    if isinstance(exc, Fenced):
        return f"fenced {when}: {exc}"
    return f"{when}: {exc}" if str(exc) else f"{when}: {type(exc).__name__}"
