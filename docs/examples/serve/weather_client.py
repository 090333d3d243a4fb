import asyncio
import os

from openai import AsyncOpenAI


async def main() -> None:
    # The relay token is the client's key; a relay without one (loopback only) takes any key.
    client = AsyncOpenAI(api_key=os.environ.get("RELAY_AUTH_TOKEN", "no-token"),
                         websocket_base_url="ws://127.0.0.1:8000/v1")
    async with client.realtime.connect(model="gpt-realtime") as connection:
        await connection.session.update(session={
            "type": "realtime", "output_modalities": ["text"], "instructions": "Be brief."})
        await connection.conversation.item.create(item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "What's the weather in Paris?"}]})
        await connection.response.create()
        async for event in connection:
            if event.type == "response.output_text.done":
                print(event.text)
            elif event.type == "response.done":
                # the relay's own responses say so in their metadata: "follow_up" or "filler"
                if (event.response.metadata or {}).get("relay") == "follow_up":
                    break


asyncio.run(main())
