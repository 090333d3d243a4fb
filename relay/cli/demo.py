"""`relay demo`: the product at work in a few seconds, offline, with no provider key.

The mock upstream and `relay serve` start in this process with the example tools
(`relay.examples.tools`, shipped in the package; `relay/examples/tools.py` in a checkout: a
weather table, an order database, a slow flight search with a delay message). A scripted
client, connected to the relay exactly as an application would be, holds a short conversation
of text turns: parallel calls, a lookup, a tool error, a slow tool. The terminal shows a live
timeline of who did what, then a summary of every call, and where the session's recording was
written so it can be replayed with `relay replay`.

With `--tools` of your own, the conversation is built from your tools' schemas instead: one turn
per tool, in which the mock model calls it once with example arguments (each required parameter's
default, first enum value or example, else a plain value of its type).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from websockets.asyncio.client import connect

from relay.cli.options import (
    LOOP,
    RECORD,
    TRANSPORT,
    Command,
    check_record_dir,
    option,
)
from relay.cli import demo_delegations as delegations
from relay.dialects import LIVE, OPENAI, get_dialect
from relay.dialects import openai_codec as wire
from relay.edges.process import run_in_loop
from relay.edges.serve import RelayServer, ServerConfig
from relay.engine import Notice
from relay.engine.actions import TOOL_CALL
from relay.engine.calls import CallOutcome
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.tools import ToolRegistry
from relay.tools.render import error_in_output
from relay.tools.sources import tool_registry

# A module name, not a path: it loads from the installed package, whatever the working directory.
EXAMPLE_TOOLS = "relay.examples.tools"
RELAY_TOKEN = "demo-relay-token"          # what the client presents to the relay
PROVIDER_KEY = "demo-provider-key"        # what only the relay presents to the (mock) provider

DEMO_DIALECTS = (OPENAI.name, LIVE.name)
"""The wires the demo speaks: the mock's Realtime and its GPT-Live."""

TURNS = (
    "What's the weather in Paris and in Rome?",
    "Where is my order A1001?",
    "And order Z9, please?",
    "Find me a flight from Paris to Rome tomorrow.",
)


@dataclass(frozen=True)
class Conversation:
    """What the scripted client says, turn by turn, and what the mock model does about it."""

    turns: tuple[str, ...]
    script: MockScript


def conversation_for(tools: ToolRegistry) -> Conversation:
    """The example conversation when every tool it calls is there; else one built from `tools`."""
    scripted = {call.name for rule in demo_script().rules for call in rule.calls}
    if scripted <= set(tools.names):
        return Conversation(TURNS, demo_script())
    return tools_conversation(tools)


def tools_conversation(tools: ToolRegistry) -> Conversation:
    """One turn per tool, in which the model calls it with example arguments from its schema."""
    turns, rules = [], []
    for definition in tools.definitions():
        name = definition["name"]
        turns.append(f"Please use {name}.")
        rules.append(Rule(match=rf"^please use {re.escape(name)}\.$", regex=True,
                          calls=(ToolCall(name=name, arguments=example_arguments(definition.get("parameters"))),)))
    return Conversation(tuple(turns), MockScript(
        rules=tuple(rules), after_outputs=Reply(say="Here is what I found: {joined}"),
        default=Reply(say="I am the mock model: I call each of your tools once.")))


def example_arguments(parameters: Any) -> dict[str, Any]:
    """Arguments for an object schema: an example value for each required property."""
    if not isinstance(parameters, dict):
        return {}
    properties = parameters.get("properties") or {}
    return {name: example_value(properties[name]) for name in parameters.get("required") or ()
            if name in properties}


def example_value(schema: Any) -> Any:
    """A value that fits a property's JSON Schema, as a person trying the tool would type."""
    if not isinstance(schema, dict):
        return "example"
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    for key in ("examples", "enum"):
        if schema.get(key):
            return schema[key][0]
    options = [option for option in schema.get("anyOf") or schema.get("oneOf") or ()
               if isinstance(option, dict) and option.get("type") != "null"]
    if options:
        return example_value(options[0])
    kind = schema.get("type")
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "array":
        return [example_value(schema.get("items"))] * int(schema.get("minItems", 0) or 0)
    if kind == "object":
        return example_arguments(schema)
    return "example".ljust(int(schema.get("minLength", 0) or 0), "x")


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
    the engine of every session it hears from (for the summary).

    The assistant's words reach the scripted client after the relay has already seen the calls
    that follow them in the same response, so words that precede a call are printed from the
    relay's engine when the call starts, and the client prints only words not yet shown: the
    timeline keeps the order in which the model produced things. Each of the assistant's lines
    names its response, the id the calls table gives as "answered by"."""

    style: Style
    out: Any = sys.stdout
    started: float = field(default_factory=time.perf_counter)
    server: RelayServer | None = None
    engines: dict[str, Any] = field(default_factory=dict)
    shown_items: set[str] = field(default_factory=set)

    def line(self, who: str, text: str) -> None:
        elapsed = time.perf_counter() - self.started
        label = self.style(f"{who:>9}", WHO_STYLE.get(who, "0"))
        print(f"{elapsed:7.3f}s {label}  {text}", file=self.out, flush=True)

    def said(self, item_id: str | None, response_id: str | None, text: str) -> None:
        """The assistant's words in one item, once (from the engine or from the client)."""
        if item_id is not None:
            if item_id in self.shown_items:
                return
            self.shown_items.add(item_id)
        self.line("assistant", f"\u201c{text}\u201d" + (f"  [{response_id}]" if response_id else ""))

    def notice(self, session_id: str, notice: Notice) -> None:
        """What the relay's engine reports: calls starting and answered, follow-ups, fillers."""
        if session_id not in self.engines and self.server is not None:
            session = self.server.sessions.get(session_id)
            if session is not None and session.engine is not None:
                self.engines[session_id] = session.engine
        engine = self.engines.get(session_id)
        fields = notice.fields
        if notice.kind == "tool_started":
            if engine is not None:
                self._words_before(engine, fields["call_id"])
            self.line("model", f"calls {fields['name']}({_compact(fields['arguments'])})  "
                               f"[{fields['call_id']}, {fields['response_id']}]")
        elif notice.kind == TOOL_CALL:
            self._answered(engine, fields)
        elif notice.kind == "follow_up":
            self.line("relay", f"response.create: the model answers {_ids(fields.get('call_ids'))}")
        elif notice.kind == "filler":
            self.line("relay", f"out-of-band filler while {_ids(fields.get('call_ids'))} still runs")
        elif notice.kind in ("anomaly", "upstream_error", "client_error"):
            self.line("error", f"{notice.kind}: {fields.get('message')}")

    def _words_before(self, engine: Any, call_id: str) -> None:
        """The assistant's words that precede the call in its response (a spoken preamble)."""
        entry = engine.ledger.get(call_id)
        response = engine.conversation.responses.get(entry.response_id) if entry is not None else None
        if response is None:
            return
        for item_id in response.output_item_ids:
            if item_id == entry.item_id:
                return
            item = engine.conversation.item(item_id)
            if item is not None and item.type == "message" and item.role == "assistant" and item.text():
                self.said(item_id, response.id, item.text())

    def _answered(self, engine: Any, fields: dict[str, Any]) -> None:
        outcome = fields.get("outcome")
        entry = engine.ledger.get(fields["call_id"]) if engine is not None else None
        took = f" in {_ms(fields.get('handler_ms'))}" if fields.get("handler_ms") is not None else ""
        if outcome in (CallOutcome.OK, None):
            who, what = "tool", f"{fields['name']} ok{took}"
        else:   # a failure is an error line; a call interrupted or withdrawn is a tool line
            why = _error_text(entry.output) if entry is not None and entry.output else fields.get("reason")
            who = "error" if CallOutcome.means_failure(outcome) else "tool"
            what = f"{fields['name']} {outcome}{took}" + (f": {why}" if why else "")
        if fields.get("output_item_id"):
            what += f" -> output {fields['output_item_id']} after {fields.get('response_id')}"
            waited = _waited_ms(fields)
            if waited is not None:
                what += f" (held {_ms(waited)} until that response was done)"
        self.line(who, what)


def _ids(call_ids: Any) -> str:
    return ", ".join(call_ids.split(",")) if isinstance(call_ids, str) else str(call_ids)


def _ms(value: float) -> str:
    return f"{value:.1f} ms"


def _waited_ms(fields: dict[str, Any]) -> float | None:
    """How long a finished output waited for its response to end (ready->injected minus the
    handler's time), when that is worth saying."""
    ready_to_out, handler = fields.get("ms"), fields.get("handler_ms")
    if ready_to_out is None or handler is None or ready_to_out - handler < 1.0:
        return None
    return ready_to_out - handler


def _error_text(output: str) -> str:
    """What an error output says: its `error` text, else the output (clipped)."""
    is_error, error = error_in_output(output)
    text = error if is_error and isinstance(error, str) else output
    return text if len(text) <= 100 else text[:99] + "\u2026"


def _compact(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), separators=(", ", ": "))
    except ValueError:
        return arguments


async def converse(url: str, timeline: Timeline, server: RelayServer, turns: tuple[str, ...] = TURNS) -> None:
    """The scripted client: one text turn at a time, each over when the relay has nothing left
    (a turn may last as long as the slowest tool's timeout, and a little more)."""
    turn_limit = 10.0 + max((spec.timeout for spec in server.tools), default=0.0)
    headers = {"Authorization": f"Bearer {RELAY_TOKEN}"}
    async with connect(f"{url}?model=gpt-realtime", additional_headers=headers, max_size=None) as ws:
        await ws.send(wire.encode(wire.SessionUpdate(session={
            "type": "realtime", "output_modalities": ["text"],
            "instructions": "You are a helpful travel and shopping assistant."})))
        for turn in turns:
            timeline.line("you", f"\u201c{turn}\u201d")
            await ws.send(wire.encode(wire.ItemCreate(item={
                "type": wire.MESSAGE, "role": wire.USER, "content": [{"type": "input_text", "text": turn}]})))
            await ws.send(wire.encode(wire.ResponseCreate()))
            await _until_turn_is_over(ws, timeline, server, turn_limit)


async def _until_turn_is_over(ws: Any, timeline: Timeline, server: RelayServer, limit: float) -> None:
    with anyio.fail_after(limit):
        async for message in ws:
            event = wire.decode(message)
            if isinstance(event, (wire.TextDone, wire.AudioTranscriptDone)):
                text = (event.text if isinstance(event, wire.TextDone) else event.transcript) or ""
                timeline.said(event.item_id, event.response_id, text)
            elif isinstance(event, wire.Error):
                timeline.line("error", f"{event.error.get('code')}: {event.error.get('message')}")
            elif isinstance(event, wire.ResponseDone) and _relay_idle(server):
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
    """One row per call. `held ms`: how long a finished output waited for its response to be done
    (blank when it went in at once); `answered by`: the response in which the model spoke about
    it, as the timeline's assistant lines name it."""
    rows = [("call", "tool", "outcome", "status", "handler ms", "held ms", "answered by")]
    for entry in server_engine.ledger:
        handler = (None if entry.started_at is None or entry.finished_at is None
                   else (entry.finished_at - entry.started_at) * 1000)
        latency = entry.latency_ms()
        held = None if latency is None or handler is None or latency - handler < 1.0 else latency - handler
        rows.append((entry.call_id, entry.name, entry.outcome or entry.state.value, entry.output_status or "",
                     "" if handler is None else f"{handler:.1f}", "" if held is None else f"{held:.1f}",
                     entry.follow_up_response_id or ""))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        line = "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths))
        lines.append(style(line, "1") if index == 0 else line)
    return "\n".join(lines)


async def run_demo(*, tools: str, record_dir: str | None, color: bool, out: Any = sys.stdout,
                   transport: str = "auto", dialect: str = "openai") -> int:
    style = Style(color)
    timeline = Timeline(style, out)
    registry = tool_registry([tools])
    conversation = conversation_for(registry)
    print(style("relay demo", "1") + ": the mock upstream and the relay, in this process; no key, no network.",
          file=out)
    if conversation.turns is not TURNS:
        print("the mock model calls each of your tools once, with example arguments from its schema", file=out)
    async with MockUpstream(script=conversation.script, api_key=PROVIDER_KEY, dialect=dialect) as mock:
        upstream = mock.base_url + get_dialect(dialect).client_path
        config = ServerConfig(upstream=upstream, dialect=dialect, tools=registry, host="127.0.0.1", port=0,
                              auth_token=RELAY_TOKEN, api_key=PROVIDER_KEY, record_dir=record_dir,
                              on_notice=timeline.notice, drain_seconds=1, transport=transport)
        async with RelayServer(config) as server:
            timeline.server = server
            print(f"mock upstream {upstream}   relay {server.url}   tools {', '.join(server.tools.names)}\n",
                  file=out)
            if dialect == LIVE.name:
                await delegations.converse(server.url, timeline, server, mock, conversation.turns, RELAY_TOKEN)
            else:
                await converse(server.url, timeline, server, conversation.turns)
    print("\n" + style("calls", "1"), file=out)
    for engine in timeline.engines.values():
        print(summary(engine, style), file=out)
    recordings = sorted(Path(record_dir).glob("*.jsonl"), key=os.path.getmtime) if record_dir else []
    if recordings:
        print(f"\nrecording: {recordings[-1]}", file=out)
        print(f"replay it against the tools: {relay_command()} replay {recordings[-1]} --tools {tools}", file=out)
        print(f"see it as a timeline (open in a browser): {write_inspector_page(recordings[-1])}", file=out)
    return 0


def relay_command() -> str:
    """How the user runs this relay: `relay` when that is the command on their PATH, else the
    path of this environment's script (scripts/demo's virtual environment, not activated)."""
    here = Path(sys.prefix) / "bin" / "relay"
    found = shutil.which("relay")
    if found is not None and (not here.exists() or Path(found).resolve() == here.resolve()):
        return "relay"
    return str(here) if here.exists() else f"{Path(sys.executable).name} -m relay"


def write_inspector_page(recording: Path) -> Path:
    """The session's inspector page, beside its recording."""
    from relay.inspector import build_model, write_page
    from relay.recording.reader import read_recording

    return write_page(build_model(read_recording(recording)), recording.with_suffix(".html"))


def run_demo_command(*, tools: str, record_dir: str | None, color: bool, loop: str = "auto",
                     transport: str = "auto", dialect: str = "openai") -> int:
    """`relay demo`: the whole demo, in a new event loop (`loop`: relay.edges.process.LOOPS), the
    relay's sockets on `transport` (relay.transports.TRANSPORTS), on the mock speaking `dialect`."""
    return run_in_loop(lambda: run_demo(tools=tools, record_dir=record_dir, color=color, transport=transport,
                                        dialect=dialect), loop)


# ---- the command ---------------------------------------------------------------------------

DEMO_OPTIONS = (
    option("--tools", default=str(EXAMPLE_TOOLS),
           help=f"a .py file or module with @tool functions (default: {EXAMPLE_TOOLS}, the example "
                "tools the package ships; relay/examples/tools.py in a checkout). With tools of your own, "
                "the mock model calls each once, with example arguments from its schema"),
    RECORD.but(default="recordings", help="where to write the session's recording (default: ./recordings)"),
    option("--no-record", field=None, action="store_true", help="do not record the session"),
    option("--color", field=None, choices=("auto", "always", "never"), default="auto",
           help="colour the timeline (default auto: when standard output is a terminal)"),
    option("--dialect", choices=DEMO_DIALECTS, default="openai",
           help="the wire the mock and the relay speak: openai (Realtime, the default) or live (GPT-Live, "
                "in Responses delegation)"),
    LOOP,
    TRANSPORT,
)



def run(args: argparse.Namespace) -> int:
    if not args.no_record:
        check_record_dir(args.record)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    return run_demo_command(tools=args.tools, record_dir=None if args.no_record else args.record, color=color,
                            loop=args.loop, transport=args.transport, dialect=args.dialect)



COMMAND = Command(DEMO_OPTIONS, run)
