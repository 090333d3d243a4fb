"""`relay explore` with the relay as a sidecar (`--mode sidecar`, a sidecar's recording): the
caller's application talks to the server itself and the relay is attached to the same session,
as `relay attach` runs it (relay/offline/sidecar_app.py: the application hears every event the
relay reads, answers its own tools' calls and asks for their response, unseen by the relay).

What it found in the relay, on both families, in a batch of both the relay's calls and the
application's, which the application answered and asked for (its `response.create`) while a relay
call still ran: the relay's output was never spoken of.

- Realtime: the server began the application's response without the relay's output, and the
  relay left the batch's follow-up to the application, as a proxy does only when the client's
  ask comes after its outputs (relay/engine/injection.py, `_continued_unseen`).
- GPT-Live: the server refused the application's create as a partial batch (and told only the
  application), and the relay, which sees none of the application's outputs, waited for a create
  of the application's that never came (relay/engine/client_asks.py, `_sidecar_continues`: the
  relay asks once its own outputs are in; the server refuses that as partial, told to the relay,
  while only the application's outputs are missing, and the application's create then continues
  the batch).

The tests of each fix fail with it undone (those that undo it in place expect what it fixed)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from relay.cli import main
from relay.engine.client_asks import ClientAsks
from relay.engine.injection import Injector
from relay.errors import UnusableInput
from relay.offline.explore import explore
from relay.offline.explore_input import from_file
from relay.offline.replay import replay
from relay.recording.format import CLIENT_TO_RELAY, RELAY_TO_CLIENT
from relay.recording.reader import load_recording
from relay.testing import ExpectationFailed, Script, Turn, call, check_invariants
from relay.tools import tool
from relay.tools.sources import tool_registry
from tests.test_explore_client_late import client_first, mixed


@tool(timeout=5)
async def get_weather(city: str) -> str:
    """The weather in a city (the relay's tool: slower than the application's own)."""
    await asyncio.sleep(0.5)
    return f"sunny in {city}"


def local_time(zone: str) -> str:
    """The time in a zone (the application's own tool, answered at once)."""
    return f"noon in {zone}"


BOTH = Script(Turn(say="Let me check.", calls=[call("get_weather", city="Paris"), call("local_time", zone="CET")]),
              Turn(say="It is {joined}."),
              Turn(say="And the weather: {joined}."))


def _undo_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Injector, "_continued_unseen", lambda self: None)


def _sidecar_session(directory: Path) -> Path:
    with BOTH.start([get_weather], mode="sidecar", client_tools=[local_time]) as session:
        session.user("What's the weather and the time in Paris?")
        session.run_until_quiet()
    session.check_invariants()
    return session.save(directory)


def test_the_relay_beside_the_application_answers_its_own_call_and_speaks_of_it_after_the_apps_response(
        tmp_path: Path) -> None:
    with BOTH.start([get_weather], mode="sidecar", client_tools=[local_time]) as session:
        session.user("What's the weather and the time in Paris?")
        session.run_until_quiet()
    ledger = {entry.name: entry for entry in session.engine.ledger}
    assert ledger["get_weather"].relay_owned and ledger["get_weather"].output == "sunny in Paris"
    assert not ledger["local_time"].relay_owned and ledger["local_time"].output == "noon in CET"   # the app's, seen
    responses = session.expect()
    responses.next_call("get_weather").output(contains="sunny")
    session.check_invariants()   # spoke_after_tools: the relay's follow-up came after the app's response
    creates = [json.loads(f.raw) for f in session.frames
               if f.raw and '"response.create"' in f.raw and f.direction.startswith("relay")]
    assert len(creates) == 1   # the relay's one follow-up; the application's create never crossed the relay
    assert not [f for f in session.frames if f.direction in (CLIENT_TO_RELAY, RELAY_TO_CLIENT)]
    recording = load_recording(session.save(tmp_path))
    assert recording.header["mode"] == "sidecar" and recording.header["declare_tools"] is True
    replayed = replay(recording, [get_weather])
    assert replayed.ok, replayed.divergences


def test_with_the_fix_undone_the_relays_output_is_never_spoken_of(monkeypatch: pytest.MonkeyPatch) -> None:
    _undo_the_fix(monkeypatch)
    with pytest.raises(Exception, match="the model speaks after every tool|turn"):
        _sidecar_session(Path("unused"))


def test_the_explorer_runs_the_relay_as_a_sidecar_and_every_invariant_holds() -> None:
    result = explore(mixed("openai").with_mode("sidecar", "stock"), budget=60, seed=48)
    assert result.ok, result.report()
    assert result.mode == "sidecar" and result.covered == result.boundaries
    assert "client_never_sees_relay_call" in result.not_applicable   # a sidecar hides nothing
    assert "a sidecar" in result.report() and result.to_json()["mode"] == "sidecar"


def test_the_explorer_finds_the_unspoken_output_with_the_fix_undone_and_its_recording_replays_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _undo_the_fix(monkeypatch)
    result = explore(mixed("openai").with_mode("sidecar", "stock"), budget=60, seed=48, out=tmp_path,
                     replay_check=False)
    finding = next(f for f in result.findings if f.invariant == "spoke_after_tools")
    assert 1 <= len(finding.schedule) <= 3
    assert finding.recording is not None
    recording = load_recording(finding.recording)
    assert recording.header["mode"] == "sidecar"
    tools = tool_registry(mixed("openai").tools)
    replayed = replay(recording, tools)
    assert replayed.ok, replayed.divergences   # the replayed relay did what the explored one did
    with pytest.raises(ExpectationFailed, match="the model speaks after every tool"):
        check_invariants(replayed, "spoke_after_tools")   # the same silence


@pytest.mark.parametrize("dialect", ["azure", "xai"])
def test_the_demo_beside_the_caller_holds_on_the_realtime_wires_with_a_sideband(dialect: str) -> None:
    from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
    from relay.offline.explore_session import Conversation

    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect(dialect)
    result = explore(conversation.with_mode("sidecar", "demo"), budget=40, seed=48)
    assert result.ok, result.report()


def test_a_sidecars_recording_is_explored_as_a_sidecar_unless_told(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    recorded = _sidecar_session(tmp_path / "recorded")
    tools = tmp_path / "weather_tools.py"
    tools.write_text("from tests.test_explore_sidecar import get_weather  # noqa: F401\n")
    conversation = from_file(recorded, tool_registry([get_weather]))
    assert conversation.mode == "sidecar" and conversation.recorded_as == "sidecar"
    assert main(["explore", str(recorded), "--tools", str(tools), "--budget", "5", "--json"]) == 0
    as_recorded = json.loads(capsys.readouterr().out)
    assert as_recorded["mode"] == "sidecar" and "client_never_sees_relay_call" in as_recorded["not_applicable"]
    assert main(["explore", str(recorded), "--tools", str(tools), "--budget", "5", "--json", "--mode", "proxy"]) == 0
    as_proxy = json.loads(capsys.readouterr().out)
    assert as_proxy["mode"] == "proxy" and as_proxy["recorded_as"] == "sidecar"


@pytest.mark.parametrize(("args", "said"), [
    (["demo", "--dialect", "gemini", "--mode", "sidecar"], "gemini dialect has no sidecar"),
    (["demo", "--dialect", "voicelive", "--mode", "sidecar"], "voicelive dialect has no sidecar"),
])
def test_a_sidecar_on_a_wire_without_one_is_refused_in_one_line(args: list[str], said: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", *args, "--budget", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]


def test_a_script_files_mode_that_is_not_one_is_refused_in_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "bad.script.json"
    script.write_text(json.dumps({"lines": ["hi"], "script": {"rules": []}, "mode": "beside"}))
    assert main(["explore", str(script), "--budget", "1"]) == 2
    assert "the relay runs as proxy or sidecar, not 'beside'" in capsys.readouterr().err



# ---- GPT-Live ---------------------------------------------------------------------------------
BOTH_LIVE = Script(Turn(say="Let me check.", calls=[call("get_weather", city="Paris"), call("local_time", zone="CET")]),
                   Turn(say="It is noon, and sunny."))   # one continuation: GPT-Live refuses a partial batch


def test_a_gpt_live_sidecar_asks_for_a_batch_the_application_asked_for_too_early() -> None:
    with BOTH_LIVE.start([get_weather], dialect="live", mode="sidecar", client_tools=[local_time]) as session:
        session.user("What's the weather and the time in Paris?")
        session.advance(8)
    assert session.engine.config.mode == "sidecar"
    relay = [f for f in session.frames if f.direction.startswith("relay")]
    assert any('"response.create"' in (f.raw or "") for f in relay)   # the relay asked, once its output was in
    session.check_invariants()   # spoke_after_tools: the batch's response came


def test_with_the_gpt_live_fix_undone_the_batch_is_never_continued(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClientAsks, "_sidecar_continues", lambda self, batch: False)
    with pytest.raises(ExpectationFailed, match="turn"):
        with BOTH_LIVE.start([get_weather], dialect="live", mode="sidecar", client_tools=[local_time]) as session:
            session.user("What's the weather and the time in Paris?")
            session.advance(8)


@pytest.mark.parametrize("conversation", [mixed, client_first])
def test_the_explorer_runs_a_gpt_live_sidecar_and_every_invariant_holds(conversation: Any) -> None:
    result = explore(conversation("live").with_mode("sidecar", "stock"), budget=50, seed=48)
    assert result.ok, result.report()
    assert result.mode == "sidecar" and not any(p == "reseed" for p in result.held)


def test_the_explorer_finds_the_gpt_live_batch_left_unspoken_with_the_fix_undone(monkeypatch: pytest.MonkeyPatch,
                                                                                tmp_path: Path) -> None:
    monkeypatch.setattr(ClientAsks, "_sidecar_continues", lambda self, batch: False)
    result = explore(mixed("live").with_mode("sidecar", "stock"), budget=60, seed=48, out=tmp_path,
                     replay_check=False)
    finding = next(f for f in result.findings if f.invariant == "spoke_after_tools")
    assert 1 <= len(finding.schedule) <= 3 and finding.recording is not None
    assert load_recording(finding.recording).header["mode"] == "sidecar"


def test_a_sidecars_conversation_moved_to_a_wire_without_one_is_refused() -> None:
    conversation = mixed("openai").with_mode("sidecar", "stock")
    assert conversation.with_dialect("xai").mode == "sidecar"
    with pytest.raises(UnusableInput, match="the gemini dialect has no sidecar"):
        conversation.with_dialect("gemini")
