"""The refund tool of refunds.py, fixed: an order is refunded once, however often the model calls
the tool; a second call says the refund was made (docs/testing.md, the explorer's walk-through)."""

import asyncio

from bank import BANK

from relay.tools import tool


@tool(interruption="cancel", on_delay=(800, "One moment, I'm processing the refund."))
async def refund_order(order_id: str) -> str:
    """Refund an order in full."""
    if BANK.get(order_id):                          # refunded already: say so, pay nothing
        return f"order {order_id} was already refunded ({BANK[order_id][0]})"
    refund = f"rf_{order_id}_1"
    BANK[order_id] = [refund]
    await asyncio.sleep(1.5)                        # the payment provider confirms
    return f"refunded order {order_id} ({refund})"
