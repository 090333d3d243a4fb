"""One schedule of the explorer sends the same frames in every process: run in two subprocesses
with different `PYTHONHASHSEED`s (so that nothing may iterate a set of strings into what is sent)
and at different moments of the machine's clock (the scripted mock's times are the session's
virtual ones), the demo's perturbed conversation on three wires writes frame for frame the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.paths import REPO

RUN = """
import hashlib, json, sys
from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.offline.explore import run_schedule
from relay.offline.explore_session import Conversation, Perturbation
from relay.tools.sources import tool_registry

demo = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS]))
schedule = (Perturbation("barge_in", 2, "answered"), Perturbation("duplicate", 3), Perturbation("finish", 4, step=1))
digests = {}
for dialect in ("foundry", "xai", "gemini"):
    run = run_schedule(demo.with_dialect(dialect), schedule)
    text = "\\n".join(f"{f.t:.6f} {f.direction} {f.raw if f.raw is not None else f.binary!r}" for f in run.session.frames)
    digests[dialect] = [len(run.session.frames), hashlib.sha256(text.encode()).hexdigest(), run.broken]
print(json.dumps(digests))
"""


def _frames_in_processes(*hash_seeds: str) -> list[dict[str, list[object]]]:
    """What `RUN` prints in a process of each hash seed (the processes run side by side)."""
    processes = [subprocess.Popen([sys.executable, "-c", RUN], cwd=REPO, env={**os.environ, "PYTHONHASHSEED": seed},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in hash_seeds]
    printed = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        printed.append(json.loads(out.strip().splitlines()[-1]))
    return printed


def test_a_schedule_sends_the_same_frames_whatever_the_hash_seed() -> None:
    first, second = _frames_in_processes("1", "2")
    assert set(first) == {"foundry", "xai", "gemini"}
    assert all(count > 100 for count, _, _ in first.values())
    assert first == second
