"""What a proxied client sees of the relay's tools (OpenAI family): their definitions join the
session the client sets up, and nothing of them comes back.

The relay's tools are the relay's business: a client that saw them could answer their calls or
define them again. `ClientView` keeps the rules of both directions in one place:
- toward the upstream: the relay's tools are declared (added to the client's `session.update`,
  to a `response.create` that lists tools, or with a `session.update` of the relay's own); a
  client that defines one of them, answers one of their calls or makes up a call of one (as an
  item it creates or in a `response.create`'s `input`) gets an error event instead;
- toward the client: `session.created/updated` lose the relay's tools; the relay's items and the
  items of relay calls are hidden; `previous_item_id` skips hidden items; `response.*` events
  lose hidden output items and the call ids of the relay's metadata;
- the client's own `response.create`: held while the relay works (`relay_at_work`), then the
  first goes up and the rest are refused as the provider would (`release_held_creates`; the
  held creates and their states are `holding.HeldCreates`).
Rewriting methods answer `SAME` (forward the frame as it came), None (hide it) or a new event.
The view acts through the session's context only (`context.OpenAIContext`); whose each item is
is the context's `origins` (`conversation.ItemOrigins`).
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from relay.dialects import items as wire
from relay.dialects.openai import FUNCTION_CALL, FUNCTION_CALL_OUTPUT
from relay.engine.actions import SendUpstream
from relay.engine.approving import McpApprovals
from relay.engine.calls import CallEntry, Owner
from relay.engine.context import OpenAIContext
from relay.engine.conversation import ItemRecord
from relay.engine.holding import HeldCreates
from relay.engine.limits import MAX_HELD_CHARS, MAX_HELD_CREATES, MAX_PENDING_CLIENT_ID_CHARS, MAX_PENDING_CLIENT_ITEMS
from relay.engine.sequencer import ACTIVE_RESPONSE_CODE, META_CALLS, META_KIND

SAME: Any = object()
FORGED_CALLS_KEPT = 64   # the call ids of refused made-up calls kept, so that their outputs are refused too
_SESSION_CREATED = frozenset({wire.event_name(wire.SessionCreated)})


class ClientView:
    """The relay's tools as one OpenAI-family session's client may see them."""

    def __init__(self, ctx: OpenAIContext) -> None:
        self.ctx = ctx
        config = ctx.config
        self.hiding = config.hide_tool_events and config.has_client   # there is someone to hide from
        self.tools_declared = False
        self._opening_left = set(ctx.dialect.opening_events)   # opening events not seen yet
        self._session_seen = False
        self._declaring = False   # the relay's declaration went up and no session event showed it yet
        self._crossed: list[Any] | None = None   # the other party's tools as an update of theirs set them meanwhile
        self.held = HeldCreates(strict=config.strict, on_refused=ctx.refused_step)   # client creates held back
        self.approvals: McpApprovals | None = None   # the MCP approval requests the relay answers (the engine's)
        self.forged_calls: dict[str, None] = {}   # call ids of the relay-tool calls a client made up (the latest)

    def classify(self, record: ItemRecord) -> None:
        """Decide who produced an item and whether the client may see it."""
        self.ctx.origins.classify(record)
        if self.hiding:
            record.hidden = record.origin == "relay" or self._is_relay_call_item(record)

    def is_relay_tool(self, definition: Any) -> bool:
        return isinstance(definition, dict) and definition.get("name") in self.ctx.tools

    # ==== declaring the relay's tools ===================================================
    def may_declare(self) -> bool:
        ctx = self.ctx
        return not self.tools_declared and ctx.config.declare_tools and len(ctx.tools) > 0

    def declare(self, current_tools: Any) -> None:
        """Add the relay's tools to the session with one `session.update`, keeping the tools
        another party declared (only ours are replaced)."""
        ctx = self.ctx
        others = [t for t in current_tools or [] if not self.is_relay_tool(t)]
        ctx.send_tagged(ctx.codec.session_update(
            ctx.dialect, {"tools": others + ctx.dialect.tool_definitions(ctx.tools)}, ctx.new_event_id()))
        self.tools_declared = self._declaring = True
        self._crossed = None

    def session_said(self, event_type: str, session: dict[str, Any]) -> None:
        """A session event (`session.created` or `.updated`) came: the tools it shows."""
        self.keep_declared(session, created=event_type in _SESSION_CREATED)   # (first: the opening's own is `opening`'s)
        self._session_seen = True
        self.opening(event_type)

    def opening(self, event_type: str) -> None:
        """An event of the session's opening (or a session event) came: the relay declares its
        tools once the opening is over (every `opening_events` seen; a sidecar joining a live
        session declares at its first session event, as soon as the opening's other events, if
        any, came), with the tools the session already has."""
        left = self._opening_left
        left.discard(event_type)
        if not self._session_seen or not self.may_declare():
            return
        if not left or (self.ctx.config.mode == "sidecar" and left <= _SESSION_CREATED):
            self.declare(self.ctx.conversation.session.get("tools"))

    def keep_declared(self, session: dict[str, Any], created: bool) -> None:
        """A sidecar that declared its tools keeps them in the session: the other party's
        `session.update` that sets `tools` replaces the list (the relay sees it only in the
        `session.updated` that follows), and a new socket's `session.created` shows whether a
        declaration sent just before a drop took. Tools missing there are declared again, with the
        other party's kept. While the relay's own update is on its way (no session event showed it
        yet, on the same socket) nothing is sent, but an update of the other party's applied first
        is noted: the relay's, built on the tools before it, replaces it once applied, and the
        relay then declares again with the other party's tools as they had set them. (A proxy's
        client updates are amended on their way up instead.)"""
        ctx = self.ctx
        if not self.tools_declared or ctx.config.has_client or not ctx.config.declare_tools:
            return
        tools = session.get("tools")
        if not isinstance(tools, list):
            return
        others = [t for t in tools if not self.is_relay_tool(t)]
        if len(tools) - len(others) == len(ctx.tools):
            crossed, self._declaring, self._crossed = self._crossed, False, None
            if crossed is not None and crossed != others:
                self.declare(crossed)
        elif created or not self._declaring:
            self.declare(tools)
        else:
            self._crossed = others

    def client_event(self, event: wire.Event | wire.Unknown) -> Any:
        """A client event on its way up, as the relay's tools require it."""
        if isinstance(event, wire.SessionUpdate):
            return self.session_update(event)
        if isinstance(event, wire.ResponseCreate):
            return self.response_create(event)
        if isinstance(event, wire.ItemCreate):
            return self.item_create(event)
        return SAME

    def session_update(self, event: wire.SessionUpdate) -> Any:
        """A client's `session.update`: refused if it defines a relay tool; the relay's tools are
        added to the tools it sets (and to its first update, if none were declared yet)."""
        ctx = self.ctx
        session = event.session
        if not isinstance(session, dict):
            return SAME
        ours = ctx.config.declare_tools and len(ctx.tools)
        tools = session.get("tools")
        if ours and self._refuse_relay_tool_names(tools, event, "session"):
            return None
        ctx.conversation.client_session.update(session)   # what a resumed session sets again
        if not ours:
            return SAME
        if tools is None:
            if self.tools_declared:
                return SAME
            tools = []
        elif not isinstance(tools, list):
            return SAME
        self.tools_declared = True
        return replace(event, session={**session, "tools": list(tools) + ctx.dialect.tool_definitions(ctx.tools)})

    def seed(self, items: list[dict[str, Any]], session: dict[str, Any]) -> None:
        """A resumed session's start (relay/edges/resume.py): the client's session configuration
        as it last set it goes up as its update would (the relay's tools added), then the
        conversation so far in order, each item created as the relay's own, so that the client,
        which has them, is not shown them again."""
        ctx = self.ctx
        if session:
            update = wire.SessionUpdate(event_id=ctx.new_event_id(), session=session)
            shown = self.session_update(update)
            if shown is not None:
                ctx.write_upstream(update if shown is SAME else shown)
        for item in items:
            ctx.origins.relay_sent(item["id"])
            ctx.write_upstream(wire.ItemCreate(event_id=ctx.new_event_id(), item=item))

    def response_create(self, event: wire.ResponseCreate) -> Any:
        """A client's `response.create`: tools it lists for this response get the relay's too.
        It waits (held by the sequencer) while a response is active or on its way, or relay
        calls are still to be answered: forwarded then, it would meet an active response (the
        relay's calls make responses last longer than the client expects), or the model would
        answer without the relay's results. `release_held_creates` decides what becomes of
        it."""
        ctx = self.ctx
        options = event.response
        rewritten = SAME
        if isinstance(options, dict) and isinstance(options.get("input"), list):
            for index, item in enumerate(options["input"]):
                if self._refuse_forgery(item, event, f"response.input[{index}]"):
                    return None
        if isinstance(options, dict) and isinstance(options.get("tools"), list) and len(ctx.tools):
            if self._refuse_relay_tool_names(options["tools"], event, "response"):
                return None
            event = rewritten = replace(
                event, response={**options, "tools": options["tools"] + ctx.dialect.tool_definitions(ctx.tools)})
        event_id = event.event_id if isinstance(event.event_id, str) else None
        if ctx.config.has_client and (ctx.ledger.unanswered() or ctx.sequencer.busy(ctx.now)):
            if not self.held.has_room(event_id):
                ctx.limit_reached("response.create events held while a response is active",
                                  f"{MAX_HELD_CREATES} events or {MAX_HELD_CHARS:,} characters", event_id)
                return None
            self.held.hold(ctx.codec.encode(event, ctx.dialect), event_id, for_relay=self.relay_at_work(), now=ctx.now)
            return None
        ctx.sequencer.client_create_forwarded(event_id, ctx.now, answers_pending=False)
        return rewritten

    def relay_at_work(self) -> bool:
        """Whether the relay's own work keeps the conversation busy: its calls are unanswered, its
        create is on its way or its response active, an active response holds its calls, or the
        client's create it held back now meets what the client added since (`HeldCreates.collides`)."""
        ctx = self.ctx
        sequencer, ledger = ctx.sequencer, ctx.ledger
        if ledger.unanswered() or sequencer.in_flight() or self.held.collides():
            return True
        for response_id, creator in sequencer.active_creators():
            response = ctx.conversation.responses.get(response_id)
            if creator == "relay" or (response is not None and any(
                    e is not None and e.owner is Owner.RELAY for e in map(ledger.by_item, response.output_item_ids))):
                return True
        return False

    def release_held_creates(self) -> None:
        """Held client creates once no response is active or on its way and every relay output
        is in: when the relay's work held them, the first goes up (before the sequencer's own
        follow-up, which it then answers for) and the rest are refused as the provider refuses a
        create that meets an active response; when only someone else's response held them, all
        are refused so, exactly as without the relay.

        A client waits on its own create, some with a timeout of their own, so the relay's
        running tools hold it for `EngineConfig.hold_limit` at the most: then, once no response
        is active, the first goes up without their outputs (it answers the user's new turn) and
        the outputs follow when the tools end, with their own follow-up, one response at a time."""
        held = self.held
        if held.idle():
            return
        ctx = self.ctx
        sequencer = ctx.sequencer
        if not held.waiting():   # only a late create's response to see out
            if not sequencer.busy(ctx.now):
                held.settle()
            return
        if held.behind_others() and self.relay_at_work():
            held.held_for_relay()
        if not ctx.upstream_connected or sequencer.busy(ctx.now):
            return
        outputs_in = not ctx.ledger.unanswered()
        if not outputs_in and not self._held_too_long():
            return
        first, refused = held.release()
        if first is not None:
            frame, event_id = first
            if not outputs_in:   # the create answers the user, not the outputs still to come
                self._asked_before_outputs()
            # with the outputs in, it answers them: the follow-ups waiting are delegated to it
            sequencer.client_create_forwarded(event_id, ctx.now, answers_pending=outputs_in)
            ctx.emit(SendUpstream(frame))
        for event_id in refused:
            ctx.client_error(ACTIVE_RESPONSE_CODE, "Conversation already has an active response in progress: "
                             "this response.create was not sent (the relay held it while a response was "
                             "active and forwarded the first one held with it, if any)", event_id)

    def _asked_before_outputs(self) -> None:
        """Mark the responses whose relay calls still run when a held create goes up at the hold
        limit: the client's ask for them is spent, so their outputs get the relay's own follow-up
        (`injection.Injector`), even beside the client's own calls."""
        responses = self.ctx.conversation.responses
        for entry in self.ctx.ledger.unanswered():
            response = responses.get(entry.response_id or "")
            if response is not None:
                response.asked_before_outputs = True

    def hold_deadline(self) -> float | None:
        """When held creates stop waiting for the relay's running tools, while that is still to
        come (None: none waits so, or the time has passed and they wait only for a response to
        end, which is an input of its own)."""
        deadline = self._hold_ends()
        return deadline if deadline is not None and deadline > self.ctx.now else None

    def held_past_limit(self) -> bool:
        """Whether a client's create waits longer than the hold limit allows: held for the relay's
        running tools past `hold_limit` while no response is active or on its way and the
        upstream is there (the bound docs/guarantees.md promises; the test drivers check it after
        every step)."""
        ctx = self.ctx
        ends = self._hold_ends()
        return (ends is not None and ctx.now >= ends and self.held.waiting() and ctx.upstream_connected
                and not ctx.sequencer.busy(ctx.now))

    def _hold_ends(self) -> float | None:
        limit, since = self.ctx.config.hold_limit, self.held.since
        if limit is None or since is None or not self.ctx.ledger.unanswered():
            return None
        return since + limit

    def _held_too_long(self) -> bool:
        ends = self._hold_ends()
        return ends is not None and self.ctx.now >= ends

    def item_create(self, event: wire.ItemCreate) -> Any:
        """A client's `conversation.item.create`: its item is the client's; an output for a
        relay call, or a call of a relay tool, is refused."""
        ctx = self.ctx
        item = event.item
        if not isinstance(item, dict):
            return SAME
        if self._refuse_forgery(item, event, "item"):
            return None
        if not ctx.origins.has_room():
            ctx.limit_reached("items the client created that are not in the conversation yet",
                              f"{MAX_PENDING_CLIENT_ITEMS} items or {MAX_PENDING_CLIENT_ID_CHARS:,} characters of ids",
                              event.event_id)
            return None
        ctx.origins.client_sent(item)
        self.held.client_added_item()
        return SAME

    def _refuse_forgery(self, item: Any, event: wire.Event, where: str) -> bool:
        """Refuse (`relay_owned_call`) a client's `item` that only the model or the relay may make:
        an output for a relay call (or, where the wire names it, for a relay tool), or a call of a
        relay tool, whose id is kept so that an output for it is refused too."""
        if not isinstance(item, dict):
            return False
        ctx, kind, call_id, name = self.ctx, item.get("type"), item.get("call_id"), item.get("name")
        if kind == FUNCTION_CALL_OUTPUT:
            entry = ctx.ledger.get(call_id)
            if entry is not None and entry.owner is Owner.RELAY:
                message = f"call {entry.call_id} ({entry.name}) belongs to a relay tool; the relay sends its output"
            elif (entry is None and isinstance(name, str) and name in ctx.tools) or (
                    isinstance(call_id, str) and call_id in self.forged_calls):
                message = f"call {call_id} is of a relay tool; the relay sends the outputs of its calls"
            else:
                return False
            ctx.client_error("relay_owned_call", message, event.event_id, param=f"{where}.call_id")
            return True
        if kind == FUNCTION_CALL and isinstance(name, str) and name in ctx.tools:
            if isinstance(call_id, str):
                self.forged_calls[call_id] = None
                if len(self.forged_calls) > FORGED_CALLS_KEPT:
                    del self.forged_calls[next(iter(self.forged_calls))]
            ctx.client_error("relay_owned_call", f"{name} is a relay tool: only the model calls it, and the relay "
                             "answers", event.event_id, param=f"{where}.name")
            return True
        return False

    def _refuse_relay_tool_names(self, tools: Any, event: wire.Event, where: str) -> bool:
        if not isinstance(tools, list):
            return False
        clashes = [t.get("name") for t in tools if self.is_relay_tool(t)]
        if not clashes:
            return False
        names = ", ".join(repr(n) for n in clashes)
        self.ctx.client_error("relay_tool_redefined",
                              f"{where} defines {names}, which the relay provides; remove "
                              f"{'it' if len(clashes) == 1 else 'them'} from your tools",
                              event.event_id, param=f"{where}.tools")
        return True

    # ==== what the client sees ==========================================================
    def session_event(self, event: wire.SessionCreated | wire.SessionUpdated, session: dict[str, Any]) -> Any:
        """`session.created/updated` without the relay's tools."""
        if not self.ctx.config.hide_tool_events:
            return SAME
        tools = session.get("tools")
        if not isinstance(tools, list) or not any(self.is_relay_tool(t) for t in tools):
            return SAME
        visible = [t for t in tools if not self.is_relay_tool(t)]
        return replace(event, session={**session, "tools": visible})

    def _is_relay_call_item(self, record: ItemRecord) -> bool:
        if self.approvals is not None and self.approvals.decides(record):
            return True   # the relay answers it: the client must not answer it too
        ledger = self.ctx.ledger
        if record.type == FUNCTION_CALL:
            entry = ledger.get(record.call_id)
            if entry is not None:
                return entry.owner is Owner.RELAY
            return record.origin != "client" and record.name in self.ctx.tools
        if record.type == FUNCTION_CALL_OUTPUT:
            entry = ledger.get(record.call_id)
            return entry is not None and entry.owner is Owner.RELAY and record.origin != "client"
        return False

    def hides_call(self, entry: CallEntry) -> bool:
        return self.hiding and entry.owner is Owner.RELAY

    def item_event(self, event: wire.ItemAdded | wire.ItemDone, record: ItemRecord) -> Any:
        if record.hidden:
            return None
        return self.with_visible_predecessor(event)

    def with_visible_predecessor(self, event: wire.ItemAdded | wire.ItemDone | wire.InputAudioCommitted) -> Any:
        """Rewrite `previous_item_id` when it names an item the client never saw: the nearest
        before it that the client saw; for one the relay never placed (its `conversation.item.added`
        lost with a drop: it was the newest), the newest the client saw."""
        if not self.hiding:
            return SAME
        conversation = self.ctx.conversation
        previous_id = event.previous_item_id
        previous = conversation.item(previous_id)
        if previous is None:   # unknown, or forgotten (a history limit): what it was is noted
            forgotten = conversation.forgotten
            if not isinstance(previous_id, str) or forgotten.get(previous_id, previous_id) == previous_id:
                return SAME
            return replace(event, previous_item_id=forgotten[previous_id])
        if not previous.hidden:
            return SAME
        if previous.in_conversation:
            return replace(event, previous_item_id=conversation.visible_predecessor(previous.id))
        own = event.item_id if isinstance(event, wire.InputAudioCommitted) else (event.item or {}).get("id")
        return replace(event, previous_item_id=conversation.newest_visible(own))

    def response_event(self, event: wire.ResponseCreated | wire.ResponseDone, data: dict[str, Any]) -> Any:
        """`response.created` / `response.done` as the client may see them: without hidden
        items, and the relay's own responses without the ids of the hidden calls they answer
        (kept in their metadata for the ledger and for replay)."""
        view = SAME
        metadata = data.get("metadata")
        if self.hiding and isinstance(metadata, dict) and META_CALLS in metadata and META_KIND in metadata:
            data = {**data, "metadata": {k: v for k, v in metadata.items() if k != META_CALLS}}
            view = replace(event, response=data)
        output = data.get("output")
        if not (self.hiding and isinstance(output, list)):
            return view
        visible = [o for o in output if not self._hidden_item(o)]
        if len(visible) == len(output):
            return view
        return replace(event, response={**data, "output": visible})

    def _hidden_item(self, item: Any) -> bool:
        if not isinstance(item, dict):
            return False
        record = self.ctx.conversation.item(item.get("id"))
        if record is not None:
            return record.hidden
        if item.get("type") != FUNCTION_CALL:   # forgotten (a history limit): a call by its entry
            return False
        return self.ctx.ledger.owner_of(item.get("call_id")) is Owner.RELAY
