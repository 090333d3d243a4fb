"""A refund tool as first written, for the explorer's walk-through in docs/testing.md: when the
caller barges in while it runs, the relay cancels it (`interruption="cancel"`), the money has
left already, and the model, asked again, calls it again: the order is refunded twice."""

import asyncio

from bank import BANK

from relay.tools import tool


@tool(interruption="cancel", on_delay=(800, "One moment, I'm processing the refund."))
async def refund_order(order_id: str) -> str:
    """Refund an order in full."""
    refund = f"rf_{order_id}_{len(BANK.get(order_id, [])) + 1}"
    BANK.setdefault(order_id, []).append(refund)   # the money leaves here
    await asyncio.sleep(1.5)                        # the payment provider confirms
    return f"refunded order {order_id} ({refund})"
