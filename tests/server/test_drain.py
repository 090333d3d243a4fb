"""The drain of `relay serve` on SIGTERM, with real processes, in the order a load balancer needs:
`/healthz` turns 503 at once while the listener stays open, a new session is refused with 503,
the open sessions run to their end, then the process exits 0 (at the latest at --drain-seconds,
closing what is left with 1001). The same with --workers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from relay.mock import MockUpstream
from tests.support.clients import TIMEOUT, RealtimeClient, http_get, realtime_client
from tests.support.keys import PROVIDER_KEY
from tests.support.processes import next_log_line, relay_process
from tests.support.relays import weather_turn

RAINY_TOOLS = "from relay.tools import tool\n\n@tool\ndef get_weather(city: str) -> str:\n    return 'rainy'\n"


def serve_args(mock: MockUpstream, *more: str) -> tuple[str, ...]:
    return ("serve", "--port", "0", "--upstream", mock.url, "--dialect", "openai", "--tools", "weather_tools",
            *more)


async def refused_while_draining(base: str) -> dict[str, Any]:
    """A new session's attempt: it must be refused with 503; the error body."""
    with pytest.raises(InvalidStatus) as refused:
        async with realtime_client(base, token=None):
            pass
    assert refused.value.response.status_code == 503
    return json.loads(refused.value.response.body)["error"]


def position(log: list[str], predicate: Any) -> int:
    """The index of the first JSON log line that satisfies `predicate`."""
    return next(i for i, line in enumerate(log) if line.startswith("{") and predicate(json.loads(line)))


async def test_sigterm_turns_healthz_503_at_once_lets_open_sessions_finish_then_exits_0(
        weather_mock: MockUpstream, tmp_path: Path) -> None:
    (tmp_path / "weather_tools.py").write_text(RAINY_TOOLS)
    log: list[str] = []
    # a deadline far beyond the test's patience: the relay must stop when its sessions end
    async with relay_process(*serve_args(weather_mock, "--drain-seconds", "300"), cwd=tmp_path,
                             env={"OPENAI_API_KEY": PROVIDER_KEY}) as relay:
        assert relay.stderr is not None
        listening = await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
        port = int(listening["url"].rsplit(":", 1)[1].split("/")[0])
        base = f"ws://127.0.0.1:{port}"
        async with realtime_client(base, token=None) as first, realtime_client(base, token=None) as second:
            await first.wait_type("session.created")
            await second.wait_type("session.created")
            assert (await http_get(port, "/healthz"))[0] == 200
            relay.send_signal(signal.SIGTERM)
            await next_log_line(relay.stderr, lambda r: r["msg"].startswith("SIGTERM: draining"), log)
            status, _, body = await http_get(port, "/healthz")   # the listener is still open
            assert (status, json.loads(body)["status"]) == (503, "draining")
            assert "draining" in (await refused_while_draining(base))["message"]
            # the open sessions go on: a tool call each, then the clients hang up one by one
            for client in (first, second):
                assert "rainy" in json.dumps(await weather_turn(client, says="found"))
            await first.ws.close()
            assert (await http_get(port, "/healthz"))[0] == 503   # one session still open: still draining
            assert "rainy" in json.dumps(await weather_turn(second, says="found"))
        assert await asyncio.wait_for(relay.wait(), TIMEOUT) == 0
        log += (await relay.stderr.read()).decode().splitlines()
    draining = position(log, lambda r: r["msg"].startswith("SIGTERM: draining"))
    refused = position(log, lambda r: r["msg"].startswith("handshake refused") and r["status"] == 503)
    ends = [json.loads(line) for line in log if '"session end"' in line]
    stopped = position(log, lambda r: r["msg"] == "stopped")
    assert draining < refused < position(log, lambda r: r["msg"] == "session end") < stopped
    assert [(end["by"], end["code"]) for end in ends] == [("client", 1000), ("client", 1000)]
    assert not any('"session start"' in line for line in log[draining:])
    assert PROVIDER_KEY not in "".join(log)


async def test_at_the_drain_deadline_the_sessions_left_are_closed_with_1001_and_the_exit_is_0(
        weather_mock: MockUpstream, tmp_path: Path) -> None:
    (tmp_path / "weather_tools.py").write_text(RAINY_TOOLS)
    log: list[str] = []
    async with relay_process(*serve_args(weather_mock, "--drain-seconds", "0.5"), cwd=tmp_path,
                             env={"OPENAI_API_KEY": PROVIDER_KEY}) as relay:
        assert relay.stderr is not None
        listening = await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
        base = listening["url"].removesuffix("/v1/realtime")
        async with realtime_client(base, token=None) as client:
            await client.wait_type("session.created")
            relay.send_signal(signal.SIGTERM)
            await next_log_line(relay.stderr, lambda r: r["msg"].startswith("draining 1 open sessions"), log)
            await refused_while_draining(base)
            done = await weather_turn(client, says="found")   # the open session goes on meanwhile
            assert "rainy" in json.dumps(done)
            assert await client.closed() == (1001, "relay shutting down")
        assert await asyncio.wait_for(relay.wait(), TIMEOUT) == 0
        log += (await relay.stderr.read()).decode().splitlines()
    ends = [json.loads(line) for line in log if '"session end"' in line]
    assert [(end["by"], end["code"]) for end in ends] == [("relay", 1001)]


async def test_with_workers_every_worker_drains_the_same_way(weather_mock: MockUpstream, tmp_path: Path) -> None:
    (tmp_path / "weather_tools.py").write_text(RAINY_TOOLS)
    log: list[str] = []
    async with relay_process(*serve_args(weather_mock, "--workers", "2", "--drain-seconds", "300"), cwd=tmp_path,
                             env={"OPENAI_API_KEY": PROVIDER_KEY}) as relay:
        assert relay.stderr is not None
        listening = await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
        await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
        base = listening["url"].removesuffix("/v1/realtime")
        port = int(base.rsplit(":", 1)[1])
        sessions: dict[int, RealtimeClient] = {}   # one open session on each worker, by pid
        async with asyncio.timeout(TIMEOUT):
            async with contextlib.AsyncExitStack() as stack:
                while len(sessions) < 2:   # the kernel picks the worker: connect until both have one
                    client = await stack.enter_async_context(realtime_client(base, token=None))
                    await client.wait_type("session.created")
                    start = await next_log_line(relay.stderr, lambda r: r["msg"] == "session start", log)
                    sessions.setdefault(start["pid"], client)
                relay.send_signal(signal.SIGTERM)
                for _ in range(2):
                    await next_log_line(relay.stderr, lambda r: r["msg"].startswith("SIGTERM: draining"), log)
                probes = [await http_get(port, "/healthz") for _ in range(8)]   # whichever worker answers
                assert {status for status, _, _ in probes} == {503}
                for _ in range(4):
                    await refused_while_draining(base)
                for client in sessions.values():
                    assert "rainy" in json.dumps(await weather_turn(client, says="found"))
            # every session closed by its client (the extra ones on the way out of the stack)
        assert await asyncio.wait_for(relay.wait(), TIMEOUT) == 0
        log += (await relay.stderr.read()).decode().splitlines()
    ends = [json.loads(line) for line in log if '"session end"' in line]
    assert ends and all((end["by"], end["code"]) == ("client", 1000) for end in ends)
