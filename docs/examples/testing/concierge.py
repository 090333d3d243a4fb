"""A GPT-Live delegate for the explorer's client-delegation example (concierge.script.json): the
relay answers each of the model's client delegations with it, working the request out from the
caller's last words, as GPT-Live's default mode asks of an application.

    relay explore docs/examples/testing/concierge.script.json --tools docs/examples/testing/concierge.py
"""

import asyncio

from relay.tools import Delegation, ToolResult, delegate

ORDERS = {"A1001": "shipped on Monday", "Z9": "not on file"}


@delegate(timeout=10, on_failure="I could not look that up.", on_delay=(800, "Still looking, one moment."))
async def concierge(delegation: Delegation) -> ToolResult:
    """Look up what the caller asked about: an order's status, or else the weather."""
    asked = delegation.last_user_text()
    await asyncio.sleep(1.5)   # the order system answers
    order = next((key for key in ORDERS if key.lower() in asked.lower()), None)
    if order is not None:
        return ToolResult(result={"order": order, "status": ORDERS[order]},
                          message=f"Tell the caller that order {order} is {ORDERS[order]}.")
    return ToolResult(result={"weather": "sunny"}, message="Tell the caller it is sunny.")
