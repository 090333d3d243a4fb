"""scripts/cluster: N `relay serve` processes behind HAProxy running deploy/haproxy.cfg, on
loopback. The script prints the URL to point an SDK at, a session through it runs the relays'
tools, and Ctrl-C stops it with every relay drained (exit 0); without HAProxy it says how to
install it. A session that HAProxy still sends to a draining relay is refused with 503 and
started on another relay (retry-on 503 with redispatch): the client never notices."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from relay.mock import MockUpstream
from tests.support.clients import TIMEOUT, realtime_client
from tests.support.keys import PROVIDER_KEY
from tests.support.processes import SCRIPTS, TEST_TRANSPORT, python_process, script_module
from tests.support.relays import weather_turn

RAINY_TOOLS = "from relay.tools import tool\n\n@tool\ndef get_weather(city: str) -> str:\n    return 'rainy'\n"


async def test_scripts_cluster_prints_the_url_serves_sessions_and_stops_drained(haproxy: str, tmp_path: Path) -> None:
    async with python_process(str(SCRIPTS / "cluster.py"), "--relays", "2", "--json", "--logs", str(tmp_path),
                              stdout=True) as process:
        assert process.stdout is not None and process.stderr is not None
        async with asyncio.timeout(60):
            described = json.loads(await process.stdout.readline())
        assert described["url"].endswith("/v1/realtime") and sorted(described["relays"]) == ["relay1", "relay2"]
        base = described["url"].removesuffix("/v1/realtime")
        async with realtime_client(base, token=None) as client:   # the demo's script and example tools
            done = await weather_turn(client, says="Here is what I found", timeout=TIMEOUT)
        assert "Paris" in json.dumps(done) and "Rome" in json.dumps(done)
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), TIMEOUT) == 0
        assert "each relay drains" in (await process.stderr.read()).decode()
    for name in ("relay1", "relay2"):
        records = [json.loads(line) for line in (tmp_path / f"{name}.log").read_text().splitlines()]
        assert [r["msg"] for r in records][-1] == "stopped"
        assert not [r for r in records if r["level"] in ("error", "critical")]
    sessions = [json.loads(line) for name in ("relay1", "relay2")
                for line in (tmp_path / f"{name}.log").read_text().splitlines() if '"session start"' in line]
    assert len(sessions) == 1


def test_without_haproxy_the_scripts_say_how_to_install_it() -> None:
    for script in ("cluster.py", "cluster_soak.py"):
        done = subprocess.run([sys.executable, str(SCRIPTS / script)], capture_output=True, text=True, timeout=30,
                              env={**os.environ, "RELAY_HAPROXY": "/nowhere/haproxy"})
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "apt-get install -y haproxy" in done.stderr, done.stderr


async def test_a_session_sent_to_a_draining_relay_is_refused_and_starts_on_another(
        haproxy: str, weather_mock: MockUpstream, tmp_path: Path) -> None:
    cluster_module = script_module("cluster")
    (tmp_path / "weather_tools.py").write_text(RAINY_TOOLS)
    env = {**os.environ, "OPENAI_API_KEY": PROVIDER_KEY}
    env.pop("RELAY_AUTH_TOKEN", None)
    relay_args = ["--dialect", "openai", "--tools", "weather_tools", "--drain-seconds", "60", "--transport", TEST_TRANSPORT]
    async with cluster_module.Cluster(tmp_path, lambda name: weather_mock.url, haproxy=haproxy,
                                      relay_args=relay_args, env=env) as cluster:
        await cluster.start(2)
        base = cluster.base_url
        async with realtime_client(base, token=None) as first, realtime_client(base, token=None) as second:
            for client in (first, second):   # least connections: one on each relay
                await client.wait_type("session.created")
            draining, other = "relay1", "relay2"
            assert {name: values["scur"] for name, values in (await cluster.server_stats()).items()} == {
                draining: "1", other: "1"}
            # keep HAProxy sending new sessions to the draining relay: no health checks to see its
            # 503, and a weight that makes it the least loaded of the two
            for command in (f"disable health relays/{draining}", f"set weight relays/{draining} 256",
                            f"set weight relays/{other} 1"):
                assert (await cluster.api(command)).strip() == "", command
            cluster.drain(cluster.relays[draining])
            await cluster.relays[draining].log.wait_for(lambda r: r["msg"].startswith("SIGTERM: draining"))
            async with realtime_client(base, token=None) as third:
                assert "rainy" in json.dumps(await weather_turn(third, says="found"))
            refusal = await cluster.relays[draining].log.wait_for(lambda r: r["msg"].startswith("handshake refused"))
            assert refusal["status"] == 503
            for client in (first, second):   # the open sessions go on
                assert "rainy" in json.dumps(await weather_turn(client, says="found"))
        # the draining relay's session ends by its client's close: the SIGTERM below would be its
        # second, which ends open sessions at once (1001), so it waits for that end first
        await cluster.relays[draining].log.wait_for(lambda r: r["msg"] == "session end")
        statuses = await cluster.stop_relays()
    assert statuses == {"relay1": 0, "relay2": 0}
    started = {name: [r for r in relay.log.records if r["msg"] == "session start"]
               for name, relay in cluster.relays.items()}
    assert (len(started[draining]), len(started[other])) == (1, 2)
    ends = [r for relay in cluster.relays.values() for r in relay.log.records if r["msg"] == "session end"]
    assert [(end["by"], end["code"]) for end in ends] == [("client", 1000)] * 3


def test_the_checked_in_config_and_the_cluster_config_are_valid_for_haproxy(haproxy: str, tmp_path: Path) -> None:
    cluster_module = script_module("cluster")
    config = tmp_path / "haproxy.cfg"
    config.write_text(cluster_module.cluster_config(
        cluster_module.HAPROXY_CONFIG.read_text(),
        [("relay1", "127.0.0.1:8001", False), ("relay2", "127.0.0.1:8002", False), ("relay3", "127.0.0.1:1", True)]))
    env = {**os.environ, "RELAY_HAPROXY_SOCKET": str(tmp_path / "admin.sock")}
    for path in (cluster_module.HAPROXY_CONFIG, config):
        done = subprocess.run([haproxy, "-c", "-f", str(path)], capture_output=True, text=True, env=env, timeout=30)
        assert done.returncode == 0 and "Configuration file is valid" in done.stdout, done.stdout + done.stderr
        assert "[WARNING]" not in done.stdout + done.stderr, done.stdout + done.stderr
