# LiveKit Agents' GPT-Live model through relay serve: AgentSession(llm=relayed_live_model(...)).
# relay_url is the relay's GPT-Live URL, ws://HOST:PORT/v1/live/sessions.
from livekit.plugins import openai


def relayed_live_model(relay_url: str, relay_token: str) -> openai.realtime.GPTLiveModel:
    return openai.realtime.GPTLiveModel(
        base_url=relay_url.removesuffix("/live/sessions"),  # LiveKit adds /live/sessions
        api_key=relay_token,        # the relay's client token, not the provider key
        delegation="responses",     # the backend runs the tools: the relay's and the agent's own
    )
