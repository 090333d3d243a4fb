"""OpenTelemetry spans of `relay serve` sessions (the otel extra), read from the SDK's in-memory
exporter: the tree of a session with parallel calls, a filler, a timeout and a barge-in; the
client's trace continued; the user's own spans inside a tool; and the relay without the packages."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

if not os.environ.get("CI"):   # CI installs the dev extra, which holds the otel one: there they run
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra: pip install -e '.[otel]'")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall  # noqa: E402
from relay.tools import tool  # noqa: E402
from tests.support.clients import realtime_client  # noqa: E402
from tests.support.frames import session_tools, user_text  # noqa: E402
from tests.support.keys import PROVIDER_KEY  # noqa: E402
from tests.support.paths import REPO  # noqa: E402
from tests.support.processes import next_log_line, relay_process  # noqa: E402
from tests.support.relays import relay_for, sidecar_on  # noqa: E402
from tests.support.tools import WEATHER_SCRIPT, WEATHER_TOOL, get_weather  # noqa: E402

CLIENT_TRACE = 0x0AF7651916CD43DD8448EB211C80319C
CLIENT_SPAN = 0xB7AD6B7169203331
TRACEPARENT = f"00-{CLIENT_TRACE:032x}-{CLIENT_SPAN:016x}-01"

SCRIPT = MockScript(
    rules=[
        Rule(match="weather", calls=[ToolCall(name="lookup", arguments={"city": "Paris"}),
                                     ToolCall(name="forecast", arguments={"city": "Paris"}),
                                     ToolCall(name="slow", arguments={"city": "Paris"})]),
        Rule(match="book", calls=[ToolCall(name="book", arguments={"table": 4})]),
    ],
    after_outputs=Reply(say="Here is what I found: {joined}"),
    default=Reply(say="Alright."),
)


class Tools:
    """The session's tools; lookup and forecast make a span of the user's own, as an
    instrumented HTTP client would."""

    def __init__(self, provider: TracerProvider) -> None:
        user_tracer = provider.get_tracer("user-app")
        self.book_started = anyio.Event()

        @tool
        async def lookup(city: str) -> str:
            """Look a city up (async: its task)."""
            with user_tracer.start_as_current_span("GET lookup.example"):
                return f"{city} found"

        @tool
        def forecast(city: str) -> str:
            """The forecast (sync: a worker thread)."""
            with user_tracer.start_as_current_span("GET forecast.example"):
                return "sunny"

        @tool(timeout=0.2, on_start="One moment.")
        async def slow(city: str) -> str:
            """Never answers in time."""
            await anyio.sleep_forever()
            return "never"

        @tool(interruption="cancel")
        async def book(table: int) -> str:
            """Books until the user interrupts."""
            self.book_started.set()
            await anyio.sleep_forever()
            return "booked"

        self.all = [lookup, forecast, slow, book]


@pytest.fixture
def spans_of() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_a_session_is_one_trace_of_responses_tool_calls_fillers_and_follow_ups(
        spans_of: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans_of
    tools = Tools(provider)
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, tools=tools.all, tracer_provider=provider) as server:
        async with realtime_client(server, headers={"traceparent": TRACEPARENT}) as client:
            await client.send(user_text("What's the weather in Paris?"))
            await client.send({"type": "response.create"})
            await client.wait_for(lambda e: e["type"] == "response.done" and "found" in json.dumps(e["response"]))
            await client.send(user_text("Book a table"))
            await client.send({"type": "response.create"})
            await tools.book_started.wait()
            await mock.user_turn(mock.sessions[0], "never mind")   # the user speaks over it: a barge-in
            await client.wait_for(lambda e: e["type"] == "response.done" and "Alright" in json.dumps(e["response"]))
            session = next(iter(server.sessions.values()))
        await session.wait_closed()
    spans = list(exporter.get_finished_spans())
    assert {span.context.trace_id for span in spans} == {CLIENT_TRACE}   # the client's trace, continued
    [root] = by_name(spans, "relay.session")
    assert root.kind is SpanKind.SERVER and parent_of(root) == CLIENT_SPAN
    assert root.attributes["relay.session.id"] == session.id
    assert root.attributes["gen_ai.provider.name"] == "openai"
    assert root.attributes["relay.session.ended_by"] == "client" and root.status.status_code is StatusCode.UNSET

    calls = {span.attributes["gen_ai.tool.name"]: span for span in spans if span.name.startswith("execute_tool ")}
    assert sorted(calls) == ["book", "forecast", "lookup", "slow"]
    for name, call in calls.items():
        assert call.name == f"execute_tool {name}"
        assert call.attributes["gen_ai.operation.name"] == "execute_tool"
        assert call.attributes["gen_ai.tool.call.id"]
    responses = {span.attributes["gen_ai.response.id"]: span for span in spans if span.name == "relay.response"}
    assert all(parent_of(span) == root.context.span_id for span in responses.values())

    # the parallel calls hang off the response that made them
    weather_turn = {calls[name].attributes["gen_ai.response.id"] for name in ("lookup", "forecast", "slow")}
    [weather_response_id] = weather_turn
    weather_response = responses[weather_response_id]
    assert weather_response.attributes["relay.response.creator"] == "client"
    assert all(parent_of(calls[name]) == weather_response.context.span_id for name in ("lookup", "forecast", "slow"))
    assert [calls[name].attributes["relay.tool.outcome"] for name in ("lookup", "forecast", "slow")] == \
        ["ok", "ok", "timeout"]
    assert calls["slow"].status.status_code is StatusCode.ERROR and calls["slow"].attributes["error.type"] == "timeout"
    assert calls["lookup"].status.status_code is StatusCode.UNSET
    assert isinstance(calls["lookup"].attributes["relay.tool.handler_ms"], float)

    # the handlers ran inside their spans: the user's own spans are their children (task, thread)
    [lookup_http] = by_name(spans, "GET lookup.example")
    [forecast_http] = by_name(spans, "GET forecast.example")
    assert parent_of(lookup_http) == calls["lookup"].context.span_id
    assert parent_of(forecast_http) == calls["forecast"].context.span_id

    # the filler was said while slow ran; the one follow-up speaks about the three calls
    [filler] = by_name(spans, "relay.filler")
    assert parent_of(filler) == calls["slow"].context.span_id
    assert filler.attributes["relay.call_ids"] == (calls["slow"].attributes["gen_ai.tool.call.id"],)
    assert filler.attributes["relay.response.creator"] == "relay" and filler.attributes["gen_ai.response.id"]
    [follow_up] = by_name(spans, "relay.follow_up")
    assert parent_of(follow_up) == root.context.span_id
    assert {link.context.span_id for link in follow_up.links} == {
        calls[name].context.span_id for name in ("lookup", "forecast", "slow")}
    assert follow_up.attributes["relay.response.status"] == "completed"

    # the barge-in cancelled book; the user's new turn is the server's response
    assert calls["book"].attributes["relay.tool.outcome"] == "cancelled"
    assert calls["book"].status.status_code is StatusCode.UNSET
    book_response = responses[calls["book"].attributes["gen_ai.response.id"]]
    assert parent_of(calls["book"]) == book_response.context.span_id
    assert any(span.attributes["relay.response.creator"] == "server" for span in responses.values())
    assert all(span.end_time >= span.start_time for span in spans)


async def test_a_traceparent_in_the_query_continues_the_clients_trace_and_stays_here(
        spans_of: tuple[TracerProvider, InMemorySpanExporter], weather_mock: MockUpstream) -> None:
    provider, exporter = spans_of
    async with relay_for(weather_mock, tracer_provider=provider) as server:
        async with realtime_client(server, path=f"/v1/realtime?model=gpt-realtime&traceparent={TRACEPARENT}") \
                as client:
            await client.wait_type("session.created")
            session = next(iter(server.sessions.values()))
        await session.wait_closed()
    [root] = by_name(list(exporter.get_finished_spans()), "relay.session")
    assert (root.context.trace_id, parent_of(root)) == (CLIENT_TRACE, CLIENT_SPAN)
    assert weather_mock.sessions[0].connections[0].query == {"model": "gpt-realtime"}   # not sent upstream


async def test_without_a_traceparent_a_session_starts_its_own_trace(
        spans_of: tuple[TracerProvider, InMemorySpanExporter], weather_mock: MockUpstream) -> None:
    provider, exporter = spans_of
    async with relay_for(weather_mock, tracer_provider=provider) as server:
        async with realtime_client(server) as client:
            await client.wait_type("session.created")
            session = next(iter(server.sessions.values()))
        await session.wait_closed()
    [root] = by_name(list(exporter.get_finished_spans()), "relay.session")
    assert root.parent is None and root.context.trace_id != CLIENT_TRACE


def test_the_relay_runs_unchanged_without_opentelemetry(tmp_path: Any) -> None:
    """A subprocess where importing opentelemetry fails, with OTEL_* asking for traces: the relay
    warns once, serves a whole tool call, and never imports it; nor does it import it at startup
    when the packages are there and nothing asks for traces."""
    code = textwrap.dedent("""
        import asyncio, json, logging, sys

        class NoOpenTelemetry:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ImportError(f"No module named {name!r}")

        sys.meta_path.insert(0, NoOpenTelemetry())
        from relay.mock import MockUpstream
        from tests.support.clients import realtime_client
        from tests.support.keys import PROVIDER_KEY
        from tests.support.relays import captured_logs, relay_for, weather_turn
        from tests.support.tools import WEATHER_SCRIPT, get_weather

        async def main():
            with captured_logs() as logs:
                async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, \\
                        relay_for(mock, tools=[get_weather]) as server:
                    async with realtime_client(server, headers={"traceparent": sys.argv[1]}) as client:
                        done = await weather_turn(client, says="found")
            assert "sunny in Paris" in json.dumps(done)
            assert not any(name.startswith("opentelemetry") for name in sys.modules)
            warnings = [line for line in logs.getvalue().splitlines() if "otel extra" in line]
            assert len(warnings) == 1, warnings

        asyncio.run(main())
    """)
    environment = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code, TRACEPARENT], check=True, timeout=60, cwd=REPO,
                   env=environment)
    startup = ("import sys, relay.cli, relay.edges.serve, relay.session.loop, relay.session.runner, relay.observe.tracing; "
               "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported at startup'")
    subprocess.run([sys.executable, "-c", startup], check=True, timeout=60, cwd=REPO, env={"PATH": "/usr/bin:/bin"})


async def test_relay_serve_exports_over_otlp_as_the_otel_variables_say(
        weather_mock: MockUpstream, tmp_path: Any) -> None:
    """`relay serve --workers 2` with OTEL_EXPORTER_OTLP_ENDPOINT: each worker sets up the SDK from
    the variables and, when SIGTERM stops it, exports what it still holds to the collector (here
    a minimal OTLP/HTTP receiver on loopback)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[ExportTraceServiceRequest] = []
    got_session = asyncio.Event()

    async def collector(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        request = ExportTraceServiceRequest.FromString(await reader.readexactly(length))
        received.append(request)
        if any(span.name == "relay.session" for resource in request.resource_spans
               for scope in resource.scope_spans for span in scope.spans):
            got_session.set()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(collector, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    log: list[str] = []
    env = {"OPENAI_API_KEY": PROVIDER_KEY, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
           "OTEL_SERVICE_NAME": "relay-under-test"}
    async with server, relay_process("serve", "--port", "0", "--upstream", weather_mock.url, "--dialect", "openai",
                                     "--workers", "2", "--drain-seconds", "0", cwd=tmp_path, env=env) as relay:
        assert relay.stderr is not None
        first = await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
        await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
        async with realtime_client(first["url"].removesuffix("/v1/realtime"), token=None,
                                   headers={"traceparent": TRACEPARENT}) as client:
            await client.wait_type("session.created")
        await next_log_line(relay.stderr, lambda r: r["msg"] == "session end", log)
        relay.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(relay.wait(), 10) == 0
        await asyncio.wait_for(got_session.wait(), 5)
    [resource] = [resource for request in received for resource in request.resource_spans
                  if any(span.name == "relay.session" for scope in resource.scope_spans for span in scope.spans)]
    service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
    [span] = [span for scope in resource.scope_spans for span in scope.spans]
    assert (service, span.name, span.trace_id.hex()) == ("relay-under-test", "relay.session", f"{CLIENT_TRACE:032x}")


async def test_an_attached_call_is_traced_too(spans_of: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans_of
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, realtime_client(mock.base_url, token=None) as primary:
        await primary.wait_type("session.created")
        await primary.send(session_tools([WEATHER_TOOL]))
        await primary.wait_type("session.updated")
        call_id = mock.sessions[0].call_id
        async with sidecar_on(mock, call_id, [get_weather], tracer_provider=provider) as (sidecar, _):
            await primary.send(user_text("What's the weather in Paris?"))
            await primary.send({"type": "response.create"})
            await primary.wait_for(lambda e: e["type"] == "response.done" and "sunny" in json.dumps(e["response"]))
        await sidecar.ended.wait()
    spans = list(exporter.get_finished_spans())
    [root] = by_name(spans, "relay.session")
    assert (root.attributes["relay.mode"], root.attributes["relay.call.id"]) == ("sidecar", call_id)
    [call] = by_name(spans, "execute_tool get_weather")
    [response] = [span for span in by_name(spans, "relay.response")
                  if span.attributes["gen_ai.response.id"] == call.attributes["gen_ai.response.id"]]
    assert parent_of(call) == response.context.span_id and parent_of(response) == root.context.span_id
    [follow_up] = by_name(spans, "relay.follow_up")
    assert [link.context.span_id for link in follow_up.links] == [call.context.span_id]


def test_a_session_trace_from_notices_alone(spans_of: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    """What the engine may say in odd orders: a create sent again keeps its span, a create never
    answered and a call still open end with the session, a failed response is an error, a call
    that never ran (an unknown tool) still gets its span, a handler's exception is recorded."""
    from relay.engine import Notice
    from relay.observe.tracing import Tracing
    from relay.session.policy import ended_in_failure

    provider, exporter = spans_of
    trace = Tracing(provider.get_tracer("test")).session(session_id="rs_1", mode="proxy", dialect="gemini",
                                                        upstream="example.test:443")
    for kind, fields in [
        ("response", {"phase": "created", "response_id": "r1", "creator": "server"}),
        ("tool_started", {"call_id": "c1", "name": "lookup", "response_id": "r1"}),
        ("tool_started", {"call_id": "c2", "name": "hangs", "response_id": "r1"}),
        ("response", {"phase": "done", "response_id": "r1", "status": "failed", "reason": None}),
        ("tool_call", {"call_id": "c3", "name": "nope", "outcome": "unknown_tool", "response_id": "r1"}),
    ]:
        trace.notice(Notice(kind, fields))
    with pytest.raises(LookupError), trace.handler_scope("c1"):
        raise LookupError("no such city")
    trace.notice(Notice("tool_call", {"call_id": "c1", "name": "lookup", "outcome": "error", "status": "completed"}))
    trace.notice(Notice("follow_up", {"event_id": "e1", "call_ids": "c1,c3"}))
    trace.notice(Notice("follow_up", {"event_id": "e1", "call_ids": "c1,c3"}))   # refused, sent again
    trace.end(by="relay", code=1011, reason="upstream unavailable", failed=ended_in_failure("relay", 1011),
              tool_calls=3)
    trace.notice(Notice("tool_call", {"call_id": "c2", "name": "hangs", "outcome": "abandoned"}))   # too late
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert sorted(spans) == ["execute_tool hangs", "execute_tool lookup", "execute_tool nope", "relay.follow_up",
                             "relay.response", "relay.session"]
    assert spans["relay.session"].status.status_code is StatusCode.ERROR
    assert spans["relay.session"].attributes["gen_ai.provider.name"] == "gcp.gemini"
    assert spans["relay.response"].status.status_code is StatusCode.ERROR
    lookup = spans["execute_tool lookup"]
    assert [event.name for event in lookup.events] == ["exception"]
    assert lookup.attributes["error.type"] == "error"
    assert spans["execute_tool nope"].attributes["relay.tool.outcome"] == "unknown_tool"
    assert parent_of(spans["execute_tool nope"]) == spans["relay.response"].context.span_id
    assert spans["execute_tool hangs"].attributes["relay.ended_with_session"] is True
    follow_up = spans["relay.follow_up"]
    assert [event.name for event in follow_up.events] == ["relay.create_sent_again"]
    assert follow_up.attributes["relay.ended_with_session"] is True
    assert len(follow_up.links) == 2
