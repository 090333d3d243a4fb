"""A readable text dump of an engine's state, for the demo, the CLI and failing tests."""

from __future__ import annotations

from typing import Any, Protocol

from relay.dialects.openai import FUNCTION_CALL, FUNCTION_CALL_OUTPUT
from relay.engine.calls import CallLedger
from relay.engine.conversation import Conversation, ItemRecord


class EngineState(Protocol):
    """What a dump reads of an engine (any dialect's: `SessionEngine` has it)."""

    session_id: str
    dialect: Any
    config: Any
    conversation: Conversation
    ledger: CallLedger
    anomalies: list[Any]


def _clip(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def describe_item(record: ItemRecord) -> str:
    """One line for an item: what it is, who produced it, and its words or call."""
    data = record.data
    origin = record.origin + (f" {record.response_id}" if record.response_id else "")
    status = f" {record.status}" if record.status else ""
    if record.type == "message":
        words = record.text()
        if not words and record.has_untranscribed_audio():
            words = "(audio, no transcript)"
        line = f"{record.role or '?'} message [{origin}]{status}: {_clip(words)!s}"
    elif record.type == FUNCTION_CALL:
        line = (f"function_call {data.get('name')}({_clip(str(data.get('arguments') or ''), 80)}) "
                f"call_id={data.get('call_id')} [{origin}]{status}")
    elif record.type == FUNCTION_CALL_OUTPUT:
        line = (f"function_call_output call_id={data.get('call_id')} [{origin}]{status}: "
                f"{_clip(str(data.get('output') or ''), 80)}")
    else:
        line = f"{record.type} [{origin}]{status}"
    if record.audio_end_ms is not None:
        line += f" (truncated at {record.audio_end_ms} ms)"
    if record.hidden:
        line += " (hidden from client)"
    return line


def dump_engine(engine: EngineState) -> str:
    conversation = engine.conversation
    lines = [f"session {engine.session_id}  dialect={engine.dialect.name}  mode={engine.config.mode}"]
    lines.append(f"items in conversation order ({len(conversation.order)}):")
    for position, item_id in enumerate(conversation.order, 1):
        lines.append(f"  {position:3}. {item_id}  {describe_item(conversation.items[item_id])}")
    outside = [r for r in conversation.items.values() if not r.in_conversation]
    if outside:
        lines.append(f"items outside the conversation ({len(outside)}: out-of-band, deleted or partial):")
        for record in outside:
            flag = " deleted" if record.deleted else ""
            lines.append(f"       {record.id}{flag}  {describe_item(record)}")
    lines.append(f"responses ({len(conversation.responses)}):")
    for response_id in conversation.response_order:
        response = conversation.responses[response_id]
        reason = f" ({response.reason})" if response.reason else ""
        error = ""
        details = response.status_details or {}
        if isinstance(details.get("error"), dict):
            error = f" error={details['error'].get('code') or details['error'].get('type')}"
        oob = " out-of-band" if response.out_of_band else ""
        lines.append(f"  {response_id}  {response.status}{reason}{error}  by={response.creator}{oob}  "
                     f"items={len(response.output_item_ids)}")
    lines.append(f"calls ({len(engine.ledger)}):")
    for entry in engine.ledger:
        extra = f" skipped: {entry.skip_reason}" if entry.skip_reason else ""
        if entry.output is not None:
            extra += f" output[{entry.output_status}]={_clip(entry.output, 60)}"
        if entry.follow_up_response_id:
            extra += f" follow-up={entry.follow_up_response_id}"
        lines.append(f"  {entry.call_id}  {entry.name}  owner={entry.owner.value}  state={entry.state.value}"
                     f"  response={entry.response_id}  args({entry.delta_count} deltas)="
                     f"{_clip(entry.arguments, 60)}{extra}")
    if engine.anomalies:
        lines.append(f"anomalies ({len(engine.anomalies)}):")
        for anomaly in engine.anomalies:
            lines.append(f"  - [{anomaly.source}] {anomaly.message}")
    return "\n".join(lines)
