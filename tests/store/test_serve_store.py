"""`--store` at the edges: a proxied session's tool call written ahead to a real Redis (and the
provider key nowhere in it), an attached call's too, an unreachable store counted and survived, a
bad URL refused."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from relay.edges.config import ServerConfig
from relay.edges.serve import RelayServer
from relay.errors import ConfigError
from relay.engine.records import CallRecord, Phase
from relay.mock import MockUpstream
from relay.store import open_store
from tests.store.conftest import Writes
from tests.support.clients import realtime_client
from tests.support.keys import PROVIDER_KEY
from tests.support.redis_server import free_port
from tests.support.frames import said
from tests.support.relays import accepted_call, relay_for, sidecar_on, weather_turn
from tests.support.tools import WEATHER_SCRIPT, get_weather


async def test_a_proxied_call_is_written_ahead_to_redis(weather_mock: MockUpstream, redis_url: str) -> None:
    store = open_store(redis_url)
    raw = aioredis.Redis.from_url(redis_url)

    async def records() -> list[CallRecord]:
        keys = [key.decode() for key in await raw.keys("relay:{*}:calls")]
        return [record for key in keys for record in await store.session_records(key[len("relay:{"):-len("}:calls")])]

    async def followed_up() -> bool:   # its follow-up's response began (the last record of the call)
        return any(record.name == "get_weather" and record.phase is Phase.FOLLOWED_UP for record in await records())

    try:
        async with relay_for(weather_mock, tools=[get_weather], store=redis_url) as server:
            writes = Writes(server.write_ahead)
            async with realtime_client(server) as client:
                await weather_turn(client, says="found")
                await writes.until(followed_up, timeout=10)
            assert not server.write_ahead.degraded
        assert server.write_ahead.store.name == "redis"
        keys = [key.decode() for key in await raw.keys("relay:{*}:calls")]
        everything = b"".join([value for key in keys for value in (await raw.hvals(key))])
        assert keys and PROVIDER_KEY.encode() not in everything
    finally:
        await raw.aclose()
        await store.close()


async def test_serve_with_an_unreachable_store_answers_calls_and_counts_it(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, tools=[get_weather], store=f"redis://127.0.0.1:{free_port()}/0") as server:
        async with realtime_client(server) as client:
            await weather_turn(client, says="found")
        assert server.write_ahead.degraded
        assert server.metrics.store_events["degraded"] == 1
        assert server.metrics.store_events["skipped"] >= 1


def test_a_store_url_of_no_known_kind_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="--store: unknown store"):
        RelayServer(ServerConfig(store="postgres://db/relay", api_key=PROVIDER_KEY))


async def test_an_attached_call_is_written_ahead_to_redis_under_its_call_id(redis_url: str) -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        call_id, session = await accepted_call(mock)
        async with sidecar_on(mock, call_id, [get_weather], store=redis_url) as (sidecar, _):
            writes = Writes(sidecar.runtime.write_ahead)
            await mock.user_turn(session, "What's the weather in Paris?")
            await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "found" in said(e))
            write_ahead = sidecar.runtime.write_ahead
            assert write_ahead.store.name == "redis" and not write_ahead.degraded
            store = open_store(redis_url)

            async def followed_up() -> bool:   # a shared store keeps the call under its id
                return [r.phase for r in await store.session_records(call_id)] == [Phase.FOLLOWED_UP]

            await writes.until(followed_up, timeout=10)
            [record] = await store.session_records(call_id)
            await store.close()
    assert record.name == "get_weather" and record.follow_up
    assert record.output == "sunny in Paris" and record.idempotency_key.startswith(f"{call_id}:")
