"""`/metrics` and `/healthz` as prometheus-client keeps them: one process, and `relay serve
--workers N` where every worker answers for all of them (real processes sharing one port)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from relay.observe.metrics import PUBLISH_EVERY, Metrics
from relay.mock import MockUpstream
from tests.support.clients import http_get, parse_exposition, realtime_client
from tests.support.keys import PROVIDER_KEY
from tests.support.processes import next_log_line, relay_process


def test_a_session_publishes_its_frames_in_batches_at_its_end_and_at_a_scrape() -> None:
    metrics = Metrics()
    tap = metrics.tap()
    for _ in range(PUBLISH_EVERY - 1):
        tap.record("upstream>relay", "{}")
    assert metrics._families.frames["upstream>relay"]._value.get() == 0   # not yet published
    tap.record("upstream>relay", "{}")
    assert metrics._families.frames["upstream>relay"]._value.get() == PUBLISH_EVERY
    tap.record("relay>client", "abc")
    assert 'relay_frames_total{direction="relay>client"} 1.0' in metrics.render()   # a scrape publishes
    tap.record("relay>client", "abc")
    tap.close("done")
    assert metrics.frames == {"client>relay": 0, "relay>client": 2, "relay>upstream": 0,
                              "upstream>relay": PUBLISH_EVERY}
    assert metrics.frame_bytes["relay>client"] == 6


def test_forwarded_frames_count_twice_towards_a_batch() -> None:
    metrics = Metrics()
    tap = metrics.tap()
    for _ in range(PUBLISH_EVERY // 2 - 1):
        tap.record_forwarded("upstream>relay", "{}", "relay>client", "{}")
    assert metrics._families.frames["upstream>relay"]._value.get() == 0   # not yet published
    tap.record_forwarded("upstream>relay", "{}", "relay>client", "{}")
    assert metrics._families.frames["relay>client"]._value.get() == PUBLISH_EVERY // 2


def test_open_sessions_are_a_gauge_and_health_reads_them_by_worker() -> None:
    metrics = Metrics()
    metrics.session_started()
    metrics.session_started()
    metrics.session_ended("client")
    assert metrics.open_sessions_by_worker() == {os.getpid(): 1}
    samples = parse_exposition(metrics.render())
    assert samples["relay_sessions_total"] == 2 and samples["relay_sessions_open"] == 1
    assert samples[f'relay_worker_sessions_open{{pid="{os.getpid()}"}}'] == 1
    assert not any(name.endswith("_created") for name in samples)   # only the names docs/observability.md lists
    assert metrics.sessions_ended == {"client": 1}


def _two_workers(upstream: MockUpstream, cwd: Path,
                 **env: str) -> AbstractAsyncContextManager[asyncio.subprocess.Process]:
    """`relay serve --workers 2` on `upstream`, with `env` added to its environment."""
    return relay_process("serve", "--port", "0", "--upstream", upstream.url, "--dialect", "openai",
                         "--workers", "2", "--drain-seconds", "0", cwd=cwd,
                         env={"OPENAI_API_KEY": PROVIDER_KEY, **env})


async def _both_workers_listening(relay: asyncio.subprocess.Process,
                                  log: list[str]) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The two workers' "listening on" log lines, and the port they share."""
    assert relay.stderr is not None
    first = await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
    second = await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
    return first, second, int(first["url"].rsplit(":", 1)[1].split("/")[0])


async def _health(port: int) -> dict[str, Any]:
    status, _, body = await http_get(port, "/healthz")
    assert status == 200
    return json.loads(body)


async def test_every_worker_reports_the_sessions_of_all_workers(weather_mock: MockUpstream, tmp_path: Path) -> None:
    log: list[str] = []
    async with _two_workers(weather_mock, tmp_path, TMPDIR=str(tmp_path)) as relay:
        first, second, port = await _both_workers_listening(relay, log)
        base = f"ws://127.0.0.1:{port}"
        [shared_dir] = tmp_path.glob("relay-metrics-*")   # made by the parent for this run
        assert (await _health(port))["workers"] == {str(first["pid"]): 0, str(second["pid"]): 0}
        answered_by: set[int] = set()
        async with AsyncExitStack() as clients:
            # the kernel spreads connections over the workers: open sessions until both hold some
            for opened in range(1, 41):
                client = await clients.enter_async_context(realtime_client(base, token=None))
                await client.wait_type("session.created")
                health = await _health(port)
                answered_by.add(health["pid"])
                assert health["sessions"] == opened   # whichever worker answered
                if len(health["workers"]) == 2 and all(health["workers"].values()):
                    break
            sessions = opened
            assert len(health["workers"]) == 2 and sum(health["workers"].values()) == sessions
        for _ in range(sessions):
            await next_log_line(relay.stderr, lambda r: r["msg"] == "session end", log)
        for _ in range(10):   # each scrape lands on either worker
            status, _, body = await http_get(port, "/metrics")
            samples = parse_exposition(body.decode())
            assert status == 200 and samples["relay_sessions_total"] == sessions
            assert samples['relay_sessions_ended_total{by="client"}'] == sessions
            assert samples["relay_sessions_open"] == 0
            assert samples['relay_frames_total{direction="upstream>relay"}'] >= sessions   # session.created each
            worker_gauges = [name for name in samples if name.startswith("relay_worker_sessions_open{")]
            assert len(worker_gauges) == 2
        while len(answered_by) < 2:   # /healthz names the worker that answered: both do
            health = await _health(port)
            assert health["sessions"] == 0
            answered_by.add(health["pid"])
        relay.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(relay.wait(), 5) == 0
    assert shared_dir.exists() is False


async def test_a_worker_that_dies_leaves_the_open_session_count(weather_mock: MockUpstream, tmp_path: Path) -> None:
    log: list[str] = []
    shared = tmp_path / "metrics"
    shared.mkdir()
    async with _two_workers(weather_mock, tmp_path, PROMETHEUS_MULTIPROC_DIR=str(shared)) as relay:
        first, second, port = await _both_workers_listening(relay, log)
        async with realtime_client(f"ws://127.0.0.1:{port}", token=None) as client:
            await client.wait_type("session.created")
            health = await _health(port)
            [holder] = [int(pid) for pid, open_now in health["workers"].items() if open_now == 1]
            survivor = first["pid"] if holder == second["pid"] else second["pid"]
            os.kill(holder, signal.SIGKILL)
            await next_log_line(relay.stderr, lambda r: r["msg"] == f"worker {holder} exited with status -9", log)
            health = await _health(port)   # only the survivor is left to answer
            assert (health["pid"], health["sessions"], health["workers"]) == (survivor, 0, {str(survivor): 0})
            samples = parse_exposition((await http_get(port, "/metrics"))[2].decode())
            assert samples["relay_sessions_total"] == 1 and samples["relay_sessions_open"] == 0
        relay.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(relay.wait(), 5) == 1   # a worker failed
    assert list(shared.glob("*.db"))   # the user's directory is left as it is


async def test_an_empty_metrics_file_neither_stops_a_worker_nor_fails_a_scrape(
        weather_mock: MockUpstream, tmp_path: Path) -> None:
    """prometheus-client creates a worker's file and sizes it a moment later; read in between, it
    raised struct.error: a worker starting beside another one died (a CI run), and a scrape would
    fail. A worker killed in that moment leaves the empty file for good, as here (named after a pid
    above Linux's largest, 2**22)."""
    shared = tmp_path / "metrics"
    shared.mkdir()
    (shared / "counter_9999999.db").touch()
    (shared / "gauge_liveall_9999999.db").touch()
    log: list[str] = []
    async with _two_workers(weather_mock, tmp_path, PROMETHEUS_MULTIPROC_DIR=str(shared)) as relay:
        first, second, port = await _both_workers_listening(relay, log)
        async with realtime_client(f"ws://127.0.0.1:{port}", token=None) as client:
            await client.wait_type("session.created")
            assert sorted((await _health(port))["workers"]) == sorted([str(first["pid"]), str(second["pid"])])
            status, _, body = await http_get(port, "/metrics")
            assert status == 200 and parse_exposition(body.decode())["relay_sessions_open"] == 1
        relay.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(relay.wait(), 5) == 0
    assert not [line for line in log if '"level": "error"' in line]


async def test_a_metrics_directory_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    async with relay_process("serve", "--port", "0", "--dialect", "openai", "--workers", "2", cwd=tmp_path,
                             env={"PROMETHEUS_MULTIPROC_DIR": str(not_a_dir), "OPENAI_API_KEY": PROVIDER_KEY}
                             ) as relay:
        assert relay.stderr is not None
        _, err = await relay.communicate()
    assert relay.returncode == 2
    [line] = [json.loads(line) for line in err.decode().splitlines()]
    assert line["msg"] == f"PROMETHEUS_MULTIPROC_DIR={not_a_dir} is not a directory"


@pytest.fixture(autouse=True)
def _no_inherited_metrics_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
