"""The in-memory store: the default, nothing to install. Records live as long as their session
(`forget_now` when it ends) and at most for the most recent `max_sessions` sessions; writes are
synchronous dictionary updates."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Callable

from relay.engine.records import CallRecord, Phase
from relay.store.base import CallStore, Fenced, Lease, Orphan, updated

DEFAULT_MAX_SESSIONS = 1024


class MemoryStore(CallStore):
    """Call records and leases in this process's memory. `clock` tells leases' time."""

    synchronous = True
    name = "memory"

    def __init__(self, *, max_sessions: int = DEFAULT_MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.max_sessions = max_sessions
        self.clock = clock
        self._sessions: OrderedDict[str, dict[str, str]] = OrderedDict()   # session -> call_id -> JSON
        self._fences: dict[str, int] = {}
        self._leases: dict[str, Lease] = {}
        self._listed: dict[str, str] = {}     # session -> target, while it lives
        self._offered: set[str] = set()       # sessions their owner offered to a peer
        self._resumes: dict[str, tuple[str, float]] = {}   # resume key -> (state, expires at)
        self._resumable: dict[str, float] = {}   # session -> until when a client may resume it

    def _check(self, session_id: str, fence: int) -> None:
        if fence < self._fences.get(session_id, 0):
            raise Fenced(f"session {session_id}: token {fence} is older than "
                         f"{self._fences[session_id]}")

    def _calls(self, session_id: str) -> dict[str, str]:
        calls = self._sessions.get(session_id)
        if calls is None:
            calls = self._sessions[session_id] = {}
            while len(self._sessions) > self.max_sessions:
                oldest, _ = self._sessions.popitem(last=False)
                self._fences.pop(oldest, None)
                self._leases.pop(oldest, None)
                self._listed.pop(oldest, None)
        else:
            self._sessions.move_to_end(session_id)
        return calls

    def forget_now(self, session_id: str) -> None:
        if self._resumable.get(session_id, 0.0) > self.clock():
            return   # a client may resume it: its records are read then
        self._resumable.pop(session_id, None)
        self._sessions.pop(session_id, None)
        self._fences.pop(session_id, None)
        self._leases.pop(session_id, None)
        self._listed.pop(session_id, None)
        self._offered.discard(session_id)

    def put_now(self, record: CallRecord, *, fence: int = 0) -> None:
        self._check(record.session_id, fence)
        self._calls(record.session_id)[record.call_id] = record.to_json()

    async def put(self, record: CallRecord, *, fence: int = 0) -> None:
        self.put_now(record, fence=fence)

    async def update(self, session_id: str, call_id: str, phase: Phase, *, fence: int = 0,
                     **changes: Any) -> bool:
        self._check(session_id, fence)
        text = self._sessions.get(session_id, {}).get(call_id)
        if text is None:
            return False
        self.put_now(updated(CallRecord.from_json(text), phase, changes), fence=fence)
        return True

    async def session_records(self, session_id: str) -> list[CallRecord]:
        return self._read(self._sessions.get(session_id, {}).values())

    async def acquire(self, session_id: str, owner: str, ttl: float, *, target: str = "") -> Lease | None:
        now = self.clock()
        held = self._leases.get(session_id)
        if (held is not None and held.expires_at > now and held.owner != owner
                and session_id not in self._offered):
            return None
        token = self._fences.get(session_id, 0) + 1
        self._fences[session_id] = token
        self._offered.discard(session_id)
        if target:
            self._listed[session_id] = target
        lease = self._leases[session_id] = Lease(session_id, owner, token, now + ttl)
        return lease

    async def orphans(self, limit: int = 100) -> list[Orphan]:
        now, found = self.clock(), []
        for session_id, target in self._listed.items():
            held = self._leases.get(session_id)
            offered = session_id in self._offered
            if held is None or held.expires_at <= now or offered:
                found.append(Orphan(session_id, target, offered))
        return found[:limit]

    async def offer(self, lease: Lease) -> bool:
        if not self._holds(lease):
            return False
        self._offered.add(lease.session_id)
        return True

    async def end(self, lease: Lease) -> bool:
        if self._fences.get(lease.session_id, 0) > lease.token:
            return False   # a successor owns it now: it is not over
        self._listed.pop(lease.session_id, None)
        self._offered.discard(lease.session_id)
        return await self.release(lease)

    def _holds(self, lease: Lease) -> bool:
        held = self._leases.get(lease.session_id)
        return (held is not None and (held.owner, held.token) == (lease.owner, lease.token)
                and held.expires_at > self.clock())

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        # An expired lease no other owner took (its entry is still this token's) is taken back.
        held = self._leases.get(lease.session_id)
        if held is None or (held.owner, held.token) != (lease.owner, lease.token):
            return None
        renewed = self._leases[lease.session_id] = Lease(lease.session_id, lease.owner, lease.token,
                                                         self.clock() + ttl)
        return renewed

    async def release(self, lease: Lease) -> bool:
        held = self._leases.get(lease.session_id)
        if held is None or held.token != lease.token:
            return False
        del self._leases[lease.session_id]
        return True

    async def keep_resume(self, key: str, session_id: str, state: str, ttl: float) -> None:
        now = self.clock()
        for old in [old for old, (_, until) in self._resumes.items() if until <= now]:
            del self._resumes[old]
        for ended in [ended for ended, until in self._resumable.items() if until <= now]:
            del self._resumable[ended]
            self.forget_now(ended)   # its session ended and can no longer be resumed
        self._resumes[key] = (state, now + ttl)
        self._resumable[session_id] = now + ttl

    async def resume_state(self, key: str) -> str | None:
        kept = self._resumes.get(key)
        if kept is None or kept[1] <= self.clock():
            self._resumes.pop(key, None)
            return None
        return kept[0]
