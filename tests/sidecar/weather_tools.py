"""The tool the CLI tests load with `--tools`."""

from __future__ import annotations

from relay.tools import tool


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"cloudy in {city}"
