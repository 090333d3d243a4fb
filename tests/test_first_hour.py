"""A new user's first hour (issue 31): never a silent pass, never a silent misconfiguration.
Each test runs `python -m relay ...` as a user types it, in a subprocess, from a directory of its
own outside the checkout, and reads what the user reads: the exit status, stdout, the log lines.

- a replay in a dialect that cannot read the recording is refused (exit 2, one line), and a
  replay in which the relay saw none of the recorded calls is a finding, never "no divergence";
- a provider URL without its key is a configuration error for serve, attach and sidecar (exit 2,
  one line, no retries); a loopback upstream without one is normal and gets no warning;
- the dialect is inferred from an upstream's path when it is a provider's endpoint path (and said
  in a log line); serve says when it only relays; a tools file's sibling modules import;
  `relay demo --tools FILE` calls the given tools; a port in use says what to do;
- the replay report counts in words and shows a call before the handler it starts; the inspector
  gives the session's length, not the span of its frames.

(The README's Install and plugin recipe in fresh virtual environments, and `scripts/demo` from a
fresh clone: tests/packaging/.)
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from relay.errors import UnusableInput
from relay.recording.writer import RecordingWriter
from relay.testing import replay
from tests.support.paths import REPO
from tests.support.processes import next_log_line, relay_process, run_relay

WEATHER_TOOLS = str(REPO / "tests" / "fixtures" / "weather_tools.py")


def one_line(stderr: str) -> str:
    """The one line a refusal writes on stderr (a log line's message); fails on anything more."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    line = lines[0]
    return str(json.loads(line)["msg"]) if line.startswith("{") else line


def write_tool(directory: Path, answer: str) -> Path:
    """A tools file whose one tool answers `answer`, and imports a sibling module to do it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "helpers.py").write_text(f"def forecast(city):\n    return {answer!r} + ' in ' + city\n")
    tools = directory / "my_tools.py"
    tools.write_text("from helpers import forecast\nfrom relay import tool\n\n\n@tool\n"
                     "def get_forecast(city: str) -> str:\n    '''Tomorrow's weather in a city.'''\n"
                     "    return forecast(city)\n")
    return tools


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`relay demo --tools my_tools.py` from a directory of its own (the tools file elsewhere, with
    its sibling module): the recording it wrote, and where the user stands."""
    user = tmp_path_factory.mktemp("user")
    tools = write_tool(tmp_path_factory.mktemp("project") / "tools", "sunny")
    done = run_relay("demo", "--tools", str(tools), "--color", "never", cwd=user)
    assert done.returncode == 0, done.stderr
    assert "calls get_forecast(" in done.stdout and "tool  get_forecast ok" in done.stdout, done.stdout
    assert "get_weather" not in done.stdout and "not among" not in done.stdout + done.stderr
    recording_line = next(line for line in done.stdout.splitlines() if line.startswith("recording: "))
    recording = user / recording_line.removeprefix("recording: ")     # relative to where the user stands
    assert recording.is_file(), done.stdout
    return recording, user


# ---- 1: a replay never passes without looking ---------------------------------------------------

def test_a_replay_in_a_dialect_of_another_wire_is_refused_in_one_line(session: tuple[Path, Path]) -> None:
    recording, user = session
    done = run_relay("replay", str(recording), "--tools", WEATHER_TOOLS, "--dialect", "gemini", cwd=user)
    assert done.returncode == 2 and done.stdout == ""
    line = one_line(done.stderr)
    assert line.startswith(f"relay replay: {recording} is a recording of the openai dialect; the gemini dialect "
                           "reads another wire and would see none of it: leave the dialect out, or choose one of "
                           "openai, openai-beta, azure, foundry"), line
    assert "gemini" not in line.split("choose one of ")[1]
    with pytest.raises(UnusableInput, match="the gemini dialect reads another wire"):
        replay(recording, [WEATHER_TOOLS], dialect="gemini")       # the library's replay alike


def test_a_replay_that_saw_none_of_the_recorded_calls_is_a_finding(tmp_path: Path) -> None:
    """A recording whose header names a dialect that cannot read its frames (Gemini Live's call
    under an OpenAI header): the relay under test sees no call, and says so."""
    with RecordingWriter(tmp_path, session_id="sess_1", dialect="openai", upstream="ws://127.0.0.1:1",
                         tools=["get_weather"], extra_header={"id_prefix": "rs_1"}) as writer:
        writer.record("upstream>relay", json.dumps({"setupComplete": {}}))
        writer.record("upstream>relay", json.dumps({"toolCall": {"functionCalls": [
            {"id": "call_1", "name": "get_weather", "args": {"city": "Paris"}}]}}))
    done = run_relay("replay", str(writer.path), "--tools", WEATHER_TOOLS, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("missing: every call: the recording holds 1 call (get_weather), the relay under test saw none of them"
            in done.stdout)
    assert done.stdout.rstrip().endswith("verdict: 1 divergence")


# ---- 2: a missing provider key ------------------------------------------------------------------

@pytest.mark.parametrize("command, says", [
    (("serve", "--port", "0"), "no provider key for api.openai.com: set OPENAI_API_KEY"),
    (("serve", "--port", "0", "--upstream", "wss://myres.openai.azure.com/openai/v1/realtime"),
     "no provider key for myres.openai.azure.com: set AZURE_OPENAI_API_KEY"),
    (("serve", "--port", "0", "--upstream", "wss://myres.services.ai.azure.com/voice-agent/realtime"),
     "no provider key for myres.services.ai.azure.com: set AZURE_OPENAI_API_KEY"),
    (("serve", "--port", "0", "--dialect", "gemini"),
     "no provider key for generativelanguage.googleapis.com: set GEMINI_API_KEY"),
    (("attach", "--call-id", "rtc_1", "--tools", WEATHER_TOOLS),
     "no provider key for api.openai.com: set OPENAI_API_KEY"),
    (("sidecar", "--port", "0", "--tools", WEATHER_TOOLS), "no provider key for api.openai.com: set OPENAI_API_KEY"),
], ids=["serve", "azure", "foundry", "gemini", "attach", "sidecar"])
def test_a_provider_url_without_its_key_is_refused_at_once(command: tuple[str, ...], says: str,
                                                           tmp_path: Path) -> None:
    done = run_relay(*command, cwd=tmp_path, env={"OPENAI_WEBHOOK_SECRET": "whsec_dGVzdCBzZWNyZXQ="}, timeout=30)
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == f"{says} in the relay's environment"


async def test_a_loopback_upstream_needs_no_key_and_its_dialect_comes_from_its_path(tmp_path: Path) -> None:
    """The README's mock example without `--dialect` and without a key or `--tools`: it listens,
    says which dialect it inferred and that it only relays, and warns about nothing."""
    async with relay_process("serve", "--upstream", "ws://127.0.0.1:8765/v1/realtime", "--port", "0",
                             "--log-format", "json", cwd=tmp_path) as process:
        assert process.stderr is not None
        seen: list[str] = []
        await next_log_line(process.stderr, lambda line: line["msg"].startswith("no tools given"), seen)
    records = [json.loads(line) for line in seen]
    assert [r["msg"] for r in records] == [
        "speaking the openai dialect to the upstream, inferred from its path /v1/realtime "
        "(--dialect chooses another)",
        "no client token configured: listening on loopback (127.0.0.1) only",
        f"listening on {records[2]['url']}",
        "no tools given (--tools): relaying only; the clients' own tools work as without the relay",
    ]
    assert not [r for r in records if "key" in r["msg"]]


# ---- 5: small things a user meets ---------------------------------------------------------------

def test_an_upstream_path_no_provider_has_still_needs_a_dialect(tmp_path: Path) -> None:
    done = run_relay("serve", "--upstream", "ws://127.0.0.1:8765/realtime", "--port", "0", cwd=tmp_path)
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("cannot infer the dialect from '127.0.0.1:8765'; pass --dialect")


def test_serve_says_what_to_do_about_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_relay("serve", "--upstream", "ws://127.0.0.1:8765/v1/realtime", "--dialect", "openai",
                         "--port", str(port), cwd=tmp_path)
    assert done.returncode == 2
    assert one_line(done.stderr) == (f"cannot listen on 127.0.0.1:{port}: Address already in use; "
                                     "choose another --port (0 picks a free one)")


def test_the_help_says_a_tools_file_brings_its_own_directory(tmp_path: Path) -> None:
    done = run_relay("serve", "--help", cwd=tmp_path)
    assert "goes on the import path, as for a script" in " ".join(done.stdout.split())


# ---- 6: what the replay and the inspector report ------------------------------------------------

def test_a_changed_tool_replays_as_one_divergence_with_the_call_before_its_run(
        session: tuple[Path, Path], tmp_path: Path) -> None:
    recording, user = session
    changed = write_tool(tmp_path / "changed", "rainy")
    done = run_relay("replay", str(recording), "--tools", str(changed), cwd=user)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"replay of {recording.name} (relay, 1 call seen)"
    assert lines[-1] == "verdict: 1 divergence"
    assert "changed: output of call_" in done.stdout and '+    "output": "rainy in example",' in done.stdout
    received = next(i for i, line in enumerate(lines) if "recv  call get_forecast(" in line)
    ran = next(i for i, line in enumerate(lines) if "run   get_forecast(" in line)
    # the call is shown before its run, and the run no earlier (how much later depends on the
    # machine that recorded the session: its handler started within a millisecond or two)
    assert received < ran and float(lines[received].split()[0]) <= float(lines[ran].split()[0])


def test_the_inspector_gives_the_sessions_length(tmp_path: Path) -> None:
    """A session whose client stayed three seconds after its last frame: the end line says so."""
    now = [100.0]
    with RecordingWriter(tmp_path, session_id="sess_1", dialect="openai", upstream="ws://127.0.0.1:1",
                         tools=[], clock=lambda: now[0]) as writer:
        for t, event in ((0.001, {"type": "session.created", "session": {}}),
                         (0.046, {"type": "response.done", "response": {"id": "resp_1", "status": "completed",
                                                                         "output": []}})):
            now[0] = 100.0 + t
            writer.record("upstream>relay", json.dumps(event))
        now[0] = 103.038
    done = run_relay("inspect", str(writer.path), "--out", "page.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "page.html").read_text()
    model = json.loads(page.split('id="inspector-model">', 1)[1].split("</script>", 1)[0])
    assert model["duration"] == pytest.approx(3.038) and model["summary"]["duration"] == pytest.approx(3.038)
