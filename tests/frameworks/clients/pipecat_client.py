"""pipecat (pipecat-ai 1.14, `OpenAIRealtimeLLMService`) as the relay's client, unchanged and
headless: a `PipelineWorker` of the context aggregators around the service, with a processor
that keeps what the bot says. The context has one tool of pipecat's own, `get_time`, and nothing
of the relay's tools. The first turns are the initial context (without them the bot greets); pipecat's realtime service takes
the user's later turns as speech (server VAD), which the test plays on the mock. Prints what
pipecat gives the application (plan.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from pipecat.adapters.schemas.function_schema import FunctionSchema
from pipecat.adapters.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    LLMFullResponseEndFrame,
    LLMRunFrame,
    TTSAudioRawFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams
from pipecat.workers.runner import WorkerRunner

from plan import AUDIO_RATE, Plan, emit, tone
from pipecat_relay import relayed_service

GET_TIME = FunctionSchema(name="get_time", description="The local time in a city.",
                          properties={"city": {"type": "string"}}, required=["city"])


async def get_time(params: FunctionCallParams) -> None:
    emit("tool", name="get_time", arguments=dict(params.arguments))
    await params.result_callback(f"noon in {params.arguments['city']}")


class Listener(FrameProcessor):
    """Keeps what the bot says (its transcript, one message per response) and the audio bytes."""

    def __init__(self, plan: Plan, finished: asyncio.Event) -> None:
        super().__init__()
        self.plan = plan
        self.finished = finished
        self.text = ""

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.plan.audio_bytes += len(frame.audio)
        elif isinstance(frame, TTSTextFrame):
            self.text += frame.text
        elif isinstance(frame, LLMFullResponseEndFrame) and self.text:
            self.plan.hear(self.text)
            self.text = ""
            if self.plan.finished():
                self.finished.set()
        elif isinstance(frame, ErrorFrame):
            self.plan.error(str(frame.error))
            if self.plan.finished():
                self.finished.set()
        await self.push_frame(frame, direction)


async def main(plan: Plan) -> None:
    llm = relayed_service(plan.url, plan.token)
    llm.register_function("get_time", get_time)
    first = plan.first_turns()
    for text in first:
        emit("sent", text=text)
    # as pipecat's bots do, the model runs on the initial context at once (with no turn typed, it
    # greets): a context first given to the service later would be sent up again as new items
    context = LLMContext(messages=[{"role": "system", "content": "You are helpful."}]
                         + [{"role": "user", "content": text} for text in first],
                         tools=ToolsSchema(standard_tools=[GET_TIME]))
    aggregators = LLMContextAggregatorPair(context)
    finished = asyncio.Event()
    worker = PipelineWorker(Pipeline([aggregators.user(), llm, Listener(plan, finished), aggregators.assistant()]),
                            params=PipelineParams(audio_in_sample_rate=AUDIO_RATE),
                            cancel_on_idle_timeout=False)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    emit("connected")
    await worker.queue_frame(LLMRunFrame())
    if plan.audio_in:
        samples = tone()
        step = AUDIO_RATE // 50 * 2
        await worker.queue_frames([InputAudioRawFrame(audio=samples[i:i + step], sample_rate=AUDIO_RATE, num_channels=1)
                                   for i in range(0, len(samples), step)])
        emit("audio_sent")
    try:
        await asyncio.wait_for(finished.wait(), plan.timeout)
    finally:
        await worker.cancel()
        await running
    emit("audio_out", bytes=plan.audio_bytes)
    emit("history", items=[{"role": message.get("role"), "text": text_of(message)}
                           for message in context.get_messages() if isinstance(message, dict)])
    emit("done")


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


if __name__ == "__main__":
    asyncio.run(main(Plan.from_argv()))
