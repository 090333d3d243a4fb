"""The Redis store (`--store redis://...`): the asyncio client of the `redis` package (the
`store` extra). Per session, one hash of call records (`relay:{session}:calls`, call id -> the
record's JSON), the session's newest fencing token (`relay:{session}:fence`) and its lease
(`relay:{session}:lease`, "owner token", expiring by itself). The braces keep a session's keys in
one slot of a cluster. Every write checks the token in a Lua script, so the check and the write
are one step on the server. Records expire `record_ttl` seconds after their session's last write.
"""

from __future__ import annotations

import time
from typing import Any

from relay.engine.records import CallRecord, Phase
from relay.errors import UnusableInput
from relay.store.base import CallStore, Fenced, Lease, StoreError, updated

DEFAULT_RECORD_TTL = 24 * 3600.0
DEFAULT_SOCKET_TIMEOUT = 2.0
INSTALL = "pip install 'realtime-relay[store]'"

# KEYS: calls, fence; ARGV: fence, call id, record JSON, ttl ms. 1 written, -1 fenced.
_PUT = """
local newest = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < newest then return -1 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""
# KEYS: lease, fence; ARGV: owner, ttl ms, fence ttl ms. The new token, or 0 if held by another.
_ACQUIRE = """
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, string.len(ARGV[1]) + 1) ~= ARGV[1] .. ' ' then return 0 end
local token = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. token, 'PX', ARGV[2])
return token
"""
# KEYS: lease; ARGV: "owner token", ttl ms. 1 renewed, 0 lost.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# KEYS: lease; ARGV: "owner token". 1 released, 0 not held.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _keys(session_id: str) -> tuple[str, str, str]:
    base = "relay:{" + session_id + "}"
    return f"{base}:calls", f"{base}:fence", f"{base}:lease"


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class RedisStore(CallStore):
    """Call records and leases in Redis at `url`. The connection pool is the client's own; each
    command waits `socket_timeout` seconds at the most (a store that takes longer is down)."""

    name = "redis"

    def __init__(self, url: str, *, record_ttl: float = DEFAULT_RECORD_TTL,
                 socket_timeout: float = DEFAULT_SOCKET_TIMEOUT) -> None:
        super().__init__()
        try:
            import redis.asyncio as aioredis
            from redis.exceptions import RedisError
        except ImportError:
            raise UnusableInput(f"--store {url.split('://')[0]}:// needs the redis package: {INSTALL}") from None
        self.url = url
        self.record_ttl = record_ttl
        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError)
        try:
            self._client = aioredis.Redis.from_url(url, socket_timeout=socket_timeout,
                                                   socket_connect_timeout=socket_timeout)
        except ValueError as exc:
            raise UnusableInput(f"--store: {exc}") from None
        self._put = self._client.register_script(_PUT)
        self._acquire = self._client.register_script(_ACQUIRE)
        self._renew = self._client.register_script(_RENEW)
        self._release = self._client.register_script(_RELEASE)

    def __repr__(self) -> str:
        return f"RedisStore({self.where!r})"

    @property
    def where(self) -> str:
        """The URL without its password (what logs say)."""
        scheme, _, rest = self.url.partition("://")
        return f"{scheme}://{rest.rpartition('@')[2]}"

    async def _call(self, what: str, step: Any) -> Any:
        try:
            return await step
        except self._errors as exc:
            raise StoreError(f"redis at {self.where}: {what}: {type(exc).__name__}: {exc}") from None

    async def open(self) -> None:
        await self._call("ping", self._client.ping())

    async def close(self) -> None:
        try:
            await self._client.aclose()
        except self._errors:
            pass

    async def put(self, record: CallRecord, *, fence: int = 0) -> None:
        calls, fence_key, _ = _keys(record.session_id)
        written = await self._call("put", self._put(keys=[calls, fence_key], args=[
            fence, record.call_id, record.to_json(), _ms(self.record_ttl)]))
        if written == -1:
            raise Fenced(f"session {record.session_id}: token {fence} is older than the session's")

    async def update(self, session_id: str, call_id: str, phase: Phase, *, fence: int = 0,
                     **changes: Any) -> bool:
        calls, _, _ = _keys(session_id)
        text = await self._call("read", self._client.hget(calls, call_id))
        if text is None:
            return False
        try:
            record = updated(CallRecord.from_json(text), phase, changes)
        except ValueError:   # not a record: as if none were kept
            self.skipped += 1
            return False
        await self.put(record, fence=fence)
        return True

    async def session_records(self, session_id: str) -> list[CallRecord]:
        calls, _, _ = _keys(session_id)
        texts = await self._call("read", self._client.hvals(calls))
        return self._read(texts)

    async def acquire(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        _, fence_key, lease_key = _keys(session_id)
        started = time.monotonic()
        token = await self._call("acquire", self._acquire(keys=[lease_key, fence_key], args=[
            owner, _ms(ttl), _ms(max(self.record_ttl, ttl))]))
        if not token:
            return None
        return Lease(session_id, owner, int(token), started + ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        _, _, lease_key = _keys(lease.session_id)
        started = time.monotonic()
        renewed = await self._call("renew", self._renew(keys=[lease_key], args=[
            f"{lease.owner} {lease.token}", _ms(ttl)]))
        if not renewed:
            return None
        return Lease(lease.session_id, lease.owner, lease.token, started + ttl)

    async def release(self, lease: Lease) -> bool:
        _, _, lease_key = _keys(lease.session_id)
        released = await self._call("release", self._release(keys=[lease_key], args=[f"{lease.owner} {lease.token}"]))
        return bool(released)
