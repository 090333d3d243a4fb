"""What both engines say about a call, in one place: the fields of a `tool_call` notice (which
metrics and logs read, whichever engine sent it) and how a timeout is written."""

from __future__ import annotations

from typing import Any

from relay.engine.ledger import CallEntry


def tool_call_fields(entry: CallEntry) -> dict[str, Any]:
    """The fields of a `tool_call` notice for `entry`: who, how it ended, and its timings."""
    latency = entry.latency_ms()
    handler_ms = None
    if entry.started_at is not None and entry.finished_at is not None:
        handler_ms = round((entry.finished_at - entry.started_at) * 1000.0, 3)
    return {
        "call_id": entry.call_id, "name": entry.name, "outcome": entry.outcome,
        "status": entry.output_status, "response_id": entry.response_id,
        "item_id": entry.item_id, "output_item_id": entry.output_item_id,
        "ms": None if latency is None else round(latency, 3), "handler_ms": handler_ms,
    }


def seconds_text(seconds: float) -> str:
    """`2` for 2.0, `0.5` for 0.5: how timeouts read in outputs."""
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"
