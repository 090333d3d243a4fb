"""The application's tools, as the guide's tests use them."""

import asyncio

from relay import tool


@tool(on_delay=(800, "One moment, I'm checking the book."), timeout=5)
async def book_table(restaurant: str, people: int) -> dict:
    """Book a table (slow: the booking system takes its time)."""
    await asyncio.sleep(3)
    return {"restaurant": restaurant, "people": people, "booked": True}


@tool(interruption="cancel")
async def search_flights(origin: str, destination: str) -> dict:
    """Search flights; a caller who speaks over it no longer wants the results."""
    await asyncio.sleep(2)
    return {"flights": 2, "cheapest_eur": 98}
