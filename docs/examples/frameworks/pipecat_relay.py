# pipecat through relay serve: the service goes into the pipeline as with OpenAI itself.
# relay_url is the relay's realtime URL, ws://HOST:PORT/v1/realtime.
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService


def relayed_service(relay_url: str, relay_token: str) -> OpenAIRealtimeLLMService:
    return OpenAIRealtimeLLMService(
        base_url=relay_url,      # pipecat adds ?model=
        api_key=relay_token,     # the relay's client token, not the provider key
        settings=OpenAIRealtimeLLMService.Settings(model="gpt-realtime"),
    )
