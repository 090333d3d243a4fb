"""The provider's own MCP tools, as the mock plays them (OpenAI Realtime GA's shapes, as the
`openai` package's realtime types define them): what a scripted reply's `mcp_calls` become in a
response, the approval round trip, and the `mcp_list_tools` item a session gets for each `mcp`
tool it declares.

A scripted MCP call (`McpCall`) with `approval: true` first asks: the response carries an
`mcp_approval_request` item and ends. When the client answers it (`conversation.item.create` of an
`mcp_approval_response`) and asks for a response, the same rule plays again and finds the answer:
approved, the call runs (`mcp_call` with `approval_request_id`) and the model says `say` with
`{mcp_output}`; refused, the model says it was not allowed. Without approval the call runs at once.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from relay.dialects import openai_codec as codec
from relay.mock.script import McpCall
from relay.mock.wire import Wire, new_id


@dataclass(frozen=True)
class PlannedMcpCall:
    """A provider-side MCP call in a response: its item and events."""

    server_label: str
    name: str
    arguments: str
    output: str | None
    error: dict[str, Any] | None
    approval_request_id: str | None = None


@dataclass(frozen=True)
class PlannedApprovalRequest:
    """An `mcp_approval_request` item in a response (the response then ends)."""

    server_label: str
    name: str
    arguments: str


def planned(calls: tuple[McpCall, ...], items: list[dict[str, Any]]) -> tuple[list[PlannedMcpCall | PlannedApprovalRequest], list[str]]:
    """What a reply's MCP calls become in a response over `items` (the conversation): the
    planned items, and what the model says about them (the outputs, or a refusal)."""
    plan: list[PlannedMcpCall | PlannedApprovalRequest] = []
    said: list[str] = []
    for call in calls:
        arguments = call.arguments_text()
        error = {"type": "tool_execution_error", "message": call.error} if call.error is not None else None
        if not call.approval:
            plan.append(PlannedMcpCall(call.server_label, call.name, arguments, call.output, error))
            said.append(call.output if call.output is not None else f"{call.name} failed: {call.error}")
            continue
        request = _latest_request(items, call)
        answer = _answer_to(items, request) if request is not None else None
        if request is None or answer is None or _answered_call(items, request):
            plan.append(PlannedApprovalRequest(call.server_label, call.name, arguments))
        elif answer.get("approve") is True:
            plan.append(PlannedMcpCall(call.server_label, call.name, arguments, call.output, error, request["id"]))
            said.append(call.output if call.output is not None else f"{call.name} failed: {call.error}")
        else:
            said.append(f"I was not allowed to use {call.name}.")
    return plan, said


def _latest_request(items: list[dict[str, Any]], call: McpCall) -> dict[str, Any] | None:
    return next((item for item in reversed(items) if item.get("type") == codec.MCP_APPROVAL_REQUEST
                 and item.get("server_label") == call.server_label and item.get("name") == call.name), None)


def _answer_to(items: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any] | None:
    return next((item for item in items if item.get("type") == codec.MCP_APPROVAL_RESPONSE
                 and item.get("approval_request_id") == request["id"]), None)


def _answered_call(items: list[dict[str, Any]], request: dict[str, Any]) -> bool:
    """Whether the approved call already ran (then a new turn asks again)."""
    return any(item.get("type") == codec.MCP_CALL and item.get("approval_request_id") == request["id"] for item in items)


def call_steps(wire: Wire, response_id: str, output_index: int, planned_call: PlannedMcpCall,
               item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events of an `mcp_call` between its item's `.added` and `.done`; the item is given its
    arguments and its output or error on the way."""
    where = {"response_id": response_id, "item_id": item["id"], "output_index": output_index}
    yield wire.frame(codec.McpCallArgumentsDelta(**where, delta=planned_call.arguments))
    yield wire.frame(codec.McpCallArgumentsDone(**where, arguments=planned_call.arguments))
    item["arguments"] = planned_call.arguments
    yield wire.frame(codec.McpCallInProgress(item_id=item["id"], output_index=output_index))
    if planned_call.error is None:
        item["output"] = planned_call.output or ""
        yield wire.frame(codec.McpCallCompleted(item_id=item["id"], output_index=output_index))
    else:
        item["error"] = copy.deepcopy(planned_call.error)
        yield wire.frame(codec.McpCallFailed(item_id=item["id"], output_index=output_index))


def call_item(wire: Wire, planned_call: PlannedMcpCall) -> dict[str, Any]:
    extra = {"approval_request_id": planned_call.approval_request_id} if planned_call.approval_request_id else {}
    return wire.item(id=new_id("item"), type=codec.MCP_CALL, server_label=planned_call.server_label,
                     name=planned_call.name, arguments="", **extra)


def approval_item(wire: Wire, request: PlannedApprovalRequest) -> dict[str, Any]:
    return wire.item(id=new_id("item"), type=codec.MCP_APPROVAL_REQUEST, server_label=request.server_label,
                     name=request.name, arguments=request.arguments)


def list_tools_events(wire: Wire, conversation: Any, tools: Any,
                     scripted: Mapping[str, tuple[Mapping[str, Any], ...]], listed: set[str]) -> list[dict[str, Any]]:
    """The events a session update's `mcp` tools bring, each label once a session: its
    `mcp_list_tools` item enters the conversation (added, empty), is listed (in progress, then
    completed with the script's tools for that label, or failed for a label it does not know),
    and is done."""
    events: list[dict[str, Any]] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict) or tool.get("type") != "mcp" or tool.get("server_label") in listed:
            continue
        label = str(tool.get("server_label"))
        listed.add(label)
        item = wire.item(id=new_id("item"), type=codec.MCP_LIST_TOOLS, server_label=label, tools=[])
        previous = conversation.insert(copy.deepcopy(item))
        events.append(wire.frame(codec.ItemAdded(previous_item_id=previous, item=item)))
        events.append(wire.frame(codec.McpListToolsInProgress(item_id=item["id"])))
        listed_as = codec.McpListToolsCompleted if label in scripted else codec.McpListToolsFailed
        events.append(wire.frame(listed_as(item_id=item["id"])))
        item["tools"] = [copy.deepcopy(dict(entry)) for entry in scripted.get(label, ())]
        conversation.replace(copy.deepcopy(item))
        events.append(wire.frame(codec.ItemDone(previous_item_id=previous, item=item)))
    return events
