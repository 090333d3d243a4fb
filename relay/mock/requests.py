"""What a client's response requests do in a mock session: `response.create` checked as the
provider checks it (one active response at a time, known fields, metadata, tools, modalities,
input items), the reply the script picks and the plan it becomes, the run started, and
`response.cancel`. A part of `MockSession` (relay/mock/session.py), which owns the state it reads.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import msgspec

from relay.mock import mcp
from relay.mock.conversation import Conversation, item_not_found
from relay.mock.faults import Faults
from relay.mock.responses import Planned, PlannedCall, PlannedMessage, ResponseRun
from relay.mock.script import MockScript, Reply, warn_not_offered
from relay.mock.wire import (
    ProtocolError,
    Wire,
    check_metadata,
    check_modalities,
    check_tool_choice,
    check_tools,
)
from relay.tools.render import json_copy

log = logging.getLogger("relay.mock.session")


# ---- what a session asks its edge to do (MockUpstream carries them out) ----------------------
@dataclass(frozen=True)
class Emit:
    """Send a server event (or, from `inject`, a raw frame) to one connection or all (`to=None`)."""

    event: dict[str, Any] | str | bytes
    to: int | None = None


@dataclass(frozen=True)
class Stream:
    """Run a response's event stream."""

    run: ResponseRun


@dataclass(frozen=True)
class Wake:
    """A response's course changed (cancelled, released): end any pause it is in."""

    run: ResponseRun


Action = Emit | Stream | Wake


def _text_tokens(value: Any) -> int:
    """About a token per four bytes of the value's compact JSON (msgspec: every response counts
    the whole conversation, which `json.dumps` made a twentieth of a scripted session's time)."""
    try:
        size = len(msgspec.json.encode(value))
    except UnicodeEncodeError:   # a lone surrogate (msgspec refuses one): `json.dumps` writes its escape
        size = len(json.dumps(value))
    return size // 4


class ResponseRequests:
    """The response half of `MockSession`: what it reads of the session is declared here."""

    id: str
    wire: Wire
    script: MockScript
    faults: Faults
    config: dict[str, Any]
    conversation: Conversation
    conversation_id: str
    responses: list[ResponseRun]
    picks: list[str]
    _warned_names: set[str]
    _input_audio_ms: int
    _rejected: int
    _settled: int   # how many runs, from the first, are over (`active_response`)

    @property
    def instructions(self) -> str | None:
        return self.config.get("instructions")

    @property
    def active_response(self) -> ResponseRun | None:
        # A run is active from its start until it ends, never again after: the runs before the
        # first still active are skipped once and for all (`_settled`), not read at every event.
        responses = self.responses
        settled = self._settled
        while settled < len(responses) and not responses[settled].active:
            settled += 1
        self._settled = settled
        for index in range(len(responses) - 1, settled - 1, -1):
            if responses[index].active:
                return responses[index]
        return None

    def _response_create(self, request: Any) -> list[Action]:
        """A client's `response.create` (its `response` options, or None)."""
        if self._rejected < self.faults.reject_response_create:
            self._rejected += 1
            error = self.faults.reject_error
            raise ProtocolError(
                error.get("code"),
                error.get("message", "rejected"),
                error.get("param"),
                error.get("type", "server_error"),
            )
        if request is None:
            request = {}
        if not isinstance(request, dict):
            raise ProtocolError("invalid_type", "Invalid type for 'response': expected an object.", "response")
        active = self.active_response
        self._check_response_request(request)
        if active is not None and self.wire.quirks.cancel_previous and request.get("cancel_previous", True):
            # Voice Live: the new response replaces the one in progress (`Quirks.cancel_previous`)
            active.cancel("client_cancelled")
            return [Wake(active), *self.start_response(request, origin="client")[1]]
        if active is not None:
            raise ProtocolError(
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress: {active.id}. Wait until the response "
                "is finished before creating a new one.",
                None,
            )
        return self.start_response(request, origin="client")[1]

    def _check_response_request(self, request: dict[str, Any]) -> None:
        for key in request:
            if key not in self.wire.response_fields():
                raise ProtocolError("unknown_parameter", f"Unknown parameter: 'response.{key}'.", f"response.{key}")
        check_metadata(request.get("metadata"), "response.metadata")
        if "tools" in request:
            check_tools(request["tools"], "response.tools")
        if "tool_choice" in request:
            check_tool_choice(request["tool_choice"], "response.tool_choice")
        modalities_key = "modalities" if self.wire.beta else "output_modalities"
        if modalities_key in request:
            check_modalities(request[modalities_key], f"response.{modalities_key}", beta=self.wire.beta)
        if "input" in request:
            self._input_items(request["input"])

    def _input_items(self, entries: Any) -> list[dict[str, Any]]:
        """A response's `input`: items, or references to conversation items by id."""
        if not isinstance(entries, list):
            raise ProtocolError(
                "invalid_type", "Invalid type for 'response.input': expected an array.", "response.input"
            )
        items = []
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise ProtocolError(
                    "invalid_type",
                    f"Invalid type for 'response.input[{index}]': expected an object.",
                    f"response.input[{index}]",
                )
            if entry.get("type") == "item_reference":
                referenced = self.conversation.get(entry.get("id", ""))
                if referenced is None:
                    raise item_not_found(entry.get("id"), f"response.input[{index}].id")
                entry = referenced
            items.append(entry)
        return items

    def start_response(
        self, request: dict[str, Any], *, origin: str, reply: Reply | None = None
    ) -> tuple[ResponseRun, list[Action]]:
        """Start a response (the request is already validated). `origin` is "client" or "server"."""
        # read only (the reply's pick, the input's tokens): the conversation's items, not a copy
        inline = "input" in request
        items = self._input_items(request["input"]) if inline else self.conversation.current()
        if reply is None:
            reply = self._pick(items, request.get("instructions"))
        beta = self.wire.beta
        modalities = request.get("modalities" if beta else "output_modalities") or self.wire.modalities(self.config)
        requested_audio = (request.get("audio") or {}).get("output") or {}
        voice = request.get("voice") if beta else requested_audio.get("voice")
        output_format = request.get("output_audio_format") if beta else requested_audio.get("format")
        max_tokens = request.get("max_response_output_tokens" if beta else "max_output_tokens")
        instructions = request.get("instructions") or self.instructions or ""
        run = ResponseRun(
            wire=self.wire,
            plan=self._plan(reply, request),
            options=self.script.options,
            conversation=None if request.get("conversation") == "none" else self.conversation,
            conversation_id=None if request.get("conversation") == "none" else self.conversation_id,
            modality="audio" if "audio" in modalities else "text",
            voice=voice or self.wire.voice(self.config),
            output_format=output_format or self.wire.output_format(self.config),
            output_bytes_per_ms=self.wire.output_bytes_per_ms(self.config),
            max_output_tokens=max_tokens or self.wire.max_output_tokens(self.config),
            metadata=json_copy(request.get("metadata")),
            input_tokens=(
                (_text_tokens(items) if inline else self._conversation_tokens(items))
                + _text_tokens(instructions) + _text_tokens(self.config.get("tools")),
                self._input_audio_ms // 50,
            ),
            request=json_copy(request),
            origin=origin,
            hold=reply.hold,
            hold_before_done=reply.hold_before_done or self.script.options.hold_before_done,
            pace_audio=self.faults.pace_audio,
        )
        self.responses.append(run)
        return run, [Stream(run)]

    def _conversation_tokens(self, items: list[dict[str, Any]]) -> int:
        """`_text_tokens` of the whole conversation, from the sizes it keeps of its items."""
        size = self.conversation.encoded_size()
        return _text_tokens(items) if size is None else size // 4

    def _pick(self, items: list[dict[str, Any]], instructions: str | None) -> Reply:
        """The script's reply for a response (the next of its `turns` first), noted in `picks`."""
        turn = self.picks.count("turn")
        reply, source = self.script.pick(items, instructions, self.conversation.call_names(), turn)
        self.picks.append(source)
        return reply

    def _plan(self, reply: Reply, request: dict[str, Any]) -> list[Planned]:
        calls = list(reply.calls)
        if self.script.options.strict_tools:
            tools = request.get("tools", self.config.get("tools") or [])
            choice = request.get("tool_choice", self.config.get("tool_choice", "auto"))
            names = {tool.get("name") for tool in tools if tool.get("type") == "function"}
            forced = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "function" else None
            allowed = [c for c in calls if choice != "none" and c.name in names and forced in (None, c.name)]
            for dropped in (c for c in calls if c not in allowed):
                if dropped.name not in names:
                    warn_not_offered(self._warned_names, dropped.name, names - {None}, self.id)
                else:
                    log.info("mock: not calling %r: excluded by tool_choice", dropped.name)
            calls = allowed
        plan: list[Planned] = []
        say = reply.say
        if reply.mcp_calls:   # the provider's own MCP calls come first (relay/mock/mcp.py)
            mcp_plan, said = mcp.planned(reply.mcp_calls, self.conversation.items)
            plan += mcp_plan
            if any(isinstance(step, mcp.PlannedApprovalRequest) for step in mcp_plan):
                return plan   # the model asks, and the response ends
            say = (say or "{mcp_output}").replace("{mcp_output}", " ".join(said))
        plan += [PlannedMessage(say)] if say else []
        plan += [PlannedCall(call.name, call.arguments_text(), call.call_id, call.hold_after) for call in calls]
        if not plan and reply.calls and self.script.default.say:
            plan = [PlannedMessage(self.script.default.say)]
        return plan

    def _response_cancel(self, requested: Any) -> list[Action]:
        """A client's `response.cancel` (of the response it names, or of the active one)."""
        active = self.active_response
        if active is None or (requested is not None and requested != active.id):
            raise ProtocolError("response_cancel_not_active", "Cancellation failed: no active response found.", None)
        active.cancel("client_cancelled")
        return [Wake(active)]
