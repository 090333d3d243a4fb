"""Every real recorded session goes through the engine without an exception, and what the
engine concludes about each matches what the recording shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.engine import CallState, OpenAIEngine, EngineConfig, Owner
from relay.tools import tool
from tests.support.paths import shared_dir

RECORDINGS = sorted((shared_dir() / "recordings").glob("*.jsonl"))


def replay(path: Path, tools=()) -> OpenAIEngine:
    """Feed a recorded event log to a fresh engine, server events as upstream frames."""
    meta = json.loads(path.with_suffix(".meta.json").read_text())
    engine = OpenAIEngine(tools, config=EngineConfig(mode="replay", strict=True))
    lines = path.read_text().splitlines()
    assert len(lines) == len(meta["directions"])
    for n, (line, direction) in enumerate(zip(lines, meta["directions"])):
        if direction == "server":
            engine.receive_upstream(line, 1000.0 + n * 0.01)
        else:
            engine.receive_client(line, 1000.0 + n * 0.01)
    return engine


def recording(name: str) -> Path:
    return next(p for p in RECORDINGS if p.name.startswith(name))


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_every_recording_goes_through_without_internal_errors(path: Path) -> None:
    engine = replay(path)
    assert not [a for a in engine.anomalies if a.internal]
    assert engine.dump()  # the dump renders for every session


def test_banyan_log1_call_arguments_cancellations_and_truncations() -> None:
    engine = replay(recording("banyan-landing_log1"))
    [entry] = [e for e in engine.ledger if e.name == "transferToSupervisor"]
    assert entry.delta_count == 75
    assert entry.arguments_from_done is not None
    assert entry.arguments == entry.arguments_from_done
    assert json.loads(entry.arguments)["destination_agent_name"] == "marco_supervisor_biller"
    assert entry.owner is Owner.CLIENT and entry.state is CallState.COMPLETE  # no such relay tool
    cancelled = [r for r in engine.conversation.responses.values() if r.status == "cancelled"]
    assert len(cancelled) == 8
    assert all(r.reason == "turn_detected" for r in cancelled)
    truncated = [i for i in engine.conversation.items.values() if i.audio_end_ms is not None]
    assert len(truncated) == 5
    assert sorted(i.audio_end_ms for i in truncated) == [0, 20, 1680, 2460, 4000]
    assert not engine.anomalies
    # conversation order: the call is the last item, after the assistant message of its response
    last = engine.conversation.items[engine.conversation.order[-1]]
    assert last.type == "function_call" and last.response_id == entry.response_id


def test_banyan_log1_with_a_relay_tool_runs_the_call_once() -> None:
    @tool
    def transferToSupervisor(destination_agent_name: str, reason: str, urgency: str = "", summary: str = "") -> str:
        return "transferred"

    engine = OpenAIEngine([transferToSupervisor], config=EngineConfig(mode="replay", strict=True))
    path = recording("banyan-landing_log1")
    meta = json.loads(path.with_suffix(".meta.json").read_text())
    starts = []
    for n, (line, direction) in enumerate(zip(path.read_text().splitlines(), meta["directions"])):
        if direction == "server":
            starts += [a for a in engine.receive_upstream(line, float(n)) if type(a).__name__ == "StartHandler"]
    assert [s.tool.name for s in starts] == ["transferToSupervisor"]
    assert starts[0].arguments["destination_agent_name"] == "marco_supervisor_biller"


def test_jurgob_failed_and_incomplete_responses() -> None:
    engine = replay(recording("jurgob"))
    responses = list(engine.conversation.responses.values())
    assert len(responses) == 54
    failed = [r for r in responses if r.status == "failed"]
    assert len(failed) == 18
    assert all(r.status_details["error"]["code"] == "rate_limit_exceeded" for r in failed)
    incomplete = [r for r in responses if r.status == "incomplete"]
    assert len(incomplete) == 1 and incomplete[0].reason == "content_filter"
    assert len([r for r in responses if r.status == "cancelled"]) == 17


def test_realtimechat_output_echo_is_linked_to_its_call() -> None:
    engine = replay(recording("realtimechat-idx13146878824_beta_fc_output"))
    [entry] = list(engine.ledger)
    assert entry.name == "navigate"
    assert entry.state is CallState.ANSWERED
    assert entry.output_item_id is not None
    assert json.loads(entry.output) == {"response": "Tool call navigate executed successfully."}
    # the author elided deltas: the mismatch is reported, the .done arguments win
    assert any("differ" in a.message for a in engine.anomalies)
    assert json.loads(entry.arguments) == {"page": "/about"}


def test_input_transcript_after_response_done_is_kept() -> None:
    engine = replay(recording("realtimechat-idx13146878824_beta_turn"))
    user = [i for i in engine.conversation.visible_items() if i.role == "user"]
    assert user and user[0].text()


def test_text_response_deltas_assemble_into_the_item_text() -> None:
    engine = replay(recording("liusida-dictionary_beta_text_response"))
    [item] = [i for i in engine.conversation.items.values() if i.role == "assistant"]
    lines = recording("liusida").read_text().splitlines()
    done = [json.loads(line) for line in lines if '"response.text.done"' in line]
    assert done and item.text() == done[0]["text"]


def test_semantic_kernel_cancel_before_any_item() -> None:
    engine = replay(recording("semantic-kernel"))
    cancelled = [r for r in engine.conversation.responses.values() if r.status == "cancelled"]
    assert cancelled and any(not r.output_item_ids for r in cancelled)


def test_fragments_produce_anomalies_not_exceptions() -> None:
    engine = replay(recording("github-issues_fragments"))
    assert any("without response.created" in a.message for a in engine.anomalies)
    failed = [r for r in engine.conversation.responses.values() if r.status == "failed"]
    assert len(failed) == 1
