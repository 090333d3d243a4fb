"""`relay demo --dialect live`: the demo's main job on the embedded GPT-Live mock, no key, no network.

The relay serves GPT-Live's clients (`/v1/live/sessions`) in front of the mock with the example
tools in Responses delegation: the mock's backend calls them (both cities' weather in one batch,
an order found, one that is not, a slow flight search), the relay runs each once, answers each
with one `function_call_output` and continues each batch with exactly one `response.create`, and
the voice model speaks what the backend wrote. The scripted client is an application as GPT-Live
has them: it starts the session, keeps the input audio flowing (silence: the session's timeline,
and with it the model's speech, advances with the input audio) while the mock plays the caller's
words, and prints the model's words as its transcript arrives. `relay.cli.demo` prints the rest
(the relay's notices, the summary, the recording).
"""

from __future__ import annotations

import base64
from typing import Any

import anyio
from websockets.asyncio.client import connect

from relay.dialects import live
from relay.edges.serve import RelayServer
from relay.mock import MockUpstream

SILENCE = base64.b64encode(bytes(4800)).decode()   # 100 ms of PCM16 at 24 kHz
ROUND = 0.025
"""Seconds the client waits for the server's events after each 100 ms of audio it sends: the mock's
timeline advances with the audio received, so the demo's speech runs four times faster than spoken."""
PAUSE_ROUNDS = 4
"""The model's words since the last line are printed once it has said nothing for this many rounds
(the mock speaks 200 ms of words per transcript delta, on the audio timeline)."""
QUIET_ROUNDS = 12
"""A turn is over when the relay is idle and the model has said nothing for this many rounds."""


def session_start(tools: Any = ()) -> str:
    """The client's `session.start`: Responses delegation, whose tools the relay adds its own to."""
    return live.encode(live.SessionStart(session={
        "model": "gpt-live-1", "instructions": "You are a helpful travel and shopping assistant.",
        "delegation": {"type": "responses", "responses": {"model": "gpt-5.4", "tools": list(tools)}}}))


async def converse(url: str, timeline: Any, server: RelayServer, mock: MockUpstream, turns: tuple[str, ...],
                   token: str) -> None:
    """The scripted GPT-Live client: one spoken turn at a time (the mock plays the caller's words),
    the input audio kept flowing, the model's words printed, each turn over when the relay is idle
    and the model has finished speaking (bounded by the slowest tool's timeout, and a little more)."""
    turn_limit = 15.0 + max((spec.timeout for spec in server.tools), default=0.0)
    headers = {"Authorization": f"Bearer {token}"}
    async with connect(url, additional_headers=headers, max_size=None) as ws:
        await ws.send(session_start())
        with anyio.fail_after(turn_limit):
            while not isinstance(live.decode(await ws.recv()), live.SessionStarted):
                pass
        session = mock.sessions[-1]
        for turn in turns:
            timeline.line("you", f"\u201c{turn}\u201d")
            await ws.send(live.encode(live.InputAudioAppend(audio=SILENCE)))
            await mock.user_turn(session, turn)
            with anyio.fail_after(turn_limit):
                await _until_turn_is_over(ws, timeline, server)
        await ws.send(live.encode(live.SessionClose()))


async def _until_turn_is_over(ws: Any, timeline: Any, server: RelayServer) -> None:
    words: list[str] = []
    quiet = 0      # rounds without words while the relay owes nothing
    pause = 0      # rounds without words
    while quiet < QUIET_ROUNDS:
        await ws.send(live.encode(live.InputAudioAppend(audio=SILENCE)))
        heard = False
        with anyio.move_on_after(ROUND):
            while True:
                event = live.decode(await ws.recv())
                if isinstance(event, live.OutputTranscriptDelta) and isinstance(event.delta, str):
                    words.append(event.delta)
                    heard = True
                elif isinstance(event, live.Error):
                    timeline.line("error", f"{event.error.get('code')}: {event.error.get('message')}")
        quiet = 0 if heard or not _relay_idle(server) else quiet + 1   # a tool running: its answer is owed
        pause = 0 if heard else pause + 1
        if words and pause >= PAUSE_ROUNDS:
            timeline.said(None, None, "".join(words).strip())
            words = []


def _relay_idle(server: RelayServer) -> bool:
    """No relay call running or waiting for its answer to go up."""
    return all(session.engine is None or not session.engine.ledger.unanswered()
               for session in server.sessions.values())

