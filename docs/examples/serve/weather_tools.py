from relay.tools import tool

@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny and 21 degrees in {city}"
