"""Example tools for the demo: realistic, offline, with bundled data.

Run them with `relay serve --tools relay/examples/tools.py` from a checkout, or `--tools
relay.examples.tools` wherever relay is installed (the package ships this file; see `relay demo`).
Each tool is a plain function with type hints; `@tool` turns the hints into the JSON Schema the
model sees.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field

from relay import ToolResult, tool

DATA = Path(__file__).resolve().parent / "data"


@lru_cache(maxsize=1)
def _weather_table() -> dict[str, dict]:
    return json.loads((DATA / "weather.json").read_text())


@lru_cache(maxsize=1)
def _orders() -> sqlite3.Connection:
    # check_same_thread=False: sync tools run in worker threads; the database is read-only here.
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript((DATA / "orders.sql").read_text())
    db.row_factory = sqlite3.Row
    return db


@tool
def get_weather(
    city: str = Field(description="City name, e.g. 'Paris'"),
    unit: Literal["celsius", "fahrenheit"] = "celsius",
) -> dict:
    """Current weather for a city."""
    row = _weather_table().get(city.strip().lower())
    if row is None:
        raise LookupError(f"no weather data for {city!r}")
    report = dict(row)
    if unit == "fahrenheit":
        report["temp_f"] = round(report.pop("temp_c") * 9 / 5 + 32, 1)
    return report


@tool(on_failure="I couldn't find that order. Could you read me the order number again?")
def lookup_order(order_id: str = Field(description="Order number, like A1001")) -> dict:
    """Status, carrier and delivery date of a customer's order."""
    row = _orders().execute("SELECT * FROM orders WHERE order_id = ?", (order_id.strip().upper(),)).fetchone()
    if row is None:
        raise LookupError(f"order {order_id} not found")
    return dict(row)


@tool(timeout=10, on_delay=(400, "I'm still searching for flights, one moment."))
async def search_flights(
    origin: str = Field(description="Departure city"),
    destination: str = Field(description="Arrival city"),
) -> ToolResult:
    """Search tomorrow's flights between two cities (slow: it queries several airlines)."""
    await asyncio.sleep(0.8)
    flights = [
        {"flight": "RL 204", "departs": "07:45", "arrives": "10:05", "price_eur": 129},
        {"flight": "RL 318", "departs": "13:20", "arrives": "15:40", "price_eur": 98},
    ]
    return ToolResult(
        result={"origin": origin, "destination": destination, "flights": flights},
        message=f"I found {len(flights)} flights from {origin} to {destination}; the cheapest is 98 euros.",
    )
