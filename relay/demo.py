"""`relay demo`: the product at work in a few seconds, offline, with no provider key.

The mock upstream and `relay serve` start in this process with the example tools
(`relay.examples.tools`, shipped in the package; `examples/tools.py` in a checkout is the same
file: a weather table, an order database, a slow flight search with a delay message). A scripted
client, connected to the relay exactly as an application would be, holds a short conversation
of text turns: parallel calls, a lookup, a tool error, a slow tool. The terminal shows a live
timeline of who did what, then a summary of every call, and where the session's recording was
written so it can be replayed with `relay replay`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from websockets.asyncio.client import connect

from relay.engine import Notice
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.server import RelayServer, ServerConfig

# A module name, not a path: it loads from the installed package, whatever the working directory.
EXAMPLE_TOOLS = "relay.examples.tools"
RELAY_TOKEN = "demo-relay-token"          # what the client presents to the relay
PROVIDER_KEY = "demo-provider-key"        # what only the relay presents to the (mock) provider

TURNS = (
    "What's the weather in Paris and in Rome?",
    "Where is my order A1001?",
    "And order Z9, please?",
    "Find me a flight from Paris to Rome tomorrow.",
)


def demo_script() -> MockScript:
    """What the mock model does for each turn: the calls a real model would make."""
    return MockScript(
        rules=(
            Rule(match="weather", say="Let me check both cities.",
                 calls=(ToolCall(name="get_weather", arguments={"city": "Paris"}),
                        ToolCall(name="get_weather", arguments={"city": "Rome"}))),
            Rule(match="order a1001", calls=(ToolCall(name="lookup_order", arguments={"order_id": "A1001"}),)),
            Rule(match="order z9", calls=(ToolCall(name="lookup_order", arguments={"order_id": "Z9"}),)),
            Rule(match="flight", say="Sure, let me search.",
                 calls=(ToolCall(name="search_flights", arguments={"origin": "Paris", "destination": "Rome"}),)),
        ),
        after_outputs=Reply(say="Here is what I found: {joined}"),
        default=Reply(say="I am the mock model: ask me about the weather, an order or a flight."),
    )


class Style:
    """ANSI colours when writing to a terminal, plain text otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text


WHO_STYLE = {"you": "1;36", "assistant": "1;32", "model": "35", "relay": "33", "tool": "34", "error": "1;31"}


@dataclass
class Timeline:
    """Prints one line per thing that happened, with the time since the demo started, and keeps
    the engine of every session it hears from (for the summary)."""

    style: Style
    out: Any = sys.stdout
    started: float = field(default_factory=time.perf_counter)
    server: RelayServer | None = None
    engines: dict[str, Any] = field(default_factory=dict)

    def line(self, who: str, text: str) -> None:
        elapsed = time.perf_counter() - self.started
        label = self.style(f"{who:>9}", WHO_STYLE.get(who, "0"))
        print(f"{elapsed:7.3f}s {label}  {text}", file=self.out, flush=True)

    def notice(self, session_id: str, notice: Notice) -> None:
        """What the relay's engine reports: calls starting and answered, follow-ups, fillers."""
        if session_id not in self.engines and self.server is not None:
            session = self.server.sessions.get(session_id)
            if session is not None and session.engine is not None:
                self.engines[session_id] = session.engine
        fields = notice.fields
        if notice.kind == "tool_started":
            self.line("model", f"calls {fields['name']}({_compact(fields['arguments'])})  "
                               f"[{fields['call_id']}, response {fields['response_id']}]")
        elif notice.kind == "tool_call":
            outcome = fields.get("outcome")
            who = "error" if outcome not in ("ok", None) else "tool"
            self.line(who, f"{fields['name']} {outcome} in {fields.get('handler_ms')} ms -> output "
                           f"{fields.get('output_item_id')} [{fields.get('status')}] injected after "
                           f"response {fields.get('response_id')} ({fields.get('ms')} ms after the call was ready)")
        elif notice.kind == "follow_up":
            self.line("relay", f"response.create: the model answers {fields.get('call_ids')}")
        elif notice.kind == "filler":
            self.line("relay", f"out-of-band filler while {fields.get('call_ids')} still runs")
        elif notice.kind in ("anomaly", "upstream_error", "client_error"):
            self.line("error", f"{notice.kind}: {fields.get('message')}")


def _compact(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), separators=(", ", ": "))
    except ValueError:
        return arguments


async def converse(url: str, timeline: Timeline, server: RelayServer) -> None:
    """The scripted client: one text turn at a time, each over when the relay has nothing left."""
    headers = {"Authorization": f"Bearer {RELAY_TOKEN}"}
    async with connect(f"{url}?model=gpt-realtime", additional_headers=headers, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"],
            "instructions": "You are a helpful travel and shopping assistant."}}))
        for turn in TURNS:
            timeline.line("you", f"\u201c{turn}\u201d")
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": turn}]}}))
            await ws.send(json.dumps({"type": "response.create"}))
            await _until_turn_is_over(ws, timeline, server)


async def _until_turn_is_over(ws: Any, timeline: Timeline, server: RelayServer) -> None:
    with anyio.fail_after(10):
        async for message in ws:
            event = json.loads(message)
            kind = event["type"]
            if kind in ("response.output_text.done", "response.output_audio_transcript.done"):
                text = event.get("text") or event.get("transcript") or ""
                timeline.line("assistant", f"\u201c{text}\u201d")
            elif kind == "error":
                timeline.line("error", f"{event['error'].get('code')}: {event['error'].get('message')}")
            elif kind == "response.done" and _relay_idle(server):
                return


def _relay_idle(server: RelayServer) -> bool:
    """Nothing left to say: no call running or waiting, no response wanted or active."""
    for session in server.sessions.values():
        engine = session.engine
        if engine is None:
            continue
        if engine.ledger.unanswered() or engine.sequencer.pending() or engine.sequencer.busy(time.time()):
            return False
    return True


def summary(server_engine: Any, style: Style) -> str:
    rows = [("call", "tool", "outcome", "status", "handler ms", "ready->out ms", "answered by")]
    for entry in server_engine.ledger:
        handler_ms = ("" if entry.started_at is None or entry.finished_at is None
                      else f"{(entry.finished_at - entry.started_at) * 1000:.1f}")
        latency = entry.latency_ms()
        rows.append((entry.call_id, entry.name, entry.outcome or entry.state.value, entry.output_status or "",
                     handler_ms, "" if latency is None else f"{latency:.1f}", entry.follow_up_response_id or ""))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        line = "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths))
        lines.append(style(line, "1") if index == 0 else line)
    return "\n".join(lines)


async def run_demo(*, tools: str, record_dir: str | None, color: bool, out: Any = sys.stdout) -> int:
    style = Style(color)
    timeline = Timeline(style, out)
    print(style("relay demo", "1") + ": the mock upstream and the relay, in this process; no key, no network.",
          file=out)
    async with MockUpstream(script=demo_script(), api_key=PROVIDER_KEY) as mock:
        config = ServerConfig(upstream=mock.url, dialect="openai", tools=[tools], host="127.0.0.1", port=0,
                              auth_token=RELAY_TOKEN, api_key=PROVIDER_KEY, record_dir=record_dir,
                              on_notice=timeline.notice, drain_seconds=1)
        async with RelayServer(config) as server:
            timeline.server = server
            print(f"mock upstream {mock.url}   relay {server.url}   tools {', '.join(server.tools.names)}\n",
                  file=out)
            await converse(server.url, timeline, server)
    print("\n" + style("calls", "1"), file=out)
    for engine in timeline.engines.values():
        print(summary(engine, style), file=out)
    recordings = sorted(Path(record_dir).glob("*.jsonl"), key=os.path.getmtime) if record_dir else []
    if recordings:
        print(f"\nrecording: {recordings[-1]}", file=out)
        print(f"replay it against the tools: relay replay {recordings[-1]} --tools {tools}", file=out)
        print(f"see it as a timeline (open in a browser): {write_inspector_page(recordings[-1])}", file=out)
    return 0


def write_inspector_page(recording: Path) -> Path:
    """The session's inspector page, beside its recording."""
    from relay.inspector import build_model, write_page
    from relay.recording import read_recording

    return write_page(build_model(read_recording(recording)), recording.with_suffix(".html"))


def run_demo_command(*, tools: str, record_dir: str | None, color: bool) -> int:
    """`relay demo`: the whole demo, in a new event loop."""
    return anyio.run(lambda: run_demo(tools=tools, record_dir=record_dir, color=color))
