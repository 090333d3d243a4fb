"""The relay's tools in a GPT-Live session (Responses delegation): added to the client's
`session.start` and to its updates that set the Responses tools (a clash refused), declared on a
sideband with a `session.update` and declared again where a session event shows them missing,
and left out of the session the client is shown. Decisions delegation has no tool channel: said
once. The engine's rules for the calls themselves are relay/engine/delegations.py's."""

from __future__ import annotations

import copy
from typing import Any

from relay.dialects import live
from relay.engine.actions import Close
from relay.engine.backend_calls import DROP, SAME
from relay.engine.delegation_records import LiveRecords
from relay.engine.reseed import seeded_note

CLIENT, RESPONSES, DECISIONS = live.DELEGATION_TARGETS
POLICY_VIOLATION = 1008


class DelegatedTools(LiveRecords):
    """The relay's tools as one GPT-Live session declares and shows them."""

    _declaring = False   # a sideband's declaration went up and no session event showed it yet
    _crossed: list[Any] | None = None   # the other party's tools as an update of theirs set them meanwhile

    def _session_tools(self, event: live.SessionStarted | live.SessionUpdated, session: dict[str, Any]) -> None:
        """What a session event says of the relay's tools. A sideband is sent the session as it
        is each time it attaches, and each update that changed it: where the relay's tools are
        missing (its declaration lost with a sideband that dropped just after sending it, or
        replaced by the other party's `session.update` that set the Responses tools), they are
        declared again, with the other party's kept. While the relay's own update is on its way
        nothing is sent, but an update of the other party's applied first is noted: the relay's,
        built on the tools before it, replaces it once applied, and the relay then declares again
        with the other party's tools as they had set them."""
        tools = responses_tools(session)
        ours = set(self.tools.names)
        shown = tools is not None and bool(ours) and ours <= {_name(tool) for tool in tools}
        if self.config.has_client:   # the client's session.start and updates carry them (`_client_session`)
            self._declared = self._declared or shown
            return
        attached = isinstance(event, live.SessionStarted)
        others = [tool for tool in tools or [] if _name(tool) not in ours]
        if shown:
            crossed, self._declaring, self._crossed = self._crossed, False, None
            self._declared = crossed is None or crossed == others
            tools = tools if self._declared else crossed
        elif attached or tools is not None and not self._declaring:
            self._declared = False
        elif tools is not None:
            self._crossed = others   # applied before the relay's update, which will replace it
        if attached:
            self._no_tool_channel()
        if self.mode == RESPONSES and self.config.declare_tools and ours and not self._declared:
            self._declare_on_sideband(tools or [])

    def _without_relay_tools(self, event: live.SessionStarted | live.SessionUpdated | live.SessionClosed) -> Any:
        """The session as the client is shown it (started, updated, and the final snapshot of
        `session.closed`): without the relay's tools, nor the notes of what they did that seeded
        a session carrying on a dropped one."""
        session = event.session if isinstance(event.session, dict) else {}
        tools = responses_tools(session)
        ours = set(self.tools.names)
        history = session.get("input") if isinstance(session.get("input"), list) else []
        notes = [item for item in history if seeded_note(item) in self._notes]
        if not self._hiding or not (notes or tools is not None and any(_name(tool) in ours for tool in tools)):
            return SAME
        shown = copy.copy(event)
        shown.session = session if tools is None else _with_tools(session, [t for t in tools if _name(t) not in ours])
        if notes:
            shown.session = {**shown.session, "input": [item for item in history if item not in notes]}
        return shown

    def _declare_on_sideband(self, tools: list[Any]) -> None:
        """Attached (no `session.start` of ours): the relay's tools join the session's Responses
        tools with a `session.update` (which changes only what it names)."""
        self._client_tools = {_name(tool) for tool in tools if _name(tool)}
        clashes = self._client_tools & set(self.tools.names)
        merged = [tool for tool in tools if _name(tool) not in clashes] + self._definitions()
        self._declared = self._declaring = True
        self._crossed = None
        self._send(live.SessionUpdate(session={"delegation": {"type": RESPONSES, "responses": {"tools": merged}}}))

    def _no_tool_channel(self) -> None:
        """Decisions delegation has nowhere to declare a tool and makes no call: said once, when
        the relay has tools or a delegate the session will not use."""
        if self.mode == DECISIONS and (len(self.tools) or self.delegate is not None):
            self.ctx.anomaly("Decisions delegation has no tool channel: the relay's tools and delegate are not "
                             "offered to this session (its delegations are answered by the Decision API)", None)

    def _client_session(self, event: live.SessionStart | live.SessionUpdate) -> Any:
        """The client's session: the relay's tools join its Responses tools (a clash with one of
        them is refused)."""
        session = event.session if isinstance(event.session, dict) else None
        if session is None:
            return SAME
        mode = delegation_type(session)
        if isinstance(event, live.SessionStart):
            self.mode = mode or CLIENT
            self._started = session
            self._no_tool_channel()
        tools = responses_tools(session)
        if mode != RESPONSES or tools is None and isinstance(event, live.SessionUpdate):
            return SAME
        tools = tools or []
        self._client_tools = {_name(tool) for tool in tools if _name(tool)}
        if not self.config.declare_tools or not len(self.tools):
            return SAME
        clashes = sorted(self._client_tools & set(self.tools.names))
        if clashes:
            names = ", ".join(clashes)
            self.ctx.client_error("relay_tool_redefined",
                                  f"the session declares {names}, which the relay provides; remove it from your tools",
                                  event.event_id)
            if isinstance(event, live.SessionStart):
                self.ctx.emit(Close("client", POLICY_VIOLATION, f"relay tool redefined: {names}"))
                self._refused = True
            return DROP
        self._declared = True
        sent = _with_tools(session, [*tools, *self._definitions()])
        if isinstance(event, live.SessionStart):
            self._started = sent
        return type(event)(event_id=event.event_id, session=sent)

    def _definitions(self) -> list[dict[str, Any]]:
        return [self.dialect.function_tool(spec.name, spec.description, spec.parameters) for spec in self.tools]


# ---- the session object's parts (a dict as the wire gave it) ----
def delegation_type(session: dict[str, Any]) -> str | None:
    delegation = session.get("delegation")
    kind = delegation.get("type") if isinstance(delegation, dict) else None
    return kind if isinstance(kind, str) else None


def responses_tools(session: dict[str, Any]) -> list[Any] | None:
    delegation = session.get("delegation")
    responses = delegation.get(RESPONSES) if isinstance(delegation, dict) else None
    tools = responses.get("tools") if isinstance(responses, dict) else None
    return tools if isinstance(tools, list) else None


def _with_tools(session: dict[str, Any], tools: list[Any]) -> dict[str, Any]:
    """The session with `tools` as its Responses tools (a copy: the frame's own stays)."""
    delegation = session.get("delegation") if isinstance(session.get("delegation"), dict) else {}
    responses = delegation.get(RESPONSES) if isinstance(delegation.get(RESPONSES), dict) else {}
    return {**session, "delegation": {**delegation, RESPONSES: {**responses, "tools": tools}}}


def _name(tool: Any) -> str:
    name = tool.get("name") if isinstance(tool, dict) else None
    return name if isinstance(name, str) else ""


__all__ = ["CLIENT", "DECISIONS", "POLICY_VIOLATION", "RESPONSES", "DelegatedTools", "delegation_type", "responses_tools"]
