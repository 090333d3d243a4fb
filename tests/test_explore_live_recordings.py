"""GPT-Live recordings explored (issue 48; relay/offline/explore_delegated_input.py), and `relay explore
--delegation`: a recording of each delegation mode, made through `relay serve --record` with the
official SDK (tests/live/test_live_recordings.py), reads into the caller's lines and the model's
turns and explores with every invariant held and every boundary covered; a seeded relay bug in
each is found, shrunk, written, and `relay replay` of the written recording breaks the same
invariant (exit 1); a recording with nothing of the model's, a mode given on another dialect or
against the recording's own: one line, exit 2 (through the real command); the pytest plugin
explores each; the docs' commands run as written."""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from relay.cli import main
from relay.errors import UnusableInput
from relay.offline.explore import explore, run_schedule
from relay.offline.explore_input import from_file
from relay.offline.explore_session import Perturbation
from relay.offline.scripted_delegations import DelegatingSession
from relay.offline.timeline import Timeline
from relay.recording.reader import read_recording
from relay.testing import Script
from relay.testing import explore as explore_public
from relay.tools.sources import tool_registry
from tests.live.test_live_recordings import CLIENT, RESPONSES, record
from tests.live.test_live_mock import assistant, get_time, get_weather
from tests.support.paths import REPO
from tests.support.processes import run_relay
from tests.test_explore_live import runs_again as responses_runs_again
from tests.test_explore_live_client import runs_again as delegation_runs_again

TOOLS = "tests/live/test_live_mock.py"
CONCIERGE = REPO / "docs" / "examples" / "testing" / "concierge.script.json"
CONCIERGE_TOOLS = REPO / "docs" / "examples" / "testing" / "concierge.py"
MODES = ("responses", "client")
pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One recording of each mode through `relay serve --record` (the SDK as the client)."""
    where = tmp_path_factory.mktemp("live-recordings")

    async def both() -> dict[str, Path]:
        return {"responses": await record(where / "responses", RESPONSES, [get_weather, get_time],
                                          answered="response.create", says="Here it is"),
                "client": await record(where / "client", CLIENT, [get_weather, assistant],
                                       answered="session.commentary.append", says="sunny in Paris")}

    return asyncio.run(both())


def conversation(recordings: dict[str, Path], mode: str, **options: Any) -> Any:
    return from_file(recordings[mode], tool_registry([str(REPO / TOOLS)]), **options)


def test_a_recording_of_each_mode_reads_as_the_callers_lines_and_the_models_turns(
        recordings: dict[str, Path]) -> None:
    responses = conversation(recordings, "responses")
    assert (responses.dialect, responses.delegation) == ("live", "responses")
    assert responses.lines == ("What's the weather in Paris?",)
    first, continuation = responses.script.turns
    assert [(c.name, c.arguments) for c in first.calls] == [("get_weather", {"city": "Paris"}),
                                                            ("get_time", {"city": "Paris"})]
    recorded = Timeline.from_recording(read_recording(recordings["responses"]))
    assert continuation.calls == () and continuation.say == recorded.of("spoken")[-1].text.strip()
    assert continuation.say.startswith("Here it is")

    client = conversation(recordings, "client")
    assert (client.dialect, client.delegation) == ("live", "client")
    assert client.lines == ("What's the weather in Paris?",)
    (rule,) = client.script.rules
    assert rule.matches("What's the weather in Paris?") and not rule.matches("Wait, one more thing.")
    assert [c.name for c in rule.calls] == ["assistant"], "the delegation, named as the relay's notice names it"
    assert client.script.after_outputs.say == "Here it is: {output}", "each commentary, as it was spoken"


def said(timeline: Timeline) -> str:
    return "".join(event.text or "" for event in timeline.of("spoken"))


@pytest.mark.parametrize("mode", MODES)
def test_the_recording_played_back_does_what_the_recorded_session_did(recordings: dict[str, Path], mode: str) -> None:
    recorded = Timeline.from_recording(read_recording(recordings[mode]))
    run = run_schedule(conversation(recordings, mode), (), keep=True)
    try:
        played = run.session.timeline
        assert run.broken == []
        assert sorted(c.name for c in played.calls()) == sorted(c.name for c in recorded.calls())
        assert sorted(o.text for o in played.outputs()) == sorted(o.text for o in recorded.outputs())
        assert said(played) == said(recorded)
    finally:
        run.session.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_recording_of_each_mode_explores_with_every_invariant_held(recordings: dict[str, Path], mode: str) -> None:
    result = explore(conversation(recordings, mode), budget=60, seed=48, replay_check=False)
    assert result.ok, result.report()
    assert result.tried == 60 and result.distinct > 1
    assert result.covered == result.boundaries > 10
    assert {"delegation_answered_once", "appends_placed", "handler_once", "answered_once"} <= set(result.held)


@pytest.mark.parametrize("mode", MODES)
def test_a_seeded_bug_in_a_recording_is_found_shrunk_written_and_replayed(
        recordings: dict[str, Path], mode: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    (responses_runs_again if mode == "responses" else delegation_runs_again)(monkeypatch)
    result = explore(conversation(recordings, mode), budget=60, seed=1, out=tmp_path, replay_check=False,
                     tools_arg=TOOLS)
    finding = next(f for f in result.findings if f.invariant == "handler_once")
    assert 1 <= len(finding.schedule) <= 3 and Perturbation("duplicate", 1) in finding.schedule
    assert finding.recording is not None and finding.recording.exists() and finding.page.exists()
    assert finding.command == f"relay replay {finding.recording} --tools {TOOLS}"
    capsys.readouterr()
    status = main(["replay", str(finding.recording), "--tools", TOOLS, "--json"])
    replayed = json.loads(capsys.readouterr().out)
    assert status == 1
    assert replayed["divergences"] == []
    assert [b["invariant"] for b in replayed["broken"]] == ["handler_once"]


def relay(*args: str) -> Any:
    return run_relay("explore", *(str(arg) for arg in args), cwd=REPO, timeout=60)


def one_line_exit_2(done: Any, *words: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("relay explore: ") and all(word in line for word in words), line


def test_a_recording_without_delegation_or_speech_is_one_line_exit_2(tmp_path: Path) -> None:
    silent = DelegatingSession(Script(), [get_weather], delegation="client")
    try:
        silent.advance(1)
        path = silent.save(tmp_path)
    finally:
        silent.close()
    one_line_exit_2(relay(path, "--tools", TOOLS), "no delegation and no speech")


def test_a_recording_in_decisions_delegation_is_one_line_exit_2(recordings: dict[str, Path], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Decisions delegation has no calls to answer (docs/gpt-live.md): nothing for the explorer."""
    decisions = tmp_path / "decisions.jsonl"
    decisions.write_text(recordings["client"].read_text().replace('"delegation": {"type": "client"}',
                                                                  '"delegation": {"type": "decisions"}'))
    assert '"decisions"' in decisions.read_text()
    status, err = in_process(capsys, decisions, "--tools", TOOLS)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.strip().endswith("the session is in decisions delegation; the explorer runs responses and client "
                                "delegation"), err


def test_the_command_explores_a_recording_in_the_mode_it_was_recorded_in(recordings: dict[str, Path]) -> None:
    done = relay(recordings["client"], "--tools", TOOLS, "--delegation", "client", "--budget", "30", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] and result["tried"] == 30 and result["covered"] == result["boundaries"]
    assert result["held"]["delegation_answered_once"] == 30


def in_process(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["explore", *(str(arg) for arg in args)])
    return status, capsys.readouterr().err


def test_a_mode_against_the_recordings_own_is_one_line_exit_2(recordings: dict[str, Path],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    one_line_exit_2(relay(recordings["client"], "--tools", TOOLS, "--delegation", "responses"),
                    "client delegation, not responses")
    status, err = in_process(capsys, recordings["responses"], "--tools", TOOLS, "--delegation", "client")
    assert status == 2 and err.strip().endswith("the recording is in responses delegation, not client"), err
    status, err = in_process(capsys, recordings["responses"], "--tools", TOOLS, "--delegation", "responses",
                             "--dialect", "openai")
    assert status == 2 and "GPT-Live's; the openai dialect has none" in err and len(err.splitlines()) == 1, err


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    """The concierge example's mock script alone (no `delegation`, no `dialect` of its own)."""
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(json.loads(CONCIERGE.read_text())["script"]))
    return path


def test_the_delegation_option_runs_a_bare_script_in_client_delegation(bare: Path) -> None:
    done = relay(bare, "--tools", CONCIERGE_TOOLS, "--dialect", "live", "--delegation", "client", "--budget", "6",
                 "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["conversation"] == "bare.json (live)" and result["ok"]
    assert result["held"]["delegation_answered_once"] == 6


def test_a_mode_on_another_dialect_or_without_a_delegate_is_one_line_exit_2(
        bare: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_line_exit_2(relay(bare, "--tools", CONCIERGE_TOOLS, "--delegation", "client"), "openai", "--dialect live")
    status, err = in_process(capsys, bare, "--tools", "relay.examples.tools", "--dialect", "live",
                             "--delegation", "client")
    assert status == 2 and "client delegation needs a @delegate among the tools" in err, err
    status, err = in_process(capsys, "demo", "--delegation", "client")
    assert status == 2 and "GPT-Live's; the openai dialect has none" in err, err
    status, err = in_process(capsys, CONCIERGE, "--tools", CONCIERGE_TOOLS, "--delegation", "decisions")
    assert status == 2 and "invalid choice" in err, err


def test_a_finding_under_the_option_exits_1(bare: Path, tmp_path: Path) -> None:
    """An invariant of the user's own (the caller hears each order's status), broken where the
    delegate fails: the smallest schedule written, exit 1."""
    checks = tmp_path / "checks.py"
    checks.write_text(textwrap.dedent('''\
        def order_status_said(session):
            """The caller hears the status of each order it asked about."""
            said = " ".join(event.text or "" for event in session.timeline.of("spoken"))
            for status in ("shipped on Monday", "not on file"):
                if status not in said:
                    return f"the caller never heard {status!r}"
            return None
        '''))
    found = relay(bare, "--tools", CONCIERGE_TOOLS, "--dialect", "live", "--delegation", "client", "--budget", "30",
                  "--invariant", f"{checks}:order_status_said", "--out", tmp_path / "found", "--json")
    assert found.returncode == 1, found.stderr
    finding = next(f for f in json.loads(found.stdout)["findings"] if f["invariant"] == "order_status_said")
    assert 1 <= len(finding["schedule"]) <= 3 and Path(finding["recording"]).exists()


def docs_commands(page: str) -> list[tuple[str, str | None]]:
    """The page's GPT-Live explorer commands (docs/gpt-live.md: every indented `relay explore` and
    `relay demo` line of its explorer's section; docs/testing.md: those with `--delegation`, or on
    a recording, and the demo that records it), each with the one line of error the page shows
    under it, if any."""
    lines = (REPO / "docs" / page).read_text().splitlines()
    if page == "gpt-live.md":
        start = lines.index("## Every interleaving: `relay explore`")
        lines = lines[start:next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))]
    found = []
    for index, line in enumerate(lines):
        command = line.strip()
        if not re.match(r"^    relay (explore|demo) ", line):
            continue
        if page == "testing.md" and not ("--delegation" in command or "recordings/" in command
                                         or command.startswith("relay demo --dialect live --record")):
            continue
        after = lines[index + 1].strip() if index + 1 < len(lines) else ""
        found.append((command, after if after.startswith("relay explore: ") else None))
    return found


@pytest.mark.docs
@pytest.mark.parametrize("page", ["testing.md", "gpt-live.md"])
def test_the_docs_gpt_live_explorer_commands_run_as_written(page: str, tmp_path: Path) -> None:
    """From a scratch directory (the examples' paths made absolute), in the page's order: exit 0,
    or exit 2 with the one line the page shows under the command."""
    commands = docs_commands(page)
    assert sum("--delegation" in c for c, _ in commands) >= 1 and any("recordings/*.jsonl" in c for c, _ in commands)
    examples = str(REPO / "docs" / "examples") + "/"
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    for command, error in commands:
        done = subprocess.run(["sh", "-c", command.replace("docs/examples/", examples)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        if error is None:
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
            continue
        assert done.returncode == 2, f"{command}\n{done.stdout}\n{done.stderr}"
        shown = error.replace("docs/examples/", examples)
        assert fnmatch.fnmatch(done.stderr.strip(), shown.replace("…", "*")), (done.stderr, shown)


@pytest.mark.parametrize("mode", MODES)
def test_the_pytest_plugin_explores_a_gpt_live_recording_in_its_mode(recordings: dict[str, Path], mode: str,
                                                                     pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    folder = pytester.mkdir("recordings")
    shutil.copy(recordings[mode], folder / f"{mode}.jsonl")
    pytester.makepyfile(tools="from tests.live.test_live_mock import assistant, get_time, get_weather\n")
    quiet = ("-p", "no:hypothesispytest", "-p", "no:cacheprovider")
    run = pytester.runpytest(*quiet, "--relay-recordings", "recordings", "--relay-tools", "tools.py",
                             "--relay-explore", "10", "-v")
    run.assert_outcomes(passed=2)
    run.stdout.fnmatch_lines([f"recordings/{mode}.jsonl::replay PASSED*", f"recordings/{mode}.jsonl::explore PASSED*"])


def test_the_public_api_takes_the_mode_as_the_command_does(recordings: dict[str, Path]) -> None:
    """`relay.testing.explore` on a path: the file's own dialect and mode, `delegation=` as
    `--delegation` (a recording's own mode only)."""
    script = explore_public(str(CONCIERGE), [str(CONCIERGE_TOOLS)], budget=3)
    assert script.ok and script.conversation == "concierge.script.json (live)" and script.held["appends_placed"] == 3
    recorded = explore_public(recordings["client"], [str(REPO / TOOLS)], budget=3, delegation="client")
    assert recorded.ok and recorded.held["delegation_answered_once"] == 3
    with pytest.raises(UnusableInput, match="the recording is in client delegation, not responses"):
        explore_public(recordings["client"], [str(REPO / TOOLS)], budget=3, delegation="responses")
    with pytest.raises(UnusableInput, match="the openai dialect has none"):
        explore_public(str(CONCIERGE), [str(CONCIERGE_TOOLS)], budget=3, dialect="openai", delegation="client")
