"""How a relay call ended (`CallOutcome`) and the one definition of a failed call, as every
reader of outcomes applies it: the pytest plugin, the inspector, traces and the demo's timeline."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from relay.cli.demo import Style, Timeline
from relay.engine import Notice
from relay.engine.calls import CallOutcome
from relay.inspector.model import SessionModel
from relay.offline.pytest_plugin import problems_of
from relay.offline.replay import ReplayCall, ReplayResult
from relay.recording.format import RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY, Frame, Note

FAILED = {CallOutcome.ERROR, CallOutcome.BAD_ARGUMENTS, CallOutcome.TIMEOUT, CallOutcome.UNKNOWN_TOOL,
          CallOutcome.ABANDONED}


def test_a_failed_call_is_defined_once() -> None:
    assert {outcome for outcome in CallOutcome if outcome.failed} == FAILED
    assert CallOutcome.means_failure("timeout") and CallOutcome.means_failure(CallOutcome.ABANDONED)
    for not_an_outcome_that_failed in ("ok", "cancelled", "skipped", "pending", "unanswered", None, 3):
        assert not CallOutcome.means_failure(not_an_outcome_that_failed)


def test_a_recording_keeps_the_outcomes_string_value() -> None:
    assert json.dumps({"outcome": CallOutcome.BAD_ARGUMENTS}) == '{"outcome": "bad_arguments"}'
    assert CallOutcome.TIMEOUT == "timeout" and f"{CallOutcome.TIMEOUT}" == "timeout"


@pytest.mark.parametrize("outcome", list(CallOutcome))
def test_the_pytest_plugin_fails_an_event_log_replay_on_a_failed_call_only(outcome: CallOutcome) -> None:
    call = ReplayCall(call_id="call_1", name="lookup", arguments="{}", output='{"error": "x"}', status="completed",
                      outcome=outcome, response_id="resp_1", follow_up_response_id=None)
    result = ReplayResult(path=Path("log.jsonl"), kind="event-log", calls=[call], sent=[], divergences=[],
                          timeline=[], warnings=[], anomalies=[], engine=None)  # type: ignore[arg-type]
    assert bool(problems_of(result)) is outcome.failed


@pytest.mark.parametrize("outcome", list(CallOutcome))
def test_the_inspector_shows_the_relays_outcome_and_counts_a_failed_call_as_an_error(outcome: CallOutcome) -> None:
    """Whatever the output says (here: an error output that reads like a timeout), the call's
    outcome is the relay's note."""
    model = SessionModel(header={"tools": ["lookup"], "id_prefix": "rs"}, strict=True)
    call = {"type": "response.output_item.done", "response_id": "resp_1", "item": {
        "type": "function_call", "id": "item_1", "call_id": "call_1", "name": "lookup", "arguments": "{}",
        "status": "completed"}}
    output = {"type": "conversation.item.create", "event_id": "rs_e1", "item": {
        "type": "function_call_output", "call_id": "call_1", "output": json.dumps({"error": "timed out after 1 s"})}}
    model.feed(Frame(1.0, UPSTREAM_TO_RELAY, call, None, None, 1))
    model.feed(Frame(2.0, RELAY_TO_UPSTREAM, output, None, None, 2))
    model.note(Note(2.0, "tool_call", {"call_id": "call_1", "outcome": outcome.value}, 3))
    snapshot = model.snapshot()
    [event] = [e for e in snapshot["events"] if e["kind"] == "call"]
    assert event["outcome"] == outcome
    assert snapshot["summary"]["tools"]["lookup"]["errors"] == int(outcome.failed)
    assert snapshot["summary"]["errors"] == int(outcome.failed)


def test_without_a_note_the_inspector_reads_the_outputs_structure_never_its_words() -> None:
    model = SessionModel(header={"id_prefix": "rs"}, kind="event-log", strict=True)
    for index, (text, status) in enumerate([(json.dumps({"error": "timed out after 1 s"}), "incomplete"),
                                            (json.dumps({"error": "cancelled: the user interrupted"}), "completed"),
                                            ("timed out, but fine", "completed"),
                                            ("partial", "incomplete")]):
        call_id = f"call_{index}"
        model.feed(Frame(index, UPSTREAM_TO_RELAY, {"type": "response.output_item.done", "response_id": "r", "item": {
            "type": "function_call", "id": f"item_{index}", "call_id": call_id, "name": "f", "arguments": "{}",
            "status": "completed"}}, None, None, index))
        model.feed(Frame(index + 0.5, RELAY_TO_UPSTREAM, {"type": "conversation.item.create", "item": {
            "type": "function_call_output", "call_id": call_id, "output": text, "status": status}},
            None, None, index))
    outcomes = [e["outcome"] for e in model.snapshot()["events"] if e["kind"] == "call"]
    assert outcomes == ["error", "error", "ok", "incomplete"]


@pytest.mark.parametrize("outcome", list(CallOutcome))
def test_the_demo_shows_a_failed_call_as_an_error_line(outcome: CallOutcome) -> None:
    out = io.StringIO()
    timeline = Timeline(Style(False), out)
    timeline.notice("rs_1", Notice("tool_call", {"call_id": "call_1", "name": "lookup", "outcome": outcome,
                                                 "reason": "why"}))
    who = out.getvalue().split()[1]
    assert who == ("error" if outcome.failed else "tool")


def test_a_trace_marks_a_failed_call_as_an_error() -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra: pip install -e '.[otel]'")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from relay.observe.tracing import Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace = Tracing(provider.get_tracer("test")).session(session_id="rs_1", mode="proxy", dialect="openai",
                                                        upstream="example.test:443")
    for outcome in CallOutcome:
        trace.notice(Notice("tool_call", {"call_id": f"call_{outcome.value}", "name": outcome.value,
                                          "outcome": outcome}))
    trace.end(by="client", code=1000, reason="done", tool_calls=len(CallOutcome), failed=False)
    provider.shutdown()
    errors = {span.name.removeprefix("execute_tool ") for span in exporter.get_finished_spans()
              if span.name.startswith("execute_tool") and span.status.status_code is StatusCode.ERROR}
    assert errors == {outcome.value for outcome in FAILED}
