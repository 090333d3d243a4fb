"""The OpenAI Agents SDK (`openai-agents`: `RealtimeAgent`, `RealtimeRunner`) as the relay's client,
unchanged: the agent has one tool of its own, `get_time`, and knows nothing of the relay's tools.
Prints what the SDK gives the application (plan.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import function_tool
from agents.realtime import RealtimeAgent

from plan import Plan, emit, tone
from agents_relay import relayed_session


@function_tool
def get_time(city: str) -> str:
    """The local time in a city."""
    emit("tool", name="get_time", arguments={"city": city})
    return f"noon in {city}"


def message_text(item: Any) -> str:
    return "".join((getattr(part, "transcript", None) or getattr(part, "text", None) or "")
                   for part in getattr(item, "content", []))


async def main(plan: Plan) -> None:
    agent = RealtimeAgent(name="assistant", instructions="You are helpful.", tools=[get_time])
    session = await relayed_session(agent, plan.url, plan.token)
    reported: set[str] = set()
    history: list[Any] = []
    async with session:
        emit("connected")
        for text in plan.first_turns():
            emit("sent", text=text)
            await session.send_message(text)
        if plan.audio_in:
            await session.send_audio(tone())
            emit("audio_sent")
        async with asyncio.timeout(plan.timeout):
            async for event in session:
                if event.type == "audio":
                    plan.audio_bytes += len(event.audio.data)
                elif event.type == "error":
                    plan.error(str(event.error))
                elif event.type in ("history_added", "history_updated"):
                    if event.type == "history_updated":
                        history = event.history
                    items = [event.item] if event.type == "history_added" else event.history
                    for item in items:
                        text = message_text(item)
                        if (getattr(item, "role", None) == "assistant" and getattr(item, "status", None) == "completed"
                                and text and item.item_id not in reported):
                            reported.add(item.item_id)
                            for turn in plan.hear(text):
                                emit("sent", text=turn)
                                await session.send_message(turn)
                if plan.finished():
                    break
        emit("audio_out", bytes=plan.audio_bytes)
        emit("history", items=[{"role": getattr(item, "role", item.type), "text": message_text(item)}
                               for item in history])
    emit("done")


if __name__ == "__main__":
    asyncio.run(main(Plan.from_argv()))
