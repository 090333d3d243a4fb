"""Limits a client cannot pass, on real sockets through `RelayServer` to the mock upstream:
`--max-sessions` refuses the next client with 503 at the handshake (no upstream connection), and
failed authentications from one address are refused with 429 after a burst, logged in summary
rather than one line per attempt (relay/edges/admission.py; its bucket on a fake clock here).
What an open session may make the engine keep is bounded in tests/test_engine_limits.py."""

from __future__ import annotations

import json
import logging

import pytest
from websockets.exceptions import InvalidStatus

from relay.edges.admission import FailedAuthentication
from relay.engine import limits
from relay.mock import MockUpstream
from relay.mock.script import MockScript, Reply
from tests.support.frames import user_text
from tests.support.keys import PROVIDER_KEY
from tests.support.relays import LeakGuard, weather_turn


async def test_past_max_sessions_a_client_gets_503_and_no_upstream_connection(
        guard: LeakGuard, mock: MockUpstream) -> None:
    async with guard.relay(mock, max_sessions=2) as server, guard.client(server) as first, \
            guard.client(server) as second:
        await first.wait_type("session.created")
        await second.wait_type("session.created")
        with pytest.raises(InvalidStatus) as refused:
            async with guard.client(server):
                pass
        assert refused.value.response.status_code == 503
        assert refused.value.response.headers["Retry-After"] == "1"
        assert "--max-sessions" in json.loads(refused.value.response.body)["error"]["message"]
        assert len(mock.sessions) == 2
        await weather_turn(first)   # the open ones go on
    async with guard.relay(mock, max_sessions=2) as server, guard.client(server) as later:
        await later.wait_type("session.created")   # room again once they ended


async def test_failed_authentications_from_one_address_get_429_after_a_burst_and_one_summary_line(
        guard: LeakGuard, mock: MockUpstream) -> None:
    now = [0.0]
    async with guard.relay(mock) as server:
        failures = server._handshake.failures = FailedAuthentication(burst=5, per_second=1.0, clock=lambda: now[0])
        statuses = []
        for _ in range(40):
            with pytest.raises(InvalidStatus) as refused:
                async with guard.client(server, token="wrong-token"):
                    pass
            statuses.append(refused.value.response.status_code)
        with pytest.raises(InvalidStatus) as throttled:   # the right token waits its turn too
            async with guard.client(server):
                pass
        assert throttled.value.response.status_code == 429
        assert int(throttled.value.response.headers["Retry-After"]) >= 1
        now[0] += 1.0   # a failure's worth later, the right token gets in
        async with guard.client(server) as client:
            await client.wait_type("session.created")
        now[0] += 60.0
        failures.flush()
    assert statuses == [401] * 5 + [429] * 35
    assert server.metrics.sessions_total == 1 and len(mock.sessions) == 1
    lines = [json.loads(line) for line in guard.log.getvalue().splitlines()]
    refusals = [line for line in lines if line["logger"] == "relay.server" and "handshake" in line["msg"]]
    assert len(refusals) == 2, [line["msg"] for line in refusals]   # the first attempt, then the summary
    assert "36 with 429" in refusals[1]["msg"] and "4 without the right relay token" in refusals[1]["msg"]


def test_the_failure_bucket_refills_forgets_full_addresses_and_stays_bounded(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    failures = FailedAuthentication(burst=3, per_second=0.5, summary_seconds=10.0, max_addresses=100,
                                    clock=lambda: now[0], logger=logging.getLogger("relay.server"))
    with caplog.at_level(logging.INFO, logger="relay.server"):
        for _ in range(3):
            assert failures.retry_after("10.0.0.1:5000") is None
            failures.failed("10.0.0.1:5000", "wrong token")
        assert failures.retry_after("10.0.0.1:5001") == pytest.approx(2.0)   # the port aside
        assert failures.retry_after("10.0.0.2:5000") is None                 # another address
        now[0] += 2.0
        assert failures.retry_after("10.0.0.1:5000") is None
        for index in range(1000):   # many addresses: the table stays bounded
            failures.failed(f"[2001:db8::{index:x}]:443", "wrong token")
        assert len(failures) <= 100
        now[0] += 10.0
        failures.failed("10.0.0.3:1", "wrong token")
    assert len(caplog.records) == 2
    # the first failure as it came, then the others in one line
    assert "1003 without the right relay token, 1 with 429 (too many failures), from 100 or more addresses" in \
        caplog.records[1].getMessage()


async def test_a_client_past_a_session_limit_gets_an_error_and_its_session_goes_on(guard: LeakGuard) -> None:
    """response.create events sent while a response is active are held, and past the limit
    refused with `session_limit_exceeded` (logged once); the session goes on: once the response
    ends, the held ones get their refusal and a new create is answered."""
    script = MockScript(default=Reply(say="still talking", hold=True))
    async with MockUpstream(script=script, api_key=PROVIDER_KEY) as mock, guard.relay(mock) as server, \
            guard.client(server) as client:
        await client.wait_type("session.created")
        await client.send(user_text("talk"))
        await client.send({"type": "response.create"})
        await client.wait_type("response.created")
        for index in range(limits.MAX_HELD_CREATES + 10):
            await client.send({"type": "response.create", "event_id": f"c{index}",
                               "response": {"instructions": "x" * 1024}})
        error = await client.wait_for(lambda event: event["type"] == "error"
                                      and event["error"]["code"] == limits.LIMIT_CODE)
        assert error["error"]["event_id"] == f"c{limits.MAX_HELD_CREATES}"
        mock.release(mock.sessions[0])
        await client.wait_type("response.done")
        await client.wait_for(lambda event: event["type"] == "error" and event["error"].get("event_id") == "c0")
    refused = [event["error"]["code"] for event in client.events if event["type"] == "error"]
    assert refused.count(limits.LIMIT_CODE) == 10
    assert guard.log.getvalue().count("reached a session limit") == 1
