"""The provider's own MCP approval requests the operator's policy answers (OpenAI family).

A session whose provider runs MCP tools itself (`{"type": "mcp"}` tools) gets `mcp_approval_request`
items when a tool needs approval. These are not function calls: no handler runs for them. When
the operator set a policy (`--mcp-approve`, `--mcp-deny`: relay.tools.mcp_config.ApprovalPolicy),
a request it decides is the relay's to answer: hidden from a proxied client (which must not
answer it too), answered once its response is done with an `mcp_approval_response` item, and
followed by one `response.create` so that the model goes on (the sequencer decides when it may
go). A request the policy does not decide is left to the client, as without the relay.
"""

from __future__ import annotations

from relay.dialects import items as wire
from relay.dialects.openai import MCP_APPROVAL_REQUEST
from relay.engine.actions import Notice
from relay.engine.context import OpenAIContext
from relay.engine.conversation import ItemRecord, ResponseRecord
from relay.tools.mcp_config import ApprovalPolicy

APPROVAL_REQUEST = MCP_APPROVAL_REQUEST


class McpApprovals:
    """One session's answers to the provider's MCP approval requests."""

    def __init__(self, ctx: OpenAIContext, policy: ApprovalPolicy | None) -> None:
        self.ctx = ctx
        self.policy = policy
        self.decided: dict[str, bool] = {}     # request item id -> approve
        self.answered: set[str] = set()

    def decides(self, record: ItemRecord) -> bool:
        """Whether the relay answers this item (an approval request its policy decides)."""
        if self.policy is None or record.type != APPROVAL_REQUEST:
            return False
        if record.id not in self.decided:
            label = (record.extra or {}).get("server_label")
            decision = self.policy.decide(label, record.name)
            if decision is None:
                return False
            self.decided[record.id] = decision
        return True

    def response_done(self, response: ResponseRecord) -> None:
        """Answer the decided requests of a response that is over."""
        conversation = self.ctx.conversation
        for item_id in response.output_item_ids:
            record = conversation.item(item_id)
            if record is not None:
                self.item_done(record, response_over=True)

    def item_done(self, record: ItemRecord, *, response_over: bool = False) -> None:
        """A request answered now: one outside any response, or one whose response is over."""
        if record.id in self.answered or not self.decides(record):
            return
        if record.response_id is not None and not response_over:
            return   # an answer now would land inside a response still writing
        if not self.ctx.upstream_connected or self.ctx.closed:
            return
        self._answer(record, self.decided[record.id])

    def _answer(self, record: ItemRecord, approve: bool) -> None:
        ctx = self.ctx
        self.answered.add(record.id)
        item_id = ctx.new_id("i")
        ctx.origins.relay_sent(item_id)
        ctx.send_tagged(ctx.codec.approval_create(ctx.new_event_id(), item_id, record.id, approve,
                                                  None if approve else "refused by the relay's policy"), "approval")
        label = (record.extra or {}).get("server_label")
        ctx.emit(Notice("mcp_approval", {"server_label": label, "name": record.name, "approve": approve,
                                         "request_id": record.id}))
        ctx.sequencer.request_follow_up([], interrupt=False, messages=[], confirm={item_id}, now=ctx.now)
