"""Every `relay` command answers input it cannot use with one clear line on stderr and exit
status 2 (1 is a finding, such as a replay divergence; 0 none), never a traceback (issue 20,
point 3). One subprocess per command proves that nothing escapes as a traceback from the real
entry point; the other cases run `relay.cli.main` in-process, which is what the entry point calls.

Commands that log (serve, attach, sidecar, mock) say it as their one error log line (JSON when
stderr is not a terminal); the others as `relay COMMAND: ...`.
"""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from relay.cli import main
from relay.cli.exits import INTERNAL_ERROR
from relay.recording.writer import RecordingWriter
from tests.support.keys import PROVIDER_KEY
from tests.support.paths import REPO
from tests.support.tools import WEATHER_TOOL

SYNTAX_ERROR = "def broken(:\n    pass\n"


def complete_recording(directory: Path) -> Path:
    """A small relay recording, closed cleanly: a relay call answered, and the follow-up."""
    call = {"type": "function_call", "id": "item_1", "call_id": "call_1", "name": "get_weather",
            "arguments": '{"city": "Paris"}', "status": "completed"}
    with RecordingWriter(directory, session_id="sess_1", dialect="openai", upstream="ws://127.0.0.1:1",
                         tools=["get_weather"], extra_header={"id_prefix": "rs_1"}) as writer:
        writer.record("relay>upstream", json.dumps({"type": "session.update", "session": {
            "type": "realtime", "tools": [WEATHER_TOOL]}}))
        writer.record("upstream>relay", json.dumps({"type": "response.created", "response": {
            "id": "resp_1", "status": "in_progress", "output": []}}))
        writer.record("upstream>relay", json.dumps({"type": "response.output_item.done", "response_id": "resp_1",
                                                     "output_index": 0, "item": call}))
        writer.record("upstream>relay", json.dumps({"type": "response.done", "response": {
            "id": "resp_1", "status": "completed", "output": [call]}}))
    return writer.path


@pytest.fixture
def bad(tmp_path: Path) -> dict[str, Path]:
    """One of each kind of unusable input, by name."""
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "garbage.jsonl").write_bytes(b"\x00\xff garbage \x01\n\x9c not json at all\n")
    (tmp_path / "hello.json").write_text('{"hello":"world"}\n')
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "syntax_error_tools.py").write_text(SYNTAX_ERROR)
    (tmp_path / "a-file").write_text("not a directory\n")
    recording = complete_recording(tmp_path / "recordings")
    data = recording.read_bytes()
    (tmp_path / "truncated.jsonl").write_bytes(data[: len(data) * 2 // 3])
    (tmp_path / "event-log.jsonl").write_text(json.dumps({"type": "session.created", "session": {}}) + "\n")
    (tmp_path / "recording.jsonl.gz").write_bytes(gzip.compress(data))   # kept compressed
    return {
        "missing": tmp_path / "missing.jsonl", "empty": tmp_path / "empty.jsonl",
        "garbage": tmp_path / "garbage.jsonl", "directory": tmp_path / "a-directory",
        "not-a-recording": tmp_path / "hello.json", "truncated": tmp_path / "truncated.jsonl",
        "event-log": tmp_path / "event-log.jsonl", "syntax-error": tmp_path / "syntax_error_tools.py",
        "missing-tools": tmp_path / "missing_tools.py", "file": tmp_path / "a-file",
        "recording": recording, "gzipped": tmp_path / "recording.jsonl.gz",
    }


def said_line(err: str) -> str:
    """The one line on stderr (for a JSON log line, its message); fails on anything more."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    if line.startswith("{"):
        record = json.loads(line)
        assert record["level"] == "error"
        return str(record["msg"])
    return line


def run_relay(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "relay", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
                                           "OPENAI_API_KEY": PROVIDER_KEY})


@pytest.fixture
def quiet_environment(monkeypatch: pytest.MonkeyPatch, restore_logging: None) -> None:
    """No warning about a missing key or token to share stderr with the error."""
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    monkeypatch.setenv("OPENAI_WEBHOOK_SECRET", "whsec_dGVzdCBzZWNyZXQ=")
    monkeypatch.delenv("RELAY_AUTH_TOKEN", raising=False)


RECORDING_CASES = {
    "missing": "missing.jsonl: no such file",
    "empty": "empty.jsonl is empty, not a recording",
    "garbage": "garbage.jsonl: no line holds a JSON object; not a recording",
    "directory": "a-directory is a directory, not a recording",
    "not-a-recording": "hello.json is JSON but not a recording: no line is a realtime event",
    "truncated": "truncated.jsonl is incomplete: line",
    "gzipped": "recording.jsonl.gz: not a recording but gzip-compressed: decompress it first (gunzip -k FILE)",
}


# ---- replay -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", [*RECORDING_CASES, "event-log"])
def test_replay_refuses_what_it_cannot_replay(case: str, bad: dict[str, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(bad[case])]) == 2
    line = said_line(capsys.readouterr().err)
    expected = RECORDING_CASES.get(case, "event-log.jsonl is a plain event log: it records no relay sends, "
                                         "so there is nothing to compare; pass --allow-empty")
    assert line.startswith("relay replay: ") and expected in line, line


def test_replay_goes_on_when_asked_to(bad: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(bad["event-log"]), "--allow-empty"]) == 0
    assert "nothing to compare" in capsys.readouterr().out
    assert main(["replay", str(bad["truncated"])]) == 2
    assert said_line(capsys.readouterr().err).endswith("; pass --allow-incomplete to use what it holds")
    assert main(["replay", str(bad["truncated"]), "--allow-incomplete"]) in (0, 1)   # a verdict
    assert "warning: line" in capsys.readouterr().err


def test_replay_refuses_a_tools_file_with_a_syntax_error_in_one_line(bad: dict[str, Path]) -> None:
    done = run_relay("replay", str(bad["recording"]), "--tools", str(bad["syntax-error"]), cwd=bad["file"].parent)
    assert done.returncode == 2, done.stderr
    assert said_line(done.stderr) == (f"relay replay: importing {str(bad['syntax-error'])!r} failed: SyntaxError: "
                                      f"invalid syntax at {bad['syntax-error']}, line 1: def broken(:")


def test_replay_of_a_missing_tools_file_and_a_bad_gate_timeout(bad: dict[str, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(bad["recording"]), "--tools", str(bad["missing-tools"])]) == 2
    assert "no such file" in said_line(capsys.readouterr().err)
    assert main(["replay", str(bad["recording"]), "--gate-timeout", "-1"]) == 2
    assert said_line(capsys.readouterr().err) == "relay replay: --gate-timeout must be >= 0"


def test_a_recording_that_can_be_compared_gives_a_finding_not_a_refusal(
        bad: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The recording holds a call but not the relay's answer: with a tool of that name given, the
    relay under test answers it, a divergence, exit 1."""
    tools = tmp_path / "weather.py"
    tools.write_text("from relay import tool\n@tool\ndef get_weather(city: str) -> str:\n"
                     "    '''Weather.'''\n    return 'sunny'\n")
    assert main(["replay", str(bad["recording"]), "--tools", str(tools), "--gate-timeout", "0"]) == 1
    captured = capsys.readouterr()
    assert "extra: output of call_1" in captured.out and captured.err == ""


# ---- export -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(RECORDING_CASES))
def test_export_refuses_what_it_cannot_export(case: str, bad: dict[str, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(bad[case]), "--format", "vapi"]) == 2
    captured = capsys.readouterr()
    line = said_line(captured.err)
    assert line.startswith("relay export: ") and RECORDING_CASES[case] in line, line
    assert captured.out == ""


def test_export_subprocess_and_its_unwritable_output(bad: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    done = run_relay("export", str(bad["not-a-recording"]), "--format", "vapi", cwd=bad["file"].parent)
    assert done.returncode == 2 and done.stdout == ""
    assert said_line(done.stderr).startswith(f"relay export: {bad['not-a-recording']} is JSON but not a recording")
    assert main(["export", str(bad["recording"]), "--format", "vapi", "--out", str(bad["directory"])]) == 2
    assert said_line(capsys.readouterr().err).startswith(f"relay export: cannot write {bad['directory']}")
    assert main(["export", str(bad["truncated"]), "--format", "vapi", "--allow-incomplete"]) == 0


# ---- redact ------------------------------------------------------------------------------------

REDACT_CASES = {
    **{case: RECORDING_CASES[case] for case in ("missing", "empty", "not-a-recording", "gzipped")},
    "garbage": "garbage.jsonl is not UTF-8 text (byte 1 of a line); not a recording",
    "directory": "a-directory is not a file",
}


@pytest.mark.parametrize("case", list(REDACT_CASES))
def test_redact_refuses_what_it_cannot_redact_and_writes_nothing(case: str, bad: dict[str, Path], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "redacted.jsonl"
    assert main(["redact", str(bad[case]), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    line = said_line(captured.err)
    assert line.startswith("relay redact: ") and REDACT_CASES[case] in line, line
    assert captured.out == "" and not out.exists()


# ---- inspect (missing, empty, garbage, directory, JSON: tests/inspector/test_cli.py) -----------

def test_inspect_refuses_an_incomplete_recording_unless_asked(bad: dict[str, Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "page.html"
    assert main(["inspect", str(bad["truncated"]), "--out", str(page)]) == 2
    assert "truncated.jsonl is incomplete" in said_line(capsys.readouterr().err) and not page.exists()
    assert main(["inspect", str(bad["truncated"]), "--out", str(page), "--allow-incomplete"]) == 0
    assert page.exists()


def test_inspect_subprocess_refuses_a_json_file_that_is_not_a_recording(bad: dict[str, Path]) -> None:
    done = run_relay("inspect", str(bad["not-a-recording"]), cwd=bad["file"].parent)
    assert done.returncode == 2
    assert said_line(done.stderr).startswith(f"relay inspect: {bad['not-a-recording']} is JSON but not a recording")


# ---- serve ------------------------------------------------------------------------------------

def test_serve_subprocess_refuses_a_tools_file_with_a_syntax_error(bad: dict[str, Path]) -> None:
    done = run_relay("serve", "--port", "0", "--dialect", "openai", "--tools", str(bad["syntax-error"]),
                     cwd=bad["file"].parent)
    assert done.returncode == 2
    assert said_line(done.stderr).startswith(f"importing {str(bad['syntax-error'])!r} failed: SyntaxError")


@pytest.mark.parametrize("options, expected", [
    (("--tools", "missing-tools"), "cannot load tools from"),
    (("--tools", "directory"), "no such file"),
    (("--record", "file"), "a-file is a file: recordings go into a directory"),
    (("--tls-cert", "missing", "--tls-key", "missing"), "cannot use --tls-cert"),
])
def test_serve_refuses_a_configuration_it_cannot_use(options: tuple[str, ...], expected: str, bad: dict[str, Path],
                                                     capsys: pytest.CaptureFixture[str],
                                                     quiet_environment: None) -> None:
    argv = [str(bad[part]) if part in bad else part for part in options]
    assert main(["serve", "--port", "0", "--dialect", "openai", *argv]) == 2
    assert expected in said_line(capsys.readouterr().err)
    assert main(["serve", "--port", "0", "--dialect", "openai", "--workers", "0"]) == 2
    assert said_line(capsys.readouterr().err) == "--workers must be at least 1"


def test_serve_refuses_a_port_in_use(capsys: pytest.CaptureFixture[str], quiet_environment: None) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--dialect", "openai", "--port", str(port)]) == 2
    assert said_line(capsys.readouterr().err) == (f"cannot listen on 127.0.0.1:{port}: Address already in use; "
                                                  "choose another --port (0 picks a free one)")


# ---- attach and sidecar -----------------------------------------------------------------------

def test_attach_subprocess_refuses_a_tools_file_with_a_syntax_error(bad: dict[str, Path]) -> None:
    done = run_relay("attach", "--call-id", "rtc_1", "--tools", str(bad["syntax-error"]), cwd=bad["file"].parent)
    assert done.returncode == 2
    assert said_line(done.stderr).startswith(f"importing {str(bad['syntax-error'])!r} failed: SyntaxError")


def test_attach_refuses_missing_tools_and_a_bad_upstream(bad: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                                        quiet_environment: None) -> None:
    assert main(["attach", "--call-id", "rtc_1", "--tools", str(bad["missing-tools"])]) == 2
    assert "cannot load tools from" in said_line(capsys.readouterr().err)
    tools = str(REPO / "tests" / "fixtures" / "weather_tools.py")
    assert main(["attach", "--call-id", "rtc_1", "--tools", tools, "--upstream", "https://x/v1/realtime"]) == 2
    assert "ws:// or wss://" in said_line(capsys.readouterr().err)


def test_sidecar_subprocess_refuses_a_tools_file_with_a_syntax_error(bad: dict[str, Path]) -> None:
    done = run_relay("sidecar", "--port", "0", "--tools", str(bad["syntax-error"]), cwd=bad["file"].parent)
    assert done.returncode == 2
    assert "SyntaxError" in said_line(done.stderr)


@pytest.mark.parametrize("case, expected", [
    ("missing", "--instructions {path}: no such file"),
    ("directory", "--instructions {path} is a directory, not a file"),
    ("garbage", "--instructions {path} is not UTF-8 text (byte 1)"),
])
def test_sidecar_refuses_instructions_it_cannot_read(case: str, expected: str, bad: dict[str, Path],
                                                     capsys: pytest.CaptureFixture[str],
                                                     quiet_environment: None) -> None:
    tools = str(REPO / "tests" / "fixtures" / "weather_tools.py")
    assert main(["sidecar", "--port", "0", "--tools", tools, "--instructions", str(bad[case])]) == 2
    assert said_line(capsys.readouterr().err) == expected.format(path=bad[case])


# ---- mock (a taken port: tests/mock/test_mock_cli.py) -----------------------------------------

@pytest.mark.parametrize("case, expected", [
    ("missing", "--script {path}: no such file"),
    ("directory", "--script {path} is a directory, not a file"),
    ("garbage", "--script {path} is not UTF-8 text (byte 1)"),
    ("empty", "cannot use script {path}: not valid JSON: EOF while parsing a value at line 1 column 0"),
    ("not-a-recording", 'cannot use script {path}: hello: Extra inputs are not permitted (got "world")'),
])
def test_mock_refuses_a_script_it_cannot_use(case: str, expected: str, bad: dict[str, Path],
                                             capsys: pytest.CaptureFixture[str], restore_logging: None) -> None:
    assert main(["mock", "--port", "0", "--script", str(bad[case])]) == 2
    assert said_line(capsys.readouterr().err) == expected.format(path=bad[case])


def test_mock_subprocess_refuses_a_script_that_is_not_text(bad: dict[str, Path]) -> None:
    done = run_relay("mock", "--port", "0", "--script", str(bad["garbage"]), cwd=bad["file"].parent)
    assert done.returncode == 2 and done.stdout == ""
    assert said_line(done.stderr) == f"--script {bad['garbage']} is not UTF-8 text (byte 1)"


# ---- demo -------------------------------------------------------------------------------------

def test_demo_subprocess_refuses_a_tools_file_with_a_syntax_error(bad: dict[str, Path]) -> None:
    done = run_relay("demo", "--tools", str(bad["syntax-error"]), "--no-record", cwd=bad["file"].parent)
    assert done.returncode == 2
    assert said_line(done.stderr).startswith(f"relay demo: importing {str(bad['syntax-error'])!r} failed")


def test_demo_refuses_a_recording_place_that_is_a_file(bad: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--record", str(bad["file"])]) == 2
    assert said_line(capsys.readouterr().err) == f"relay demo: --record {bad['file']} is a file: recordings go into a directory"


def test_demo_refuses_a_recording_place_it_cannot_create(bad: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    place = bad["file"] / "recordings"     # under a file: no directory can be made there
    assert main(["demo", "--record", str(place)]) == 2
    assert said_line(capsys.readouterr().err).startswith(f"relay demo: --record {place}: cannot create the directory")


# ---- usage --------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["serve", "--dialect", "gpt"], "relay serve: argument --dialect: invalid choice: 'gpt' (choose from 'openai', "),
    (["inspect", "a.jsonl", "b.jsonl"], "relay inspect: too many arguments: b.jsonl (usage: relay inspect [options] "
                                        "recording)"),
    (["replay", "a.jsonl", "--colour"], "relay replay: unrecognized arguments: --colour (relay replay --help lists "
                                        "the options)"),
    (["replay"], "relay replay: the following arguments are required: recording"),
    (["nosuch"], "relay: argument COMMAND: invalid choice: 'nosuch' (choose from 'demo', "),
])
def test_a_usage_error_is_one_line_and_exit_2(argv: list[str], expected: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert said_line(capsys.readouterr().err).startswith(expected)


def test_a_usage_error_from_the_entry_point_is_one_line(tmp_path: Path) -> None:
    done = run_relay("serve", "--dialect", "gpt", cwd=tmp_path)
    assert done.returncode == 2
    assert said_line(done.stderr).startswith("relay serve: argument --dialect: invalid choice: 'gpt'")


# ---- a bug is not bad input -------------------------------------------------------------------

def test_a_bug_is_one_line_with_its_own_status(monkeypatch: pytest.MonkeyPatch, bad: dict[str, Path],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import relay.cli.export

    def broken(*args: object, **kwargs: object) -> int:
        raise KeyError("oops")

    monkeypatch.setattr(relay.cli.export, "run_export", broken)
    assert main(["export", str(bad["recording"]), "--format", "vapi"]) == INTERNAL_ERROR
    assert said_line(capsys.readouterr().err) == ("relay export: internal error, a bug in relay: KeyError: 'oops' "
                                                  "(RELAY_TRACEBACK=1 shows the traceback)")


@pytest.mark.parametrize("argv", [["explore", "demo", "--budget", "2", "--json"],
                                  ["replay", str(REPO / "docs" / "examples" / "recordings" / "demo.jsonl"),
                                   "--tools", "relay.examples.tools"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(argv: list[str]) -> None:
    """`relay explore demo | head`: its output's pipe closed before it printed; it ends with 141
    (128 + SIGPIPE) and says nothing, rather than "internal error" and a traceback at exit."""
    process = subprocess.Popen([sys.executable, "-m", "relay", *argv], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    process.stdout.close()   # long before its first line: it imports, then runs, then prints
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (141, "")
