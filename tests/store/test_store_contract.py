"""Both stores against one contract: records kept and read back, fencing, leases, bad data."""

from __future__ import annotations

import itertools

import pytest

from relay.engine.records import CallRecord, Phase, idempotency_key
from relay.store import CallStore, Fenced, MemoryStore, StoreError, open_store
from tests.store.conftest import FakeClock

_sessions = itertools.count()


def new_session() -> str:
    return f"s{next(_sessions)}-{id(object())}"


def record(session_id: str, call_id: str = "c1", phase: Phase = Phase.READY, at: float = 1.0,
           **fields: object) -> CallRecord:
    return CallRecord(session_id=session_id, call_id=call_id, name="refund", phase=phase, at=at,
                      arguments='{"order": 7}', **fields)  # type: ignore[arg-type]


async def test_a_put_record_is_read_back_latest_first_by_call(store: CallStore) -> None:
    session = new_session()
    await store.put(record(session, "c1", Phase.READY, 1.0))
    await store.put(record(session, "c2", Phase.READY, 2.0))
    await store.put(record(session, "c1", Phase.DECIDED, 3.0, output='{"ok":true}', outcome="ok"))
    records = await store.session_records(session)
    assert [(r.call_id, r.phase, r.output) for r in records] == [
        ("c2", Phase.READY, None), ("c1", Phase.DECIDED, '{"ok":true}')]
    assert await store.session_records(new_session()) == []


async def test_update_moves_a_kept_call_and_says_when_none_is_kept(store: CallStore) -> None:
    session = new_session()
    await store.put(record(session, idempotency_key="k"))
    assert await store.update(session, "c1", Phase.SENT, output="done", at=5.0)
    [kept] = await store.session_records(session)
    assert (kept.phase, kept.output, kept.at, kept.idempotency_key) == (Phase.SENT, "done", 5.0, "k")
    assert not await store.update(session, "nope", Phase.SENT)


async def test_leases_exclude_other_owners_and_fence_old_tokens(store: CallStore) -> None:
    session = new_session()
    first = await store.acquire(session, "replica-a", ttl=30)
    assert first is not None and first.token >= 1
    assert await store.acquire(session, "replica-b", ttl=30) is None
    await store.put(record(session), fence=first.token)
    renewed = await store.renew(first, ttl=30)
    assert renewed is not None and renewed.token == first.token
    assert await store.release(first)
    assert not await store.release(first)
    second = await store.acquire(session, "replica-b", ttl=30)
    assert second is not None and second.token > first.token
    assert await store.renew(first, ttl=30) is None
    with pytest.raises(Fenced):
        await store.put(record(session, phase=Phase.SENT), fence=first.token)
    with pytest.raises(Fenced):
        await store.update(session, "c1", Phase.SENT, fence=first.token)
    await store.put(record(session, phase=Phase.STARTED), fence=second.token)
    [kept] = await store.session_records(session)
    assert kept.phase is Phase.STARTED


async def test_records_keep_text_as_it_came(store: CallStore) -> None:
    session = new_session()
    odd = 'a "quoted" \u00e9 \ud800 end'
    await store.put(record(session, output=odd, idempotency_key=idempotency_key(session, "c1", "{}")))
    [kept] = await store.session_records(session)
    assert kept.output == odd


async def test_an_expired_lease_is_taken_by_another_owner() -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    first = await store.acquire("s", "a", ttl=5)
    assert first is not None
    clock.now += 6
    second = await store.acquire("s", "b", ttl=5)
    assert second is not None and second.token == first.token + 1
    assert await store.renew(first, ttl=5) is None


async def test_an_expired_lease_no_one_took_is_taken_back_by_its_owner() -> None:
    """A renewal the store answers after the lease ran out (a slow store) keeps the session when no
    other owner claimed it meanwhile; once one did, the old owner has lost it."""
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    first = await store.acquire("s", "a", ttl=5, target="call")
    assert first is not None
    clock.now += 6
    kept = await store.renew(first, ttl=5)
    assert kept is not None and kept.token == first.token and kept.expires_at == clock.now + 5
    assert await store.acquire("s", "b", ttl=5) is None
    clock.now += 6
    second = await store.acquire("s", "b", ttl=5)
    assert second is not None and await store.renew(first, ttl=5) is None


async def test_redis_takes_back_an_expired_lease_only_while_its_token_is_the_newest(redis_url: str) -> None:
    """The same on Redis, whose lease key vanishes when it expires (deleted here, as Redis would)."""
    import redis.asyncio as aioredis

    store = open_store(redis_url)
    raw = aioredis.Redis.from_url(redis_url)
    session = new_session()
    lease_key = "relay:{" + session + "}:lease"
    first = await store.acquire(session, "replica-a", ttl=30, target="call")
    assert first is not None
    await raw.delete(lease_key)
    kept = await store.renew(first, ttl=30)
    assert kept is not None and kept.token == first.token
    assert await store.acquire(session, "replica-b", ttl=30) is None
    await raw.delete(lease_key)
    second = await store.acquire(session, "replica-b", ttl=30)
    assert second is not None and second.token > first.token
    await raw.delete(lease_key)
    assert await store.renew(first, ttl=30) is None, "a peer took it: the old owner may not take it back"
    ended = await store.acquire(new_session(), "replica-a", ttl=30, target="call")
    assert ended is not None and await store.end(ended)
    assert await store.renew(ended, ttl=30) is None, "an ended session is not held again"
    await raw.aclose()
    await store.close()


async def test_bad_data_in_redis_is_skipped_not_raised(redis_url: str) -> None:
    import redis.asyncio as aioredis

    store = open_store(redis_url)
    session = new_session()
    await store.put(record(session, "good"))
    raw = aioredis.Redis.from_url(redis_url)
    calls = "relay:{" + session + "}:calls"
    await raw.hset(calls, mapping={"bad": b"\xff not json", "list": "[1]", "typed": '{"session_id": 3}'})
    await raw.aclose()
    records = await store.session_records(session)
    assert [r.call_id for r in records] == ["good"]
    assert store.skipped == 3
    assert not await store.update(session, "bad", Phase.SENT)
    await store.close()


def test_unknown_stores_are_refused() -> None:
    with pytest.raises(StoreError, match="unknown store"):
        open_store("postgres://x")
    assert isinstance(open_store(None), MemoryStore)
    assert isinstance(open_store("memory"), MemoryStore)


def test_idempotency_keys_are_stable_over_spelling_and_differ_by_arguments() -> None:
    key = idempotency_key("s", "c", '{"a": 1, "b": 2}')
    assert key == idempotency_key("s", "c", '{"b":2,"a":1}')
    assert key.startswith("s:c:")
    assert key != idempotency_key("s", "c", '{"a": 2, "b": 2}')
    assert key != idempotency_key("s", "other", '{"a": 1, "b": 2}')
    assert idempotency_key("s", "c", "not json") == idempotency_key("s", "c", "not json")


def test_records_from_bad_data_are_refused() -> None:
    for bad in ("[]", "{}", '{"session_id":"s","call_id":"c","name":"n","phase":"nope","at":1}',
                '{"session_id":"s","call_id":"c","name":"n","phase":"ready","at":"1"}', "\x00"):
        with pytest.raises(ValueError):
            CallRecord.from_json(bad)
