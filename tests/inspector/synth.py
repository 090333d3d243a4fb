"""Recordings made for the inspector's tests, written by the relay's own RecordingWriter (so the
drop policy and the file format are the real ones), with known audio and known calls.

- `openai_session`: a GA proxy session: 3.0 s of caller audio (PCM16 24 kHz, a tone), 1.5 s of
  assistant audio, a relay call answered and followed up, a slow call that times out with an
  on_delay filler, a client output the relay refuses, and an upstream error.
- `g711_session`: a beta session in mu-law in, A-law out (8 kHz).
- `gemini_session`: Gemini Live, 16 kHz in, 24 kHz out, a call answered and one cancelled.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.inspector.audio import mulaw_encode
from relay.recording.writer import RecordingWriter

PREFIX = "rs_test"


@dataclass
class Facts:
    path: Path
    caller_seconds: float
    assistant_seconds: float
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)   # call id -> name, arguments, output


def tone(seconds: float, rate: int, frequency: float = 440.0, amplitude: int = 12000) -> bytes:
    count = round(seconds * rate)
    return struct.pack(f"<{count}h", *(int(amplitude * math.sin(2 * math.pi * frequency * i / rate))
                                       for i in range(count)))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class Writer:
    """RecordingWriter with a clock the scenario moves."""

    def __init__(self, directory: Path, *, dialect: str, tools: list[str], record_audio: str = "keep",
                 mode: str = "proxy", session_id: str = "sess_test") -> None:
        self.t = 0.0
        self.writer = RecordingWriter(
            directory, session_id=session_id, dialect=dialect, upstream="127.0.0.1:8765", tools=tools,
            mode=mode, record_audio=record_audio, clock=lambda: self.t, wall_clock=lambda: 1_800_000_000.0,
            extra_header={"id_prefix": PREFIX, "hide_tool_events": True, "declare_tools": True,
                          "unknown_tools": "client"})

    def at(self, t: float) -> Writer:
        self.t = t
        return self

    def send(self, direction: str, event: dict[str, Any] | bytes, *, binary: bool = False) -> None:
        if isinstance(event, bytes):
            self.writer.record(direction, event, t=self.t)
            return
        text = json.dumps(event, separators=(",", ":"))
        self.writer.record(direction, text.encode() if binary else text, t=self.t)
        self.t += 0.0001

    def upstream(self, event: dict[str, Any], *, forward: bool = True, binary: bool = False) -> None:
        self.send("upstream>relay", event, binary=binary)
        if forward:
            self.send("relay>client", event, binary=binary)

    def client(self, event: dict[str, Any], *, forward: bool = True) -> None:
        self.send("client>relay", event)
        if forward:
            self.send("relay>upstream", event)

    def decided(self, call_id: str, name: str, outcome: str, *, is_error: bool = False) -> None:
        """The relay's `tool_call` note for one of its calls, as the session loop records it."""
        self.writer.record_notice("tool_call", {"call_id": call_id, "name": name, "outcome": outcome,
                                                "is_error": is_error}, t=self.t)

    def close(self) -> Path:
        self.writer.close("client closed")
        return self.writer.path


def openai_session(directory: Path, *, record_audio: str = "keep") -> Facts:
    w = Writer(directory, dialect="openai", tools=["get_weather", "slow_lookup"], record_audio=record_audio)
    fmt = {"type": "audio/pcm", "rate": 24000}
    session = {"type": "realtime", "audio": {"input": {"format": fmt}, "output": {"format": fmt}}, "tools": []}
    w.upstream({"type": "session.created", "event_id": "event_1", "session": session})
    w.send("relay>upstream", {"type": "session.update", "event_id": f"{PREFIX}_e1", "session": {
        "type": "realtime", "tools": [{"type": "function", "name": "get_weather"}, {"type": "function", "name": "slow_lookup"}]}})
    chunk = tone(0.1, 24000)
    for index in range(30):                                  # 3.0 s of caller audio
        w.at(0.1 + index * 0.1).client({"type": "input_audio_buffer.append", "audio": b64(chunk)})
        if index == 2:
            w.upstream({"type": "input_audio_buffer.speech_started", "event_id": "event_2", "audio_start_ms": 300, "item_id": "item_u1"})
        if index == 14:
            w.upstream({"type": "input_audio_buffer.speech_stopped", "event_id": "event_3", "audio_end_ms": 1500, "item_id": "item_u1"})
            w.upstream({"type": "input_audio_buffer.committed", "event_id": "event_4", "item_id": "item_u1", "previous_item_id": None})
            w.upstream({"type": "conversation.item.added", "event_id": "event_5", "item": {
                "id": "item_u1", "type": "message", "role": "user", "content": [{"type": "input_audio", "transcript": None}]}})
            w.upstream({"type": "conversation.item.input_audio_transcription.completed", "event_id": "event_6",
                        "item_id": "item_u1", "content_index": 0, "transcript": "What's the weather in Paris?"})
    w.at(1.6).upstream({"type": "response.created", "event_id": "event_7", "response": {
        "id": "resp_1", "status": "in_progress", "output": [], "conversation_id": "conv_1", "metadata": None}})
    w.upstream({"type": "response.output_item.added", "event_id": "event_8", "response_id": "resp_1", "output_index": 0,
                "item": {"id": "item_a1", "type": "message", "role": "assistant", "content": []}})
    out_chunk = tone(0.1, 24000, 220.0)
    for index in range(10):                                  # 1.0 s of assistant audio
        w.upstream({"type": "response.output_audio.delta", "event_id": f"event_d{index}", "response_id": "resp_1",
                    "item_id": "item_a1", "output_index": 0, "content_index": 0, "delta": b64(out_chunk)})
    w.upstream({"type": "response.output_audio_transcript.done", "event_id": "event_9", "response_id": "resp_1",
                "item_id": "item_a1", "output_index": 0, "content_index": 0, "transcript": "Let me check."})
    arguments = json.dumps({"city": "Paris"})
    call_item = {"id": "item_c1", "type": "function_call", "status": "in_progress", "name": "get_weather",
                 "call_id": "call_1", "arguments": ""}
    w.upstream({"type": "response.output_item.added", "event_id": "event_10", "response_id": "resp_1", "output_index": 1,
                "item": call_item}, forward=False)
    w.upstream({"type": "response.function_call_arguments.done", "event_id": "event_11", "response_id": "resp_1",
                "item_id": "item_c1", "output_index": 1, "call_id": "call_1", "name": "get_weather", "arguments": arguments},
               forward=False)
    w.upstream({"type": "response.output_item.done", "event_id": "event_12", "response_id": "resp_1", "output_index": 1,
                "item": {**call_item, "status": "completed", "arguments": arguments}}, forward=False)
    w.at(1.9).upstream({"type": "response.done", "event_id": "event_13", "response": {
        "id": "resp_1", "status": "completed", "conversation_id": "conv_1", "output": [
            {"id": "item_a1", "type": "message", "role": "assistant", "content": [{"type": "output_audio", "transcript": "Let me check."}]}]}})
    weather = json.dumps({"city": "Paris", "temp_c": 21})
    w.at(2.0).send("relay>upstream", {"type": "conversation.item.create", "event_id": f"{PREFIX}_e2", "previous_item_id": "item_c1",
                                      "item": {"type": "function_call_output", "id": f"{PREFIX}_i1", "call_id": "call_1",
                                               "output": weather, "status": "completed"}})
    w.decided("call_1", "get_weather", "ok")
    w.send("relay>upstream", {"type": "response.create", "event_id": f"{PREFIX}_e3", "response": {"metadata": {
        "relay": "follow_up", "relay_event": f"{PREFIX}_e3", "call_ids": "call_1"}}})
    w.at(2.05).upstream({"type": "response.created", "event_id": "event_14", "response": {
        "id": "resp_2", "status": "in_progress", "output": [], "conversation_id": "conv_1",
        "metadata": {"relay": "follow_up", "relay_event": f"{PREFIX}_e3", "call_ids": "call_1"}}})
    for index in range(5):                                   # 0.5 s more
        w.at(2.1 + index * 0.01).upstream({"type": "response.output_audio.delta", "event_id": f"event_e{index}", "response_id": "resp_2",
                                          "item_id": "item_a2", "output_index": 0, "content_index": 0, "delta": b64(out_chunk)})
    w.upstream({"type": "response.output_audio_transcript.done", "event_id": "event_15", "response_id": "resp_2",
                "item_id": "item_a2", "output_index": 0, "content_index": 0, "transcript": "It is 21 degrees in Paris."})
    w.at(2.3).upstream({"type": "response.done", "event_id": "event_16", "response": {
        "id": "resp_2", "status": "completed", "conversation_id": "conv_1", "output": []}})
    # the client tries to answer the relay's call: refused
    w.at(2.4).send("client>relay", {"type": "conversation.item.create", "event_id": "client_9", "item": {
        "type": "function_call_output", "call_id": "call_1", "output": "mine"}})
    w.send("relay>client", {"type": "error", "event_id": f"{PREFIX}_e4", "error": {
        "type": "invalid_request_error", "code": "relay_owned_call", "message": "call call_1 (get_weather) belongs to a relay tool",
        "param": "item.call_id", "event_id": "client_9"}})
    # a slow call: an on_delay filler, then a timeout
    w.at(2.6).upstream({"type": "response.created", "event_id": "event_17", "response": {
        "id": "resp_3", "status": "in_progress", "output": [], "conversation_id": "conv_1"}})
    slow_args = json.dumps({"key": "A17"})
    slow_item = {"id": "item_c2", "type": "function_call", "status": "completed", "name": "slow_lookup",
                 "call_id": "call_2", "arguments": slow_args}
    w.upstream({"type": "response.output_item.done", "event_id": "event_18", "response_id": "resp_3", "output_index": 0,
                "item": slow_item}, forward=False)
    w.at(2.7).upstream({"type": "response.done", "event_id": "event_19", "response": {
        "id": "resp_3", "status": "completed", "conversation_id": "conv_1", "output": [slow_item]}}, forward=False)
    w.at(3.2).send("relay>upstream", {"type": "response.create", "event_id": f"{PREFIX}_e5", "response": {
        "conversation": "none", "input": [], "instructions": "Say exactly: one moment",
        "metadata": {"relay": "filler", "relay_event": f"{PREFIX}_e5", "call_ids": "call_2", "filler": "on_delay"}}})
    w.at(3.25).upstream({"type": "error", "event_id": "event_20", "error": {
        "type": "invalid_request_error", "code": "conversation_already_has_active_response",
        "message": "Conversation already has an active response in progress", "event_id": f"{PREFIX}_e5"}}, forward=False)
    timeout = json.dumps({"error": "timed out after 5 s"})
    w.at(7.7).send("relay>upstream", {"type": "conversation.item.create", "event_id": f"{PREFIX}_e6",
                                      "item": {"type": "function_call_output", "id": f"{PREFIX}_i2", "call_id": "call_2",
                                               "output": timeout, "status": "incomplete"}})
    w.decided("call_2", "slow_lookup", "timeout", is_error=True)
    w.at(8.0)
    path = w.close()
    return Facts(path, caller_seconds=3.0, assistant_seconds=1.5, calls={
        "call_1": {"name": "get_weather", "arguments": {"city": "Paris"}, "output": weather, "outcome": "ok"},
        "call_2": {"name": "slow_lookup", "arguments": {"key": "A17"}, "output": timeout, "outcome": "timeout"},
    })


def g711_session(directory: Path) -> Facts:
    """Beta, mu-law in and A-law out, as a SIP gateway would use them."""
    w = Writer(directory, dialect="openai-beta", tools=[], mode="sidecar", session_id="sess_g711")
    w.send("upstream>relay", {"type": "session.created", "event_id": "e1", "session": {
        "input_audio_format": "g711_ulaw", "output_audio_format": "g711_alaw"}})
    ulaw = bytes(mulaw_encode(s) for s in struct.unpack("<800h", tone(0.1, 8000)))
    for index in range(20):                                  # 2.0 s in
        w.at(0.1 * index).send("relay>upstream", {"type": "input_audio_buffer.append", "audio": b64(ulaw)})
    alaw = bytes(range(0x40, 0x40 + 80)) * 10                 # 800 bytes = 0.1 s
    for index in range(5):                                   # 0.5 s out
        w.at(2.1 + index * 0.1).send("upstream>relay", {"type": "response.audio.delta", "event_id": f"d{index}",
                                                       "response_id": "r1", "item_id": "i1", "delta": b64(alaw)})
    path = w.close()
    return Facts(path, caller_seconds=2.0, assistant_seconds=0.5)


def gemini_session(directory: Path, *, record_audio: str = "keep") -> Facts:
    w = Writer(directory, dialect="gemini", tools=["get_weather"], record_audio=record_audio, session_id="sess_gemini")
    setup = {"setup": {"model": "models/gemini-live-2.5-flash-preview", "generationConfig": {"responseModalities": ["AUDIO"]}}}
    w.send("client>relay", setup)
    w.send("relay>upstream", {"setup": {**setup["setup"], "tools": [{"functionDeclarations": [
        {"name": "get_weather", "parametersJsonSchema": {"type": "object"}}]}]}})
    w.upstream({"setupComplete": {}}, binary=True)
    chunk = tone(0.1, 16000)
    for index in range(20):                                  # 2.0 s in
        w.at(0.1 + 0.1 * index).client({"realtimeInput": {"audio": {"mimeType": "audio/pcm;rate=16000", "data": b64(chunk)}}})
    w.at(2.2).upstream({"serverContent": {"inputTranscription": {"text": "Weather in Rome?"}}}, binary=True)
    out = tone(0.1, 24000, 330.0)
    for index in range(8):                                   # 0.8 s out
        w.upstream({"serverContent": {"modelTurn": {"parts": [{"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": b64(out)}}]}}},
                   binary=True)
    w.upstream({"serverContent": {"outputTranscription": {"text": "Let me look."}}}, binary=True)
    w.at(2.4).upstream({"toolCall": {"functionCalls": [{"id": "fc_1", "name": "get_weather", "args": {"city": "Rome"}},
                                                      {"id": "fc_2", "name": "get_weather", "args": {"city": "Oslo"}}]}},
                       binary=True, forward=False)
    w.at(2.45).send("relay>upstream", {"toolResponse": {"functionResponses": [
        {"id": "fc_1", "name": "get_weather", "response": {"output": {"temp_c": 24}}}]}})
    w.decided("fc_1", "get_weather", "ok")
    w.at(2.5).upstream({"toolCallCancellation": {"ids": ["fc_2"]}}, binary=True, forward=False)
    w.decided("fc_2", "get_weather", "cancelled")
    w.at(2.6).upstream({"serverContent": {"turnComplete": True}}, binary=True)
    path = w.close()
    return Facts(path, caller_seconds=2.0, assistant_seconds=0.8, calls={
        "fc_1": {"name": "get_weather", "arguments": {"city": "Rome"}, "output": json.dumps({"temp_c": 24}, separators=(",", ":")), "outcome": "ok"},
        "fc_2": {"name": "get_weather", "arguments": {"city": "Oslo"}, "output": None, "outcome": "cancelled"},
    })
