"""Ask the relay about the weather, with the OpenAI SDK, and print what the model says."""

import asyncio
import os

from openai import AsyncOpenAI


async def main() -> None:
    relay = f"ws://127.0.0.1:{os.environ.get('RELAY_PORT', '8000')}/v1"
    client = AsyncOpenAI(api_key="unused", websocket_base_url=relay)   # the relay holds the real key
    async with client.realtime.connect(model="gpt-realtime") as connection:
        await connection.session.update(session={"type": "realtime", "output_modalities": ["text"]})
        await connection.conversation.item.create(item={
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "What's the weather in Oslo?"}]})
        await connection.response.create()
        async for event in connection:
            if event.type == "response.output_text.done":
                print(event.text)
            if event.type == "response.done" and event.response.output:
                if any(item.type == "message" for item in event.response.output):
                    break


asyncio.run(main())
