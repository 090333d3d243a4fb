from fastapi import FastAPI

from relay import tool
from relay.edges.sidecar import SidecarServer, SidecarServerConfig


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


webhooks = SidecarServer(SidecarServerConfig(
    tools=[get_weather],                    # or files and modules, as --tools takes them
    instructions="You answer the phone for a weather service.",
))
app = FastAPI(lifespan=webhooks.lifespan)   # attached calls live as long as the app does
app.mount("/relay", webhooks.app)           # POST /relay/webhooks/openai, GET /relay/healthz


@app.get("/")
def index() -> dict[str, str]:
    return {"service": "weather line"}
