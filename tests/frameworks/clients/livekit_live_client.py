"""LiveKit Agents' GPT-Live model (livekit-plugins-openai's `GPTLiveModel`, Responses delegation)
as the relay's client, unchanged and without a room: an `AgentSession` with one tool of its own,
`get_time`, whose microphone streams silence in real time (GPT-Live's timeline advances with the
input audio, so the model speaks only while audio flows) and whose speaker plays at once. The
caller's words are played by the test on the mock (`user_turn`). Prints what LiveKit gives the
application (plan.py): each stretch of the model's speech as `heard`, its own tool runs as `tool`."""

from __future__ import annotations

import asyncio
from typing import Any

from livekit import rtc
from livekit.agents import AgentSession
from livekit.agents.voice import io

from livekit_client import Assistant, Speaker, finish, run_model
from livekit_live_relay import relayed_live_model
from plan import AUDIO_RATE, Plan, emit

FRAME_SECONDS = 0.1


class SilentMicrophone(io.AudioInput):
    """Silence, 100 ms at a time, at the pace of real audio: what an open microphone sends."""

    def __init__(self) -> None:
        super().__init__(label="microphone")
        samples = int(AUDIO_RATE * FRAME_SECONDS)
        self.frame = rtc.AudioFrame(bytes(samples * 2), AUDIO_RATE, 1, samples)

    async def __anext__(self) -> rtc.AudioFrame:
        await asyncio.sleep(FRAME_SECONDS)   # the microphone's clock, not a wait for an event
        return self.frame


async def with_agent_session(plan: Plan, model: Any) -> None:
    session = AgentSession(llm=model)
    finished = asyncio.Event()

    @session.on("conversation_item_added")
    def _added(event: Any) -> None:
        item = event.item
        if item.type == "message" and item.role == "assistant" and item.text_content:
            plan.hear(item.text_content)
            if plan.finished():
                finished.set()

    @session.on("error")
    def _error(event: Any) -> None:
        plan.error(str(getattr(event.error, "error", None) or event.error))
        if plan.finished():
            finished.set()

    session.output.audio = Speaker(plan)
    session.input.audio = SilentMicrophone()
    await session.start(Assistant(), record=False)
    emit("connected")
    await finish(plan, session, finished)


if __name__ == "__main__":
    plan = Plan.from_argv()
    asyncio.run(run_model(plan, relayed_live_model(plan.url, plan.token), with_agent_session))
