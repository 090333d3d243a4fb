"""The live inspector beyond `relay serve`: the hub driven without sockets (frames through a
session's tap by hand), the ASGI app driven through the ASGI protocol in-process (what a
Starlette or FastAPI mount hands it), `relay attach --inspector` (in-process and as a user runs
it), and the command-line refusals."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.dialects import OPENAI
from relay.edges.config import ServerConfig
from relay.edges.serve import RelayServer
from relay.engine.calls import CallOutcome
from relay.inspector.live import LiveHub, asgi_app, serve_inspector
from relay.inspector.live import hub as hub_module
from relay.inspector.model import build_model
from relay.mock import MockUpstream
from relay.recording.reader import read_recording
from relay.recording.taps import Taps
from relay.recording.writer import RecordingWriter
from tests.support.clients import TIMEOUT, http_get, inspector_feed, raw_http
from tests.support.frames import said
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.paths import REPO
from tests.support.processes import next_log_line, relay_process
from tests.support.relays import accepted_call, sidecar_on
from tests.support.tools import WEATHER_SCRIPT, get_weather

CALL = {"type": "response.output_item.done", "response_id": "resp_1", "item": {
    "type": "function_call", "id": "item_1", "call_id": "call_1", "name": "get_weather",
    "arguments": '{"city": "Paris"}', "status": "completed"}}
OUTPUT = {"type": "conversation.item.create", "event_id": "rs_x_e1", "item": {
    "type": "function_call_output", "call_id": "call_1", "output": "sunny in Paris"}}
TIMED_OUT = {"type": "conversation.item.create", "event_id": "rs_x_e1", "item": {
    "type": "function_call_output", "call_id": "call_1", "output": json.dumps({"error": "timed out after 5 s"}),
    "status": "incomplete"}}


def runtime(**config: Any) -> RelayServer:
    """An edge's runtime (tools, redactor, upstream), never started."""
    return RelayServer(ServerConfig(upstream="ws://127.0.0.1:9/v1/realtime", dialect="openai", api_key=PROVIDER_KEY,
                                    tools=[get_weather], inspector=True, **config))


def open_live(hub: LiveHub, edge: RelayServer | None = None, *, taps: Taps | None = None,
              recording: Any = None, extra_header: dict[str, Any] | None = None) -> Any:
    """Session `rs_x` of `edge` (a runtime() by default) opened in `hub` as the proxy opens one."""
    edge = edge or runtime()
    return hub.open_session("rs_x", header=edge.session_header(session_id="rs_x", dialect=OPENAI, mode="proxy",
                                                               extra_header=extra_header or {}),
                            as_recorded=edge.recording_filter(recording), recording=recording,
                            taps=taps if taps is not None else Taps())


class Page:
    """A watcher as the hub sees one: what it was posted."""

    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []
        self.woken = 0

    def post(self, message: str) -> None:
        self.posted.append(json.loads(message))

    def wake(self) -> None:
        self.woken += 1

    def sessions_changed(self) -> None:
        pass


# ---- the hub, without sockets --------------------------------------------------------------
async def test_the_hub_feeds_a_watched_session_in_batches_and_forgets_it_when_the_last_watcher_leaves() -> None:
    hub = LiveHub()
    edge = runtime()
    recorded: list[tuple[str, str | bytes]] = []

    class Recorder:
        def record(self, direction: str, frame: str | bytes) -> None:
            recorded.append((direction, frame))

        def record_notice(self, kind: str, fields: dict[str, Any]) -> None:
            pass

        def close(self, reason: str) -> None:
            pass

    inner = Recorder()
    tap = open_live(hub, edge, taps=Taps(inner), extra_header={"id_prefix": "rs_x"})
    session = hub.live["rs_x"]
    assert tap.taps.members == (inner,)                   # nobody watches: the edge's own recorder only
    tap.record("upstream>relay", json.dumps({"type": "session.created"}))
    page = Page()
    snapshot = json.loads(await session.open(page))
    assert snapshot["type"] == "snapshot" and snapshot["model"]["frames"] == []   # not recorded: from now on
    tap.record("upstream>relay", json.dumps(CALL))
    tap.record("relay>upstream", json.dumps(OUTPUT))
    assert page.woken == 1                                # once per batch, not per frame
    await session.flush()
    [delta] = page.posted
    [call] = [e for e in delta["delta"]["events"] if e["kind"] == "call"]
    assert (call["name"], call["output"], call["outcome"]) == ("get_weather", "sunny in Paris", "ok")
    assert len(recorded) == 3                             # the edge's recorder saw every frame all along
    session.leave(page)
    assert tap.taps.members == (inner,) and session.model is None
    tap.close("client left")
    assert hub.sessions()["live"] == [] and [s["id"] for s in hub.sessions()["recent"]] == ["rs_x"]


async def test_a_view_that_falls_behind_stops_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_module, "MAX_PENDING_BYTES", 1000)
    hub = LiveHub()
    tap = open_live(hub)
    session = hub.live["rs_x"]
    page = Page()
    await session.open(page)
    for _ in range(20):                                   # no flush comes: the page's writer is stuck
        tap.record("upstream>relay", json.dumps(CALL))
    assert [m["type"] for m in page.posted] == ["error"] and "fell behind" in page.posted[0]["message"]
    assert session.model is None and not session.watchers
    assert tap.taps.members == ()                         # back to nothing per frame


async def test_the_live_view_of_a_recorded_session_is_what_its_recording_holds(tmp_path: Path) -> None:
    """Secrets (one the edge learnt mid-session, spelt as JSON escapes it) and audio
    (`--record-audio drop`, text and binary frames): the live model, built from the frames the
    tap saw, equals the model of the file the writer wrote."""
    edge = runtime(record_dir=tmp_path, record_audio="drop")
    header = {"id_prefix": "rs_x"}
    # one instant: the frames the tap saw and those of the file have the same times
    writer = edge.recording(session_id="rs_x", dialect=OPENAI, mode="proxy", extra_header=header,
                            writer=functools.partial(RecordingWriter, clock=lambda: 1000.0))
    assert writer is not None
    hub = LiveHub()
    tap = open_live(hub, edge, taps=Taps(writer), recording=writer, extra_header=header)
    session = hub.live["rs_x"]
    page = Page()
    await session.open(page)
    token = "tok/en-5f1c9a7e3b2d"
    edge.redactor.add(token)                              # a refreshed access token
    audio = "QUJD" * 300
    for direction, frame in [
        ("upstream>relay", json.dumps({"type": "session.created", "session": {"id": "sess_1"}})),
        ("client>relay", json.dumps({"type": "input_audio_buffer.append", "audio": audio})),
        ("relay>upstream", json.dumps({"type": "input_audio_buffer.append", "audio": audio})),
        ("upstream>relay", json.dumps({"type": "response.output_audio.delta", "response_id": "resp_1",
                                       "item_id": "item_0", "delta": audio})),
        ("relay>client", json.dumps({"type": "response.output_audio.delta", "response_id": "resp_1",
                                     "item_id": "item_0", "delta": audio}).encode()),
        ("upstream>relay", '{"type":"error","error":{"message":"bad token %s"}}' % token.replace("/", "\\/")),
        ("upstream>relay", '{\n"type":"error","error":{"message":"key \\u0073%s"}}' % PROVIDER_KEY[1:]),
        ("client>relay", f"not JSON, with {PROVIDER_KEY}"),
        ("upstream>relay", json.dumps(CALL)),
        ("relay>upstream", json.dumps(TIMED_OUT)),
    ]:
        tap.record(direction, frame)
    tap.record_notice("tool_call", {"call_id": "call_1", "name": "get_weather", "outcome": CallOutcome.TIMEOUT,
                                    "is_error": True, "message": f"say the key {PROVIDER_KEY} is wrong"})
    tap.record_notice("tool_started", {"call_id": "call_1"})           # not a kind recordings keep
    await session.flush()
    tap.close("client left")
    await session.flush()
    assert session.model is not None
    live = session.model.snapshot()
    recorded = build_model(read_recording(writer.path)).snapshot()
    text = json.dumps(live)
    assert PROVIDER_KEY not in text and token not in text and token.replace("/", "\\/") not in text
    assert live["audio_note"] is not None and "--record-audio drop" in live["audio_note"]
    assert len(live["frames"]) == 6 and live["summary"]["calls"] == 1   # pure audio frames are not listed
    [call] = [e for e in live["events"] if e["kind"] == "call"]
    assert call["outcome"] == "timeout"                  # the relay's decision, not the output's words
    for model in (live, recorded):
        del model["source"]["end"]                        # the file's end line counts the frames
    assert live == recorded


# ---- the ASGI app ----------------------------------------------------------------------------
class Asgi:
    """One ASGI connection to the app, in-process: what it sent, and a way to say more."""

    def __init__(self) -> None:
        self.inbox: anyio.abc.ObjectSendStream[dict[str, Any]]
        self.sent: list[dict[str, Any]] = []
        self.changed = anyio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_for(self, check: Any) -> dict[str, Any]:
        with anyio.fail_after(TIMEOUT):   # a hang guard
            while True:
                found = next((m for m in self.sent if check(m)), None)
                if found is not None:
                    return found
                await self.changed.wait()


def scope(kind: str, path: str, headers: dict[str, str], **more: Any) -> dict[str, Any]:
    """A request under a Starlette-style mount at /inspector (full path, root_path extended)."""
    return {"type": kind, "path": path, "root_path": "/inspector", "query_string": b"", "method": "GET",
            "headers": [(k.lower().encode(), v.encode()) for k, v in {"host": "relay.example", **headers}.items()],
            **more}


@asynccontextmanager
async def asgi_connection(app: Any, request: dict[str, Any], first: dict[str, Any]) -> AsyncIterator[Asgi]:
    connection = Asgi()
    send_stream, receive_stream = anyio.create_memory_object_stream[dict[str, Any]](16)
    connection.inbox = send_stream
    await send_stream.send(first)
    async with anyio.create_task_group() as running:
        running.start_soon(app, request, receive_stream.receive, connection.send)
        yield connection
        await send_stream.send({"type": "websocket.disconnect", "code": 1000})


async def http(app: Any, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    async with asgi_connection(app, scope("http", path, headers or {}), {"type": "http.request"}) as connection:
        await connection.wait_for(lambda m: m["type"] == "http.response.body")
    start, body = connection.sent
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body["body"]


async def test_the_asgi_app_serves_the_page_the_list_and_the_feed_where_it_is_mounted() -> None:
    hub = LiveHub()
    tap = open_live(hub)
    app = asgi_app(hub, token=RELAY_TOKEN)
    status, headers, body = await http(app, "/inspector")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert '"base":"/inspector"' in body.decode()            # the page finds its routes under the mount
    assert (await http(app, "/inspector/sessions"))[0] == 401
    assert (await http(app, "/inspector/sessions", {"Origin": "http://elsewhere.example",
                                                    "Authorization": f"Bearer {RELAY_TOKEN}"}))[0] == 403
    status, _, body = await http(app, "/inspector/sessions", {"Authorization": f"Bearer {RELAY_TOKEN}"})
    assert status == 200 and [s["id"] for s in json.loads(body)["live"]] == ["rs_x"]

    denial = scope("websocket", "/inspector/feed", {}, subprotocols=["relay-inspector"],
                   extensions={"websocket.http.response": {}})
    async with asgi_connection(app, denial, {"type": "websocket.connect"}) as refused:
        start = await refused.wait_for(lambda m: m["type"] == "websocket.http.response.start")
    assert start["status"] == 401
    async with asgi_connection(app, {**denial, "extensions": {}}, {"type": "websocket.connect"}) as refused:
        await refused.wait_for(lambda m: m["type"] == "websocket.close")

    protocol = f"relay-inspector, openai-insecure-api-key.{RELAY_TOKEN}"
    feed_scope = scope("websocket", "/inspector/feed", {"sec-websocket-protocol": protocol},
                       subprotocols=["relay-inspector", f"openai-insecure-api-key.{RELAY_TOKEN}"])
    async with asgi_connection(app, feed_scope, {"type": "websocket.connect"}) as feed:
        accept = await feed.wait_for(lambda m: m["type"] == "websocket.accept")
        assert accept["subprotocol"] == "relay-inspector"
        await feed.wait_for(lambda m: m["type"] == "websocket.send" and json.loads(m["text"])["type"] == "sessions")
        await feed.inbox.send({"type": "websocket.receive", "text": json.dumps({"type": "watch", "session": "rs_x"})})
        await feed.wait_for(lambda m: m["type"] == "websocket.send" and json.loads(m["text"])["type"] == "snapshot")
        tap.record("upstream>relay", json.dumps(CALL))
        tap.record("relay>upstream", json.dumps(OUTPUT))
        delta = await feed.wait_for(lambda m: m["type"] == "websocket.send" and "sunny in Paris" in m["text"])
    assert json.loads(delta["text"])["type"] == "delta"


# ---- relay attach --inspector ----------------------------------------------------------------
async def test_an_attached_call_is_shown_by_its_own_inspector() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        call_id, session = await accepted_call(mock)
        hub = LiveHub()
        async with serve_inspector(hub, "127.0.0.1", 0, token=RELAY_TOKEN) as url:
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            assert (await http_get(port, "/inspector/sessions"))[0] == 401
            page_status, page_headers, page = await http_get(port, "/inspector")
            status, headers, body = await raw_http(port, b"HEAD /inspector HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert (status, body) == (page_status, b"") == (200, b"")   # HEAD: the page's answer, no body
            assert headers["content-length"] == page_headers["content-length"] == str(len(page))
            status, headers, _ = await raw_http(port, b"POST /inspector/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                      b"Content-Length: 2\r\n\r\n{}")
            assert (status, headers["allow"]) == (405, "GET, HEAD")
            async with sidecar_on(mock, call_id, [get_weather], live=hub) as (sidecar, _), \
                    inspector_feed(f"ws://127.0.0.1:{port}") as feed:
                await feed.until(lambda f: [s["id"] for s in f.sessions["live"]] == [sidecar.id])
                [listed] = feed.sessions["live"]
                assert (listed["mode"], listed["call_id"]) == ("sidecar", call_id)
                await feed.watch(sidecar.id)
                await mock.user_turn(session, "What's the weather in Paris?")
                await feed.until(lambda f: [c["output"] for c in f.calls().values()] == ["sunny in Paris"])


async def test_relay_attach_inspector_as_a_user_runs_it(tmp_path: Path) -> None:
    log: list[str] = []
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        call_id, session = await accepted_call(mock)
        async with relay_process("attach", "--call-id", call_id, "--tools", str(REPO / "tests" / "fixtures" /
                                 "weather_tools.py"), "--upstream", mock.url, "--dialect", "openai",
                                 "--inspector", "127.0.0.1:0", "--log-level", "debug", cwd=tmp_path,
                                 env={"OPENAI_API_KEY": PROVIDER_KEY, "RELAY_AUTH_TOKEN": RELAY_TOKEN}) as process:
            assert process.stderr is not None
            line = await next_log_line(process.stderr, lambda r: r["msg"].startswith("live inspector at"), log)
            await next_log_line(process.stderr, lambda r: r["msg"] == "session start", log)
            async with inspector_feed(line["inspector"].replace("http", "ws", 1).removesuffix("/inspector")) as feed:
                await feed.until(lambda f: len(f.sessions["live"]) == 1)
                await feed.watch(feed.sessions["live"][0]["id"])
                await mock.user_turn(session, "What's the weather in Paris?")
                await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "found" in said(e))
                await feed.until(lambda f: [c["outcome"] for c in f.calls().values()] == ["ok"])
            process.terminate()
            await process.wait()
            log += (await process.stderr.read()).decode().splitlines(keepends=True)
    # at debug level websockets logs the feed's handshake headers, the token subprotocol among them
    text = "".join(log)
    assert RELAY_TOKEN not in text and "openai-insecure-api-key.[redacted]" in text


async def test_the_command_line_refuses_what_cannot_work(tmp_path: Path) -> None:
    attach = ["attach", "--call-id", "rtc_x", "--tools", str(REPO / "tests" / "fixtures" / "weather_tools.py"),
              "--log-format", "text"]
    for command, says in (
        (["serve", "--inspector", "--workers", "2", "--port", "0", "--log-format", "text"], "cannot be used with --workers"),
        ([*attach, "--inspector", "no-port-here"], "--inspector takes HOST:PORT"),
        ([*attach, "--inspector", "0.0.0.0:8123"], "refusing to serve the inspector on 0.0.0.0 without a token"),
        (["sidecar", "--tools", str(REPO / "tests" / "fixtures" / "weather_tools.py"), "--host", "0.0.0.0",
          "--port", "0", "--inspector", "--log-format", "text"],
         "refusing to serve the inspector on 0.0.0.0 without a token"),
    ):
        async with relay_process(*command, cwd=tmp_path) as process:   # without RELAY_AUTH_TOKEN
            assert process.stderr is not None
            log = (await process.stderr.read()).decode()
            assert await process.wait() == 2
        [line] = [line for line in log.splitlines() if " ERROR " in line]
        assert says in line and "Traceback" not in log
