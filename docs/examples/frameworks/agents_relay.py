# The OpenAI Agents SDK through relay serve: the agent's own tools run in your application, the
# relay's in the relay. relay_url is the relay's realtime URL, ws://HOST:PORT/v1/realtime.
from agents.realtime import RealtimeAgent, RealtimeRunner, RealtimeSession


async def relayed_session(agent: RealtimeAgent, relay_url: str, relay_token: str) -> RealtimeSession:
    return await RealtimeRunner(agent).run(model_config={
        "url": f"{relay_url}?model=gpt-realtime",  # a url of your own: the SDK adds no ?model=
        "api_key": relay_token,                    # the relay's client token, not the provider key
    })
