"""The cluster soak's short form: `scripts/cluster-soak` with 3 relays, 20 sessions for 10 s
(the full run, 3 relays and 200 sessions for 60 s, is `scripts/cluster-soak` without arguments,
which prints its figures), on the fast transport (picows). Through HAProxy, one relay is drained and replaced and another
killed while the sessions make tool calls; the soak checks what the issue asks and this test that
it passed and measured what it reports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.processes import SCRIPTS

pytestmark = pytest.mark.soak


@pytest.mark.timeout(120)
def test_a_short_cluster_soak_loses_no_call_to_a_drain_and_reconnects_after_a_kill(haproxy: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "cluster_soak.py"), "--relays", "3", "--sessions", "20", "--seconds", "10",
         "--period", "1", "--turns-per-session", "3", "--transport", "picows", "--json"],
        capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["ok"] and summary["failures"] == []
    assert summary["sessions_opened"] >= 20 and summary["sessions_cut_by_the_kill"] > 0
    assert summary["outputs"] + summary["calls_lost_with_their_relay"] == summary["calls"] > 0
    assert summary["reconnect_p99"] is not None
    instances = summary["instances"]
    assert {name: instance["role"] for name, instance in instances.items()} == {
        "relay1": "drained", "relay2": "killed", "relay3": "steady", "relay4": "replacement"}
    assert [instances[name]["exit"] for name in ("relay1", "relay2", "relay3", "relay4")] == [0, -9, 0, 0]
    assert all(instances[name]["sessions"] > 0 for name in ("relay1", "relay2", "relay3"))
