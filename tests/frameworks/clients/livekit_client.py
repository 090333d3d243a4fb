"""LiveKit Agents (livekit-agents 1.8.9, its OpenAI plugin's `RealtimeModel(base_url=...)`) as the
relay's client, unchanged and without a room: an `AgentSession` whose audio goes to a sink that
plays instantly. The
agent has one tool of its own, `get_time`, and knows nothing of the relay's tools. Prints what
LiveKit gives the application (plan.py). With the option `api: run`, the first turns go through
`session.run()`, and its result is printed too (`run_result`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from livekit import rtc
from livekit.agents import Agent, AgentSession, function_tool
from livekit.agents.voice import io
from livekit.plugins import openai

from plan import AUDIO_RATE, Plan, emit, tone
from livekit_relay import relayed_model


class Assistant(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You are helpful.")

    @function_tool
    async def get_time(self, city: str) -> str:
        """The local time in a city."""
        emit("tool", name="get_time", arguments={"city": city})
        return f"noon in {city}"


class Speaker(io.AudioOutput):
    """Plays what it is given at once: counts the bytes, reports each segment played out."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(label="speaker", capabilities=io.AudioOutputCapabilities(pause=False))
        self.plan = plan
        self.position = 0.0

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        self.plan.audio_bytes += len(frame.data) * 2
        self.position += frame.duration

    def flush(self) -> None:
        super().flush()
        self.on_playback_finished(playback_position=self.position, interrupted=False)
        self.position = 0.0

    def clear_buffer(self) -> None:
        pass


class Microphone(io.AudioInput):
    """A second of speech, then silence until the session ends."""

    def __init__(self) -> None:
        super().__init__(label="microphone")
        samples = tone()
        step = AUDIO_RATE // 50 * 2     # 20 ms frames
        self.frames = [rtc.AudioFrame(samples[i:i + step], AUDIO_RATE, 1, step // 2)
                       for i in range(0, len(samples), step)]
        self.sent = False

    async def __anext__(self) -> rtc.AudioFrame:
        if self.frames:
            return self.frames.pop(0)
        if not self.sent:
            self.sent = True
            emit("audio_sent")
        await asyncio.Event().wait()
        raise StopAsyncIteration


def message_text(item: Any) -> str:
    return item.text_content or "" if item.type == "message" else ""


async def with_agent_session(plan: Plan, model: openai.realtime.RealtimeModel) -> None:
    session = AgentSession(llm=model)
    finished = asyncio.Event()

    def say(text: str) -> None:
        emit("sent", text=text)
        session.generate_reply(user_input=text)

    @session.on("conversation_item_added")
    def _added(event: Any) -> None:
        if event.item.type == "message" and event.item.role == "assistant" and message_text(event.item):
            for text in plan.hear(message_text(event.item)):
                say(text)
            if plan.finished():
                finished.set()

    @session.on("error")
    def _error(event: Any) -> None:
        plan.error(str(getattr(event.error, "error", None) or event.error))
        if plan.finished():
            finished.set()

    session.output.audio = Speaker(plan)
    if plan.audio_in:
        session.input.audio = Microphone()
    await session.start(Assistant(), record=False)
    emit("connected")
    for text in plan.first_turns():
        if plan.options.get("api") == "run":
            # LiveKit's own test surface: run() gives what the turn produced, as LiveKit sees it
            emit("sent", text=text)
            result = await session.run(user_input=text)
            emit("run_result", messages=[message_text(event.item) for event in result.events
                                         if event.type == "message" and event.item.role == "assistant"])
        else:
            say(text)
    await finish(plan, session, finished)


async def finish(plan: Plan, session: AgentSession, finished: asyncio.Event) -> None:
    """Once the plan is fulfilled: what LiveKit played and kept, then the session closed."""
    await asyncio.wait_for(finished.wait(), plan.timeout)
    emit("audio_out", bytes=plan.audio_bytes)
    emit("history", items=[{"role": getattr(item, "role", item.type), "text": message_text(item)}
                           for item in session.history.items])
    await session.aclose()


async def run_model(plan: Plan, model: Any, session: Callable[[Plan, Any], Awaitable[None]]) -> None:
    """The plan through `session` on `model`, the model closed after, then `done`."""
    try:
        await session(plan, model)
    finally:
        await model.aclose()
    emit("done")


async def main(plan: Plan) -> None:
    await run_model(plan, relayed_model(plan.url, plan.token), with_agent_session)


if __name__ == "__main__":
    asyncio.run(main(Plan.from_argv()))
