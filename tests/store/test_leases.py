"""Both stores' listing of leased sessions: what another replica finds once a lease expires or is
offered, and what an owner that ended its session leaves behind (nothing)."""

from __future__ import annotations

import itertools

from relay.store import CallStore, MemoryStore
from relay.store.base import Orphan
from relay.store.redis import RedisStore
from tests.store.conftest import FakeClock, redis_clock

_sessions = itertools.count()


def new_session() -> str:
    return f"lease{next(_sessions)}-{id(object())}"


async def orphan_of(store: CallStore, session: str) -> Orphan:
    """The store's orphan `session` (it must be one now)."""
    found = [orphan for orphan in await store.orphans() if orphan.session_id == session]
    assert found, f"{session} is no orphan"
    return found[0]


async def test_a_held_session_is_no_orphan_and_an_offered_one_is(store: CallStore) -> None:
    session = new_session()
    lease = await store.acquire(session, "a", ttl=30, target="rtc_1")
    assert lease is not None
    assert session not in {orphan.session_id for orphan in await store.orphans()}
    assert await store.offer(lease)
    assert await orphan_of(store, session) == Orphan(session, "rtc_1", offered=True)
    assert await store.renew(lease, ttl=30) is not None   # still held until a peer takes it
    taken = await store.acquire(session, "b", ttl=30)
    assert taken is not None and taken.token == lease.token + 1
    assert await store.renew(lease, ttl=30) is None
    assert session not in {orphan.session_id for orphan in await store.orphans()}
    assert await store.acquire(session, "a", ttl=30) is None   # taken, not offered any more


async def test_an_expired_lease_makes_an_orphan_another_owner_takes(store: CallStore) -> None:
    session = new_session()
    if isinstance(store, MemoryStore):
        clock = FakeClock()
        store.clock = clock
        lease = await store.acquire(session, "a", ttl=5, target="rtc_2")
        clock.now += 6
    else:
        assert isinstance(store, RedisStore)
        async with redis_clock(store.url) as redis_time:
            lease = await store.acquire(session, "a", ttl=0.001, target="rtc_2")
            await redis_time.passes(0.005)   # Redis's own clock, which its leases keep
    assert lease is not None
    assert await orphan_of(store, session) == Orphan(session, "rtc_2", offered=False)
    taken = await store.acquire(session, "b", ttl=30)
    assert taken is not None and taken.token > lease.token
    assert session not in {orphan.session_id for orphan in await store.orphans()}


async def test_an_ended_session_is_unlisted_unless_a_successor_holds_it(store: CallStore) -> None:
    session = new_session()
    lease = await store.acquire(session, "a", ttl=30, target="rtc_3")
    assert lease is not None
    assert await store.offer(lease)
    successor = await store.acquire(session, "b", ttl=30)
    assert successor is not None
    assert not await store.end(lease)          # the old owner's end does not end the successor's session
    assert await store.renew(successor, ttl=30) is not None
    assert await store.end(successor)
    assert await store.acquire(session, "c", ttl=30) is not None   # free, and unlisted
    assert session not in {orphan.session_id for orphan in await store.orphans()}
