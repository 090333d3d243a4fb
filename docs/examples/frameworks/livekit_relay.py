# LiveKit Agents through relay serve: AgentSession(llm=relayed_model(...)) as with any model.
# relay_url is the relay's realtime URL, ws://HOST:PORT/v1/realtime.
from livekit.plugins import openai


def relayed_model(relay_url: str, relay_token: str) -> openai.realtime.RealtimeModel:
    return openai.realtime.RealtimeModel(
        base_url=relay_url.removesuffix("/realtime"),  # LiveKit adds /realtime?model=
        api_key=relay_token,                           # the relay's client token, not the provider key
    )
