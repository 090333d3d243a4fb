"""The soak's short form for CI: `scripts/soak` with 50 sessions for 10 s (the full run, 200
sessions for 60 s, is `scripts/soak` without arguments)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak

SOAK = Path(__file__).resolve().parents[2] / "scripts" / "soak.py"


@pytest.mark.timeout(120)
def test_a_short_soak_answers_every_call_exactly_once_without_errors_or_memory_growth() -> None:
    result = subprocess.run([sys.executable, str(SOAK), "--sessions", "50", "--seconds", "10", "--json"],
                            capture_output=True, text=True, timeout=110)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["ok"] and summary["failures"] == []
    assert summary["connected"] == 50
    assert summary["calls"] == summary["outputs"] == summary["answered"] == summary["turns"] >= 50
    assert summary["rss_growth"] <= 0.10
