# my_tools.py
from typing import Literal

from pydantic import Field

from relay import ToolResult, tool


@tool
def get_weather(city: str = Field(description="City name"),
                unit: Literal["celsius", "fahrenheit"] = "celsius") -> dict:
    """Current weather for a city."""          # the description the model sees
    return {"city": city, "temp_c": 21}        # any JSON-able value, a str, or a ToolResult


@tool(timeout=10, on_delay=(800, "Still searching, one moment."),
      on_failure="Sorry, the booking system is down.")
async def book_table(restaurant: str, people: int) -> ToolResult:
    """Book a table at a restaurant."""
    if people > 12:
        raise ValueError("groups over 12 call the restaurant")   # becomes an error output
    return ToolResult(result={"booked": True}, message="Your table is booked.")
