"""Voice-aware tool results, all in one place: what is *said* around a tool call.

- `message` on a ToolResult, `on_complete` / `on_failure` on the tool: what the assistant says.
- `on_start` and `on_delay=(ms, text)`: fillers spoken out of band while a tool works.
- `scheduling`: `when_idle` (default), `interrupt` (cut the assistant off), `silent` (no reply).
- async generators: streaming tools whose later values arrive as updates.
- `interruption`: what happens when the caller barges in while the tool runs.
"""

from __future__ import annotations

import asyncio

from relay import Interruption, Scheduling, ToolResult, tool


@tool(on_start="Let me pull up your account.", on_complete="I've updated your address.",
      on_failure="Sorry, I couldn't update the address.")
async def update_address(street: str, city: str) -> dict:
    """Change the customer's postal address."""
    await asyncio.sleep(0.05)
    if not street.strip():
        raise ValueError("street is empty")
    return {"street": street, "city": city, "saved": True}


@tool(on_delay=(1500, "This is taking a little longer than usual, thanks for your patience."),
      interruption=Interruption.FINISH_AND_SPEAK, timeout=20)
async def check_refund(order_id: str) -> ToolResult:
    """Ask the payment provider about a refund (slow)."""
    await asyncio.sleep(0.2)
    return ToolResult(result={"order_id": order_id, "refund": "approved", "amount_eur": 42.5},
                      message="Good news: your refund of 42 euros 50 was approved.")


@tool(scheduling=Scheduling.INTERRUPT)
def fraud_alert(account: str) -> str:
    """Report a suspicious transaction: the answer must be spoken at once."""
    return f"account {account} frozen"


@tool(scheduling="silent")
def log_sentiment(score: float) -> str:
    """Record how the caller feels (never spoken about)."""
    return "recorded"


@tool(interruption="cancel")
async def search_catalog(query: str) -> list[dict]:
    """Search the catalog; pointless to finish if the caller changed their mind."""
    await asyncio.sleep(0.1)
    return [{"sku": "K-100", "name": f"{query} (standard)"}, {"sku": "K-200", "name": f"{query} (deluxe)"}]


@tool
async def track_parcel(tracking_number: str):
    """Live parcel tracking: the first value answers at once, later ones are updates."""
    yield {"tracking_number": tracking_number, "status": "at the depot"}
    await asyncio.sleep(0.05)
    yield {"tracking_number": tracking_number, "status": "out for delivery"}
    await asyncio.sleep(0.05)
    yield {"tracking_number": tracking_number, "status": "delivered"}
