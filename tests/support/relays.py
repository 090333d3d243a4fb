"""The relay's edges started for a test against the mock upstream (everything binds 127.0.0.1 port
0): `relay serve` (`relay_for`), a sidecar on a call (`sidecar_on`), a bare stand-in upstream for
what the mock will not do; and what watches them: the relay's log records (`captured_logs`) and a
`LeakGuard` that proves the provider key reached none of what the world saw."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import InvalidStatus

from relay.edges.serve import RelayServer, ServerConfig
from relay.edges.sideband import Sidecar, SidecarConfig
from relay.mock import MockScript, MockSession, MockUpstream
from relay.observe.logs import NARRATING_LOGGERS, JsonFormatter
from relay.session.transport import Transport
from relay.transports.websockets import WebsocketsTransport
from tests.support.clients import TIMEOUT, GeminiClient, RealtimeClient, gemini_client, http_request, realtime_client
from tests.support.frames import user_text
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.tools import WEATHER_TOOL, get_weather

ACTIVE_RESPONSE = "conversation_already_has_active_response"


# ---- relay serve ---------------------------------------------------------------------------------
@asynccontextmanager
async def relay_for(upstream: MockUpstream | str, path: str = "/v1/realtime", **options: Any
                    ) -> AsyncIterator[RelayServer]:
    """A started relay in front of the mock (at `path`) or of a URL, with test defaults: port 0,
    the provider key given explicitly, the relay token required, no drain on exit."""
    settings: dict[str, Any] = {
        "upstream": upstream if isinstance(upstream, str) else upstream.base_url + path,
        "dialect": "openai",
        "port": 0,
        "api_key": PROVIDER_KEY,
        "auth_token": RELAY_TOKEN,
        "drain_seconds": 0.0,
    }
    async with RelayServer(ServerConfig(**(settings | options))) as server:
        yield server


async def weather_turn(client: RealtimeClient, *, says: str = "sunny in Paris",
                       timeout: float = TIMEOUT) -> dict[str, Any]:
    """One user turn that makes the model call `get_weather` (WEATHER_SCRIPT); returns the
    response.done of the follow-up whose output says `says` (by default the tool's output)."""
    await client.send(user_text("What's the weather in Paris?"))
    await client.send({"type": "response.create"})
    return await client.wait_for(lambda e: e["type"] == "response.done"
                                 and says in json.dumps(e["response"]["output"]), timeout)


@asynccontextmanager
async def bare_upstream(handler: Callable[[ServerConnection], Awaitable[None]]) -> AsyncIterator[str]:
    """A bare WebSocket server standing in for the provider, for what the mock will not do (send
    bytes that are not UTF-8, leave a closing handshake unanswered). Yields its realtime URL."""
    async with serve(handler, "127.0.0.1", 0, max_size=None, close_timeout=0.1) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/v1/realtime"


def socket_transport(transport: Transport) -> asyncio.Transport:
    """The asyncio transport under a relay connection, whichever library holds it (its write
    buffer, for a test of flow control)."""
    if isinstance(transport, WebsocketsTransport):
        return transport.connection.transport
    return transport.ws.underlying_transport   # type: ignore[attr-defined]  (relay.transports.picows)


# ---- watching what the relay shows ---------------------------------------------------------------
@contextmanager
def captured_logs() -> Iterator[io.StringIO]:
    """Every record of the relay's loggers (its websockets connections included; not the mock's
    nor the test client's), at DEBUG level, formatted as the CLI does."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(lambda record: not record.name.startswith("relay.mock"))
    relay_logger = logging.getLogger("relay")
    old_level = relay_logger.level
    relay_logger.addHandler(handler)
    relay_logger.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        relay_logger.removeHandler(handler)
        relay_logger.setLevel(old_level)


@contextmanager
def application_log(fmt: str = "%(name)s: %(message)s") -> Iterator[io.StringIO]:
    """The log of an application that runs the relay as a library and logs as
    `logging.basicConfig(level=logging.INFO)` has it: the root logger at INFO, one handler with a
    plain `logging.Formatter` of its own (not the relay's), every record written to the stream.
    The narrating libraries' loggers follow the root, whatever an earlier test set them to."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    narrators = {name: logging.getLogger(name).level for name in NARRATING_LOGGERS}
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for name in narrators:
        logging.getLogger(name).setLevel(logging.NOTSET)
    try:
        yield stream
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, narrator_level in narrators.items():
            logging.getLogger(name).setLevel(narrator_level)


class LeakGuard:
    """What the relay showed the world during one test: every relay log record (its websockets
    connections included, at DEBUG, so handshake headers and frames are logged), the recordings
    it wrote, and whatever the test registers (client frames, close reasons, HTTP bodies). At
    teardown `check()` proves the provider key is in none of it and the relay token is in no log
    line and no recording."""

    def __init__(self, record_dir: Path) -> None:
        self.record_dir = record_dir
        self.log = io.StringIO()
        self._seen: list[tuple[str, str]] = []
        self._stack = ExitStack()

    def __enter__(self) -> LeakGuard:
        self.log = self._stack.enter_context(captured_logs())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def saw(self, where: str, text: str | bytes | bytearray) -> None:
        """Register something a client (or anyone outside the relay) received."""
        self._seen.append((where, text if isinstance(text, str) else bytes(text).decode("utf-8", "replace")))

    @asynccontextmanager
    async def relay(self, upstream: MockUpstream | str, **options: Any) -> AsyncIterator[RelayServer]:
        """`relay_for` that records every session and runs the shared `get_weather`."""
        async with relay_for(upstream, **({"record_dir": self.record_dir, "tools": [get_weather]} | options)) as server:
            yield server

    @asynccontextmanager
    async def gemini_session(self, script: MockScript, tools: list[Any]
                             ) -> AsyncIterator[tuple[MockUpstream, RelayServer, GeminiClient]]:
        """The Gemini mock playing `script`, a relay running `tools` in front of it, and a client
        whose text-only session is set up."""
        async with MockUpstream(script=script, dialect="gemini", api_key=PROVIDER_KEY) as mock, \
                self.relay(mock.url, dialect="gemini", tools=tools) as server, \
                gemini_client(server.base_url, key=RELAY_TOKEN) as client:
            await client.setup(generationConfig={"responseModalities": ["TEXT"]})
            yield mock, server, client

    @asynccontextmanager
    async def client(self, server: RelayServer | str, **options: Any) -> AsyncIterator[RealtimeClient]:
        """A realtime client whose received frames, close reason and refusal body are registered."""
        client: RealtimeClient | None = None
        try:
            async with realtime_client(server, **options) as client:
                yield client
        except InvalidStatus as refused:
            self.saw("refused handshake", refused.response.body or b"")
            raise
        finally:
            if client is not None:
                self.saw("client frames", "\n".join(str(frame) for frame in client.frames))
                self.saw("client close", f"{client.ws.close_code} {client.ws.close_reason}")

    def check(self) -> None:
        texts = [("log", self.log.getvalue()), *self._seen]
        texts += [(f"recording {path.name}", path.read_text(errors="replace"))
                  for path in sorted(self.record_dir.glob("*.jsonl"))]
        for where, text in texts:
            assert PROVIDER_KEY not in text, f"the provider key leaked into the {where}"
            if where == "log" or where.startswith("recording"):
                assert RELAY_TOKEN not in text, f"the relay token leaked into the {where}"


# ---- the sidecar ---------------------------------------------------------------------------------
class SidecarTap:
    """A sidecar tap: every frame it saw (`upstream>relay`) or sent (`relay>upstream`), parsed,
    and a way to wait for one. Frames are recorded before the engine acts on them, in the same
    step, so once a frame is here every earlier one has been fully handled."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []
        self._changed = anyio.Event()

    def __call__(self, direction: str, frame: str | bytes) -> None:
        self.frames.append((direction, json.loads(frame)))
        self._changed.set()
        self._changed = anyio.Event()

    def sent(self, event_type: str) -> list[dict[str, Any]]:
        return [e for d, e in self.frames if d == "relay>upstream" and e["type"] == event_type]

    async def wait_for(self, direction: str, predicate: Callable[[dict[str, Any]], bool], *,
                       start: int = 0, timeout: float = 5.0) -> dict[str, Any]:
        """The first frame from index `start` on in `direction` that satisfies `predicate`."""
        with anyio.fail_after(timeout):
            index = start
            while True:
                while index < len(self.frames):
                    seen_direction, event = self.frames[index]
                    index += 1
                    if seen_direction == direction and _matches(predicate, event):
                        return event
                await self._changed.wait()


def _matches(predicate: Callable[[dict[str, Any]], bool], event: dict[str, Any]) -> bool:
    try:
        return bool(predicate(event))
    except (KeyError, IndexError, TypeError):
        return False


@asynccontextmanager
async def sidecar_on(mock: MockUpstream, call_id: str, tools: list[Any], **options: Any
                     ) -> AsyncIterator[tuple[Sidecar, SidecarTap]]:
    """A sidecar on `call_id` of `mock`, running in a task group, once it has seen the session.
    It detaches on exit. `options` are SidecarConfig fields (`sleep` and `live` go to Sidecar)."""
    tap = SidecarTap()
    sleep = options.pop("sleep", anyio.sleep)
    live = options.pop("live", None)
    config = SidecarConfig(**({"tools": tools, "upstream": mock.url, "dialect": "openai", "api_key": "sk-test"}
                              | options))
    sidecar = Sidecar(call_id, config, tap=tap, sleep=sleep, live=live)
    async with anyio.create_task_group() as group:
        group.start_soon(sidecar.run)
        # its tools first (an MCP server over stdio is a Python process to start: seconds on a
        # loaded machine), then the attach
        await tap.wait_for("upstream>relay", lambda e: e["type"] == "session.created", timeout=TIMEOUT)
        yield sidecar, tap
        await sidecar.stop()


async def accepted_call(mock: MockUpstream) -> tuple[str, MockSession]:
    """A SIP-like call (a session without a socket), accepted with `get_weather` declared, as the
    application's webhook handler would: its call_id and its mock session."""
    call_id = mock.create_call()
    response = await http_request("POST", f"{mock.rest_url}/realtime/calls/{call_id}/accept", {},
                                  json.dumps({"type": "realtime", "tools": [WEATHER_TOOL]}).encode())
    assert response.status_code == 200
    session = mock.find_session(call_id)
    assert session is not None
    return call_id, session
