"""The Redis store (`--store redis://...`): the asyncio client of the `redis` package (the
`store` extra). Per session, one hash of call records (`relay:{session}:calls`, call id -> the
record's JSON), the session's newest fencing token (`relay:{session}:fence`) and its lease
(`relay:{session}:lease`, "owner token", expiring by itself). The braces keep a session's keys in
one slot of a cluster. A resumable proxied session's resume state is one string,
`relay:resume:{key}` (the key derived from its resume token, never the token), expiring by itself.
Every write checks the token in a Lua script, so the check and the write
are one step on the server. Records expire `record_ttl` seconds after their session's last write.

The leased sessions are listed in three keys every replica reads: `relay:sessions` (a hash,
session -> target), `relay:expiry` (a sorted set, session -> when its lease ends, in the server's
milliseconds; 0 once offered) and `relay:offered` (the sessions offered to a peer). They name many
sessions, so a cluster needs them in one slot of their own: this store is for one Redis (with its
replicas), not a cluster.
"""

from __future__ import annotations

import time
from typing import Any

from relay.engine.records import CallRecord, Phase
from relay.errors import UnusableInput
from relay.store.base import CallStore, Fenced, Lease, Orphan, StoreError, updated

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
LISTED, EXPIRY, OFFERED = "relay:sessions", "relay:expiry", "relay:offered"
_NOW = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
# KEYS: lease, fence, listed, expiry, offered; ARGV: owner, ttl ms, fence ttl ms, session, target.
# The new token, or 0 if held by another that did not offer it.
_ACQUIRE = _NOW + """
local held = redis.call('GET', KEYS[1])
local offered = redis.call('SISMEMBER', KEYS[5], ARGV[4]) == 1
if held and not offered and string.sub(held, 1, string.len(ARGV[1]) + 1) ~= ARGV[1] .. ' ' then return 0 end
local token = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. token, 'PX', ARGV[2])
redis.call('SREM', KEYS[5], ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[3], ARGV[4], ARGV[5]) end
if redis.call('HEXISTS', KEYS[3], ARGV[4]) == 1 then
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), ARGV[4])
end
return token
"""
# KEYS: lease, expiry, offered, fence, listed; ARGV: "owner token", ttl ms, session, token.
# 1 renewed, 0 lost. A lease that expired while no other replica took it (the fence still at this
# token, the session still listed) is taken back: a renewal the store answered late is no loss.
_RENEW = _NOW + """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif not held and tonumber(redis.call('GET', KEYS[4]) or '0') == tonumber(ARGV[4])
    and redis.call('HEXISTS', KEYS[5], ARGV[3]) == 1 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  return 0
end
if redis.call('SISMEMBER', KEYS[3], ARGV[3]) == 0 then
  redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[2]), ARGV[3])
end
return 1
"""
# KEYS: lease; ARGV: "owner token". 1 released, 0 not held.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: lease, expiry, offered; ARGV: "owner token", session. 1 offered, 0 not held.
_OFFER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SADD', KEYS[3], ARGV[2])
redis.call('ZADD', KEYS[2], 'XX', 0, ARGV[2])
return 1
"""
# KEYS: lease, fence, listed, expiry, offered; ARGV: "owner token", session, token.
# 1 ended, 0 a successor holds it (it goes on).
_END = """
if tonumber(redis.call('GET', KEYS[2]) or '0') > tonumber(ARGV[3]) then return 0 end
redis.call('HDEL', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[2])
redis.call('SREM', KEYS[5], ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""
# KEYS: listed, expiry, offered; ARGV: limit. [session, target, offered, ...] of the expired or offered
# (a lease ending at `now` still holds: Redis expires a key once its time is past).
_ORPHANS = _NOW + """
local found = {}
for _, session in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[1]))) do
  local target = redis.call('HGET', KEYS[1], session)
  if target then
    table.insert(found, session)
    table.insert(found, target)
    table.insert(found, redis.call('SISMEMBER', KEYS[3], session))
  else
    redis.call('ZREM', KEYS[2], session)
  end
end
return found
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
    shared = True

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
        self._offer = self._client.register_script(_OFFER)
        self._end = self._client.register_script(_END)
        self._orphans = self._client.register_script(_ORPHANS)

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

    async def acquire(self, session_id: str, owner: str, ttl: float, *, target: str = "") -> Lease | None:
        _, fence_key, lease_key = _keys(session_id)
        started = time.monotonic()
        token = await self._call("acquire", self._acquire(
            keys=[lease_key, fence_key, LISTED, EXPIRY, OFFERED],
            args=[owner, _ms(ttl), _ms(max(self.record_ttl, ttl)), session_id, target]))
        if not token:
            return None
        return Lease(session_id, owner, int(token), started + ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        _, fence_key, lease_key = _keys(lease.session_id)
        started = time.monotonic()
        renewed = await self._call("renew", self._renew(keys=[lease_key, EXPIRY, OFFERED, fence_key, LISTED], args=[
            _held(lease), _ms(ttl), lease.session_id, lease.token]))
        if not renewed:
            return None
        return Lease(lease.session_id, lease.owner, lease.token, started + ttl)

    async def release(self, lease: Lease) -> bool:
        _, _, lease_key = _keys(lease.session_id)
        released = await self._call("release", self._release(keys=[lease_key], args=[_held(lease)]))
        return bool(released)

    async def offer(self, lease: Lease) -> bool:
        _, _, lease_key = _keys(lease.session_id)
        offered = await self._call("offer", self._offer(keys=[lease_key, EXPIRY, OFFERED],
                                                        args=[_held(lease), lease.session_id]))
        return bool(offered)

    async def end(self, lease: Lease) -> bool:
        _, fence_key, lease_key = _keys(lease.session_id)
        ended = await self._call("end", self._end(keys=[lease_key, fence_key, LISTED, EXPIRY, OFFERED],
                                                  args=[_held(lease), lease.session_id, lease.token]))
        return bool(ended)

    async def keep_resume(self, key: str, session_id: str, state: str, ttl: float) -> None:
        await self._call("keep resume state", self._client.set(_resume_key(key), state, px=_ms(ttl)))

    async def resume_state(self, key: str) -> str | None:
        state = await self._call("read resume state", self._client.get(_resume_key(key)))
        return None if state is None else _text(state)

    async def orphans(self, limit: int = 100) -> list[Orphan]:
        found = await self._call("scan", self._orphans(keys=[LISTED, EXPIRY, OFFERED], args=[limit]))
        orphans = []
        for at in range(0, len(found) - 2, 3):
            session, target, offered = found[at:at + 3]
            orphans.append(Orphan(_text(session), _text(target), bool(offered)))
        return orphans


def _resume_key(key: str) -> str:
    return "relay:resume:{" + key + "}"


def _held(lease: Lease) -> str:
    """What the lease key holds while `lease` holds the session."""
    return f"{lease.owner} {lease.token}"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
