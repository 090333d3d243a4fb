"""Gemini Live's media passes the session loop and the engine by: the google-genai SDK through
`relay serve --dialect gemini` to the Gemini mock, on loopback. The caller's audio
(`realtimeInput`) and the model's speech (`serverContent` audio chunks), once the model's turn has
its message open, go by the forwarding pipe (`relay/session/pipe.py`); the engine's round sees the
rest, and the first chunk of each turn, which opens it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from google.genai import types as genai_types

from relay.dialects.gemini import media_frame
from relay.engine import GeminiEngine
from relay.session.loop import SessionLoop
from tests.gemini.test_gemini_sdk import MODEL, relay_and_mock, sdk_client
from tests.support.clients import TIMEOUT, Certificate

AUDIO = {"response_modalities": ["AUDIO"]}
CHUNK = bytes(3200)   # 100 ms of PCM16 at 16 kHz


def _kinds(side: str) -> Any:
    """What a frame from `side` is to the test: media (and which) or a message to decode."""
    def kind(frame: str | bytes) -> str:
        return media_frame(frame, side) or "message"   # type: ignore[arg-type]
    return kind


@pytest.mark.parametrize("transport", ["websockets", "picows"])
async def test_media_passes_the_loop_and_the_engine_by(loopback_certificate: Certificate, tmp_path: Path,
                                                       transport: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if transport == "picows":
        pytest.importorskip("picows")
    delivered: dict[str, list[str]] = {"upstream": [], "client": []}
    engine_saw: dict[str, list[str]] = {"upstream": [], "client": []}

    def spying(reader: Any, side: str) -> Any:
        kind = _kinds(side)

        def wrapped(self: SessionLoop) -> Any:
            deliver, express = reader(self)

            def spied(frame: str | bytes, more: bool) -> None:
                delivered[side].append(kind(frame))
                deliver(frame, more)
            return spied, express
        return wrapped

    for name, side in (("_upstream_reader", "upstream"), ("_client_reader", "client")):
        monkeypatch.setattr(SessionLoop, name, spying(getattr(SessionLoop, name), side))
    for name, side in (("receive_upstream", "upstream"), ("receive_client", "client")):
        real, kind = getattr(GeminiEngine, name), _kinds(side)

        def seen(self: GeminiEngine, frame: str | bytes, now: float, real: Any = real, kind: Any = kind,
                 side: str = side) -> Any:
            engine_saw[side].append(kind(frame))
            return real(self, frame, now)
        monkeypatch.setattr(GeminiEngine, name, seen)

    async with relay_and_mock(loopback_certificate, tmp_path, transport=transport) as (server, mock):
        client = sdk_client(server, loopback_certificate)
        async with client.aio.live.connect(model=MODEL, config=AUDIO) as session:
            for _ in range(5):
                await session.send_realtime_input(audio=genai_types.Blob(data=CHUNK, mime_type="audio/pcm;rate=16000"))
            spoken = 0
            for turn in range(2):
                await session.send_client_content(turns={"role": "user", "parts": [{"text": f"Hello {turn}"}]})
                async with asyncio.timeout(TIMEOUT):
                    async for message in session.receive():
                        content = message.server_content
                        parts = content.model_turn.parts if content is not None and content.model_turn else []
                        spoken += sum(1 for part in parts or [] if part.inline_data is not None)
                        if content is not None and content.turn_complete:
                            break
            audio_in = [record for record in mock.received
                        if "realtimeInput" in record.event or "realtime_input" in record.event]
    assert spoken >= 4 and len(audio_in) == 5   # speech came down in chunks, and the caller's went up
    # the engine saw each turn's first chunk (it opens the turn's message), and no other audio
    assert engine_saw["upstream"].count("audio") == 2, engine_saw["upstream"]
    assert delivered["upstream"].count("audio") == 2, delivered["upstream"]
    assert "message" in engine_saw["upstream"] and "message" in engine_saw["client"]   # the rest goes by the round
    assert "media" not in engine_saw["client"] and "media" not in delivered["client"]
