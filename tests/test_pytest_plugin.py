"""relay's pytest plugin (installed through the `pytest11` entry point): `--relay-recordings DIR
--relay-tools SPEC` turns every recording into its own item that fails with the divergence report,
the `relay_replay` fixture replays one recording in a test; and, in a subprocess, the real run
over the shared recordings: one item per recording, each passing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from relay.tools import tool
from tests.support.paths import REPO, shared_dir
from tests.support.peers import record_session
from tests.support.tools import get_weather_data

pytest_plugins = ["pytester"]

SHARED_RECORDINGS = shared_dir() / "recordings"
SHARED_TOOLS = REPO / "tests" / "fixtures" / "shared_recording_tools.py"
NOTES_LOG = "realtime-notes-idx1781683788_beta_fc"   # a real event log in which the model calls `search`


@tool
def lookup_order(order_id: str) -> dict:
    if order_id == "missing":
        raise LookupError("no such order")
    return {"order_id": order_id, "status": "shipped"}


TOOLS = """
from relay import tool

@tool
def get_weather(city: str) -> dict:
    return {"city": city, "temp_c": 21}

@tool
def lookup_order(order_id: str) -> dict:
    if order_id == "missing":
        raise LookupError("no such order")
    return {"order_id": order_id, "status": "shipped"}
"""


QUIET = ("-p", "no:hypothesispytest", "-p", "no:cacheprovider")   # plugins the inner runs do not need


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A user's project: recordings/ with two relay recordings (the same session twice) and the
    real event log, tools.py with the tools they were recorded with."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    recordings = pytester.mkdir("recordings")
    for name in ("first", "second"):
        folder = pytester.mkdir(name)
        path = anyio.run(record_session, folder, [get_weather_data, lookup_order])
        shutil.copy(path, recordings / f"{name}_session.jsonl")
    events = recordings / "real"
    events.mkdir()
    for suffix in (".jsonl", ".meta.json"):
        shutil.copy(SHARED_RECORDINGS / f"{NOTES_LOG}{suffix}", events / f"{NOTES_LOG}{suffix}")
    pytester.makepyfile(tools=TOOLS + "\n@tool\ndef search(text: str) -> list:\n    return []\n")
    return pytester


def test_every_recording_is_its_own_item_named_after_the_file(project: pytest.Pytester) -> None:
    result = project.runpytest(*QUIET, "--relay-recordings", "recordings", "--relay-tools", "tools.py", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "recordings/first_session.jsonl::replay PASSED*",
        "recordings/real/realtime-notes-idx1781683788_beta_fc.jsonl::replay PASSED*",
        "recordings/second_session.jsonl::replay PASSED*",
    ])


def test_a_symlinked_recordings_directory_is_collected_as_it_is_named(project: pytest.Pytester) -> None:
    elsewhere = project.path.parent / f"{project.path.name}-shared"
    shutil.move(project.path / "recordings", elsewhere)
    (project.path / "linked").symlink_to(elsewhere, target_is_directory=True)
    result = project.runpytest(*QUIET, "--relay-recordings", "linked", "--relay-tools", "tools.py", "-v")
    result.assert_outcomes(passed=3)


def test_tools_that_now_answer_differently_fail_with_the_divergence_report(project: pytest.Pytester) -> None:
    project.makepyfile(tools=(TOOLS + "\n@tool\ndef search(query: str) -> list:\n    return []\n")
                       .replace('"temp_c": 21', '"temp_c": 30'))
    result = project.runpytest(*QUIET, "--relay-recordings", "recordings", "--relay-tools", "tools.py",
                               "-k", "first or real")
    result.assert_outcomes(failed=2, deselected=1)
    result.stdout.fnmatch_lines([
        "*_ replay of first_session.jsonl _*",
        "replay of first_session.jsonl (relay): 2 divergences from the recording",
        "  changed: output of call_*",
        '*-      "temp_c": 21*',
        '*+      "temp_c": 30*',
        "calls the tools answered:",
        "the whole report: relay replay *first_session.jsonl --tools tools.py",
    ])
    # an event log has nothing recorded to compare with: its calls must run on the real arguments
    result.stdout.fnmatch_lines([
        f"replay of {NOTES_LOG}.jsonl (event-log): 1 failed call",
        "  search call_* failed (bad_arguments) on the recorded arguments {\"text\":*",
    ])
    assert "Traceback" not in result.stdout.str()


def test_the_relay_replay_fixture(project: pytest.Pytester) -> None:
    project.makepyfile(test_golden="""
        import pytest

        def test_same(relay_replay):
            result = relay_replay("recordings/first_session.jsonl")   # the --relay-tools
            assert relay_replay.check(result) is result
            assert [c.outcome for c in result.calls] == ["ok", "ok", "error"]

        def test_changed(relay_replay):
            from relay import tool

            @tool(name="get_weather")
            def warmer(city: str) -> dict:
                return {"city": city, "temp_c": 25}

            import tools
            relay_replay.check(relay_replay("recordings/second_session.jsonl", tools=[warmer, tools.lookup_order]))

        @pytest.mark.asyncio
        async def test_from_an_async_test(relay_replay):
            result = await relay_replay.replay_async("recordings/first_session.jsonl")
            assert result.ok
    """)
    result = project.runpytest(*QUIET, "--relay-tools", "tools.py", "-v", "test_golden.py")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*_ test_changed _*",
        "replay of second_session.jsonl (relay): 2 divergences from the recording",
        '*+      "temp_c": 25*',
    ])


def test_bad_input_is_one_usage_error(project: pytest.Pytester) -> None:
    missing = project.runpytest(*QUIET, "--relay-recordings", "nowhere", "--relay-tools", "tools.py")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["ERROR: --relay-recordings nowhere: not a directory"])
    broken = project.runpytest(*QUIET, "--relay-recordings", "recordings", "--relay-tools", "absent.py")
    assert broken.ret == pytest.ExitCode.USAGE_ERROR
    broken.stderr.fnmatch_lines(["ERROR: --relay-tools: cannot load tools from 'absent.py': no such file*"])


def test_the_shared_recordings_each_pass_in_a_real_run(tmp_path: Path) -> None:
    """`pytest --relay-recordings ../shared/recordings --relay-tools <tools>` as a user types it,
    from a checkout beside shared/: one item per recording. They are event logs, so each passes
    when the tools answer every call of theirs on the recorded arguments."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    recordings = os.path.relpath(SHARED_RECORDINGS, checkout)
    command = [sys.executable, "-m", "pytest", "--relay-recordings", recordings, "--relay-tools", str(SHARED_TOOLS),
               "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--rootdir", str(checkout), "-q", "-rA"]
    run = subprocess.run(command, cwd=checkout, capture_output=True, text=True, timeout=120)
    expected = sorted(path.name for path in SHARED_RECORDINGS.glob("*.jsonl"))
    passed = sorted(Path(line.split("::")[0].split()[-1]).name for line in run.stdout.splitlines()
                    if line.startswith("PASSED"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert passed == expected and len(expected) >= 11
    assert f"{len(expected)} passed" in run.stdout


def test_a_recording_with_no_call_of_the_tools_is_skipped_by_the_exploration(pytester: pytest.Pytester) -> None:
    """`--relay-explore`: a session in which the model called no tool of ours (small talk) has
    nothing to explore: its exploration is skipped, with the reason, and its replay still runs."""
    from relay.mock import MockScript, Reply
    from relay.offline.explore import run_schedule
    from relay.offline.explore_session import Conversation
    from relay.tools.sources import tool_registry

    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    tools = pytester.makepyfile(tools=TOOLS)
    chat = Conversation("chat", MockScript(default=Reply(say="Hello! How can I help?")), ("Hi there.",),
                        tool_registry([str(tools)]))
    run = run_schedule(chat, (), keep=True)
    recorded = run.session.save(pytester.mkdir("sessions"))
    shutil.copy(recorded, pytester.mkdir("recordings") / "chat.jsonl")
    result = pytester.runpytest(*QUIET, "--relay-recordings", "recordings", "--relay-tools", "tools.py",
                                "--relay-explore", "5", "-v", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["recordings/chat.jsonl::replay PASSED*", "recordings/chat.jsonl::explore SKIPPED*",
                                 "*nothing to explore: as it runs, the model makes no call of the relay's tools*"])
