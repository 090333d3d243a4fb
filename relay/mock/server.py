"""`MockUpstream`: the network edge around `MockSession`s.

It serves the realtime WebSocket paths (`/v1/realtime`, `/openai/v1/realtime`, and the Azure
preview `/openai/realtime`; in `gemini` mode the BidiGenerateContent paths), checks auth and
routes handshakes, feeds client frames to the session
state machines, carries out their actions (sending events with the configured faults, running
response streams, waking them), and serves the fake REST API for calls (relay/mock/rest.py, on
uvicorn). Every task it starts belongs to it and is cancelled and awaited when it stops.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import weakref
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, NamedTuple

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request as WsRequest
from websockets.http11 import Response as WsResponse

from relay.errors import RelayError
from relay.mock.faults import Faults
from relay.dialects.gemini_codec import event_of as gemini_event_of
from relay.mock.gemini import GEMINI, GeminiMockSession, Hangup
from relay.mock.gemini import URL_PATH as GEMINI_URL_PATH
from relay.mock.handshake import VOICE_LIVE_PATH, Refusal, Route, route_handshake
from relay.mock.live import LIVE, LiveMockSession, live_route
from relay.mock.live_backend import LiveOptions
from relay.mock.live_calls import LiveCalls
from relay.mock.quirks import Quirks, quirks_of
from relay.mock.requests import Action, Emit, Stream, Wake
from relay.mock.responses import Pause, ResponseRun
from relay.mock.rest import rest_app
from relay.mock.script import MockScript, Reply
from relay.mock.session import MockConnection, MockSession
from relay.mock.wire import DEFAULT_MODEL, DIALECTS, Dialect, Wire
from relay.session.policy import NORMAL_CLOSURE
from relay.transports.asgi import AppServer
from relay.transports.websockets import abort

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
VOICE_LIVE_API_VERSION = "2026-07-15"
_URL_PATHS = {GEMINI: GEMINI_URL_PATH, "voicelive": f"{VOICE_LIVE_PATH}?api-version={VOICE_LIVE_API_VERSION}",
              LIVE: "/v1/live/sessions"}
AZURE_PREVIEW_MODEL = "gpt-4o-realtime-preview-2024-12-17"


class RestPortUnavailable(RelayError, OSError):
    """The fake REST API's port cannot be listened on (the WebSocket port could): a separate
    error, so that `relay mock` can name the port and the option that clashed."""

    def __init__(self, errno: int | None, strerror: str, port: int) -> None:
        super().__init__(errno, strerror)
        self.port = port


class Record(NamedTuple):
    """One event that crossed a mock socket."""

    session_id: str
    connection: int
    event: dict[str, Any]


Predicate = Callable[[dict[str, Any]], bool]


def _matches(predicate: Predicate, event: dict[str, Any]) -> bool:
    """Predicates may index freely: an event without the key simply does not match."""
    try:
        return bool(predicate(event))
    except (KeyError, IndexError, TypeError, AttributeError):
        return False


class _Journal:
    """Records in arrival order, and waiters woken by the record that satisfies them."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self._waiters: list[tuple[Predicate, str | None, asyncio.Future[Record]]] = []

    def add(self, record: Record) -> None:
        self.records.append(record)
        for waiter in list(self._waiters):
            predicate, session_id, future = waiter
            if not future.done() and session_id in (None, record.session_id) and _matches(predicate, record.event):
                future.set_result(record)
                self._waiters.remove(waiter)

    async def wait_for(self, predicate: Predicate, timeout: float, start: int, session_id: str | None) -> Record:
        for record in self.records[start:]:
            if session_id in (None, record.session_id) and _matches(predicate, record.event):
                return record
        future: asyncio.Future[Record] = asyncio.get_running_loop().create_future()
        waiter = (predicate, session_id, future)
        self._waiters.append(waiter)
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise TimeoutError(f"no matching event within {timeout}s") from None
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class Wait:
    """One wait of the mock: a fault's `event_delay` or a paced response's `pause`, how long it
    was to last, and whether it `elapsed` or was `woken` early (a cancel)."""

    kind: str
    seconds: float
    ended: str


class MockUpstream:
    """A protocol-faithful fake of the realtime API, on 127.0.0.1 by default:
    `async with MockUpstream(...) as mock:`; see `relay.mock` for the whole API."""

    def __init__(
        self,
        script: MockScript | None = None,
        dialect: Dialect | Literal["gemini", "live"] = "openai",
        api_key: str | None = None,
        faults: Faults | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        rest_port: int = 0,
        quirks: Quirks | None = None,
    ) -> None:
        if dialect not in DIALECTS and dialect not in (GEMINI, LIVE):
            raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join((*DIALECTS, GEMINI, LIVE))}")
        self.script = script or MockScript()
        self.dialect = dialect
        self.api_key = api_key
        self.faults = faults or Faults()
        self.quirks = quirks or quirks_of(dialect)
        """What the provider's server does differently (relay/mock/quirks.py): as documented unless given."""
        self.host = host
        self.sessions: list[MockSession | GeminiMockSession | LiveMockSession] = []
        self.live_options = LiveOptions()   # GPT-Live sessions' behaviour (relay/mock/live_backend.py)
        self.live_calls = LiveCalls(self)   # GPT-Live's SIP calls (relay/mock/live_calls.py)
        self.handshakes: list[tuple[str, int | None]] = []   # every one got: (path, a refusal's status or None)
        self._requested_ports = (port, rest_port)
        self._received = _Journal()
        self._sent = _Journal()
        self._ws_server: Server | None = None
        self._rest_server: AppServer | None = None
        self._rest_task: asyncio.Task[None] | None = None
        self._routes: weakref.WeakKeyDictionary[ServerConnection, Route] = weakref.WeakKeyDictionary()
        self._sockets: dict[tuple[str, int], ServerConnection] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._session_tasks: dict[str, set[asyncio.Task[None]]] = {}
        self._wakers: dict[str, asyncio.Event] = {}
        self._finished: dict[str, asyncio.Event] = {}
        self._ended: dict[str, asyncio.Event] = {}
        self.waits: deque[Wait] = deque(maxlen=1000)
        """The waits the mock made, latest last (fault delays, paced audio): what tests check
        instead of a clock."""

    # -- lifecycle -----------------------------------------------------------------------------
    async def __aenter__(self) -> MockUpstream:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        port, rest_port = self._requested_ports
        self._ws_server = await serve(
            self._serve_socket,
            self.host,
            port,
            process_request=self._process_request,
            select_subprotocol=lambda _conn, offered: "realtime" if "realtime" in offered else None,
            max_size=MAX_MESSAGE_BYTES,
        )
        try:
            rest_server = AppServer(rest_app(self), self.host, rest_port)
            rest_server.listen()
        except OSError as exc:
            await self.stop()
            raise RestPortUnavailable(exc.errno, exc.strerror or str(exc), rest_port) from exc
        except BaseException:
            await self.stop()
            raise
        self._rest_server = rest_server
        self._rest_task = asyncio.get_running_loop().create_task(rest_server.serve())

    async def stop(self) -> None:
        if self._ws_server is not None:
            self._ws_server.close()
            await self._ws_server.wait_closed()
        if self._rest_task is not None:
            self._rest_task.cancel()   # at once: what is in flight is cancelled, as for the sockets
            await asyncio.gather(self._rest_task, return_exceptions=True)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def port(self) -> int:
        if self._ws_server is None:
            raise RuntimeError("the mock upstream is not started")
        return self._ws_server.sockets[0].getsockname()[1]

    @property
    def rest_port(self) -> int:
        if self._rest_server is None:
            raise RuntimeError("the mock upstream is not started")
        return self._rest_server.port

    @property
    def base_url(self) -> str:
        return f"ws://{_netloc(self.host, self.port)}"

    @property
    def url(self) -> str:
        return f"{self.base_url}{_URL_PATHS.get(self.dialect, '/v1/realtime')}"

    @property
    def rest_url(self) -> str:
        return f"http://{_netloc(self.host, self.rest_port)}/v1"

    # -- what happened -------------------------------------------------------------------------
    @property
    def received(self) -> list[Record]:
        """Every client event received (parsed JSON objects), in order."""
        return self._received.records

    @property
    def sent(self) -> list[Record]:
        """Every server event sent, once per connection it reached (raw injected frames excluded)."""
        return self._sent.records

    async def wait_for(
        self, predicate: Predicate, timeout: float = 5.0, *, start: int = 0, session: MockSession | None = None
    ) -> Record:
        """The first received client event from index `start` on that satisfies `predicate`,
        waiting for it if needed; raises TimeoutError."""
        return await self._received.wait_for(predicate, timeout, start, session.id if session else None)

    async def wait_for_sent(
        self, predicate: Predicate, timeout: float = 5.0, *, start: int = 0, session: MockSession | None = None
    ) -> Record:
        """Like `wait_for`, over the server events sent."""
        return await self._sent.wait_for(predicate, timeout, start, session.id if session else None)

    async def close_live(self, session: LiveMockSession, reason: str = "expired") -> None:
        """GPT-Live: the service ends the session (`expired`, `content`, `remote_hangup`...)."""
        await self._run(session, session.close(reason))

    def find_session(self, call_id: str) -> MockSession | None:
        return next((s for s in self.sessions if isinstance(s, MockSession) and s.call_id == call_id), None)

    # -- driving sessions from tests -----------------------------------------------------------
    def create_call(self, model: str = DEFAULT_MODEL) -> str:
        """Create a session with no socket (like an incoming SIP call) and return its call_id, for a
        sideband (`?call_id=`) and the REST accept/reject/hangup (GPT-Live: `live_calls.create()`)."""
        if self.dialect == LIVE:
            return self.live_calls.create().id
        return self._new_session(self._wire(beta=False), model, {}, is_call=True).call_id

    def start_response(
        self, session: MockSession, reply: Reply | None = None, *, request: dict[str, Any] | None = None
    ) -> ResponseRun:
        """Start a response on the server's own account, as server VAD would (the script chooses
        the reply unless one is given). Raises RuntimeError while another response is active."""
        if session.active_response is not None:
            raise RuntimeError(f"session {session.id} already has an active response")
        run, actions = session.start_response(request or {}, origin="server", reply=reply)
        for action in actions:
            if isinstance(action, Stream):
                self._start_stream(session, action.run)
        return run

    async def user_turn(
        self, session: MockSession, transcript: str | None = None, *, respond: bool | None = None
    ) -> None:
        """Play a user's spoken turn as server VAD reports it: speech started (cancelling an
        in-conversation response with `turn_detected`, a barge-in), speech stopped, the commit, the
        user item with its transcript (given, else the script's next), then a response if
        `respond` (default: the session's `turn_detection.create_response`)."""
        if isinstance(session, LiveMockSession):   # GPT-Live: the transcript, then the script's reply
            await self._run(session, session.user_turn(transcript or ""))
            return
        item_id, actions, interrupted = session.speech_started()
        await self._run(session, actions)
        if interrupted is not None:
            await self.wait_response_finished(interrupted)
        await self._run(session, session.speech_stopped(item_id, transcript, respond))

    def release(self, session: MockSession) -> None:
        """Let the session's held response (a reply with `hold` or `hold_before_done`) run to its end."""
        run = session.active_response
        if run is not None:
            run.release()
            self._wake(run)

    async def wait_session_ended(self, session: MockSession, timeout: float = 5.0) -> None:
        """Wait until the session ended (its last socket closed, or it was hung up or closed)."""
        await asyncio.wait_for(self._ended[session.id].wait(), timeout)

    async def wait_response_finished(self, run: ResponseRun, timeout: float = 5.0) -> None:
        finished = self._finished.get(run.id)
        if finished is not None:
            await asyncio.wait_for(finished.wait(), timeout)

    async def inject(self, session: MockSession, events: Any) -> None:
        """Send arbitrary server events (dicts, sent as JSON) or raw frames (str/bytes), or a list
        of them, to every connection of the session, as they are."""
        for event in events if isinstance(events, list) else [events]:
            await self._emit(session, event, None)

    async def interrupt(self, session: GeminiMockSession) -> None:
        """Gemini: the user barges in. With a turn open the model stops (`interrupted`) and its
        unanswered calls are cancelled; with none, nothing is said (`GeminiMockSession.interrupt`)."""
        await self._run(session, session.interrupt())

    async def go_away(self, session: GeminiMockSession, time_left: str = "10s") -> None:
        """Gemini: warn that the connection will close soon (`goAway`)."""
        await self._run(session, session.go_away(time_left))

    async def close_session(self, session: MockSession | GeminiMockSession, code: int = NORMAL_CLOSURE,
                            reason: str = "") -> None:
        """End a session and close its sockets with `code` (a call hung up, an upstream ending)."""
        self._end(session)
        sockets = [self._sockets.get((session.id, conn.index)) for conn in session.connections]
        await asyncio.gather(*(ws.close(code, reason) for ws in sockets if ws is not None))

    # -- handshake (the rules are relay/mock/handshake.py's) -------------------------------------
    def _wire(self, *, beta: bool) -> Wire:
        return Wire(beta=beta or self.dialect == "openai-beta", foundry=self.dialect == "foundry", quirks=self.quirks)

    def _process_request(self, connection: ServerConnection, request: WsRequest) -> WsResponse | None:
        offered = [p.strip() for value in request.headers.get_all("Sec-WebSocket-Protocol") for p in value.split(",")]
        if self.dialect == LIVE:
            decided = live_route(self.api_key, request.path, _headers(request.headers), offered, self.sessions)
        else:
            decided = route_handshake(self.dialect, self.api_key, request.path, _headers(request.headers), offered, self.find_session)
        self.handshakes.append((request.path, decided.status if isinstance(decided, Refusal) else None))
        if isinstance(decided, Refusal):
            return connection.respond(decided.status, decided.body)
        self._routes[connection] = decided
        return None

    # -- sockets -------------------------------------------------------------------------------
    def _new_session(self, wire: Wire, model: str, query: dict[str, str], *, is_call: bool) -> MockSession:
        reported = None
        if self.dialect in ("azure", "foundry"):
            reported = AZURE_PREVIEW_MODEL if wire.beta else DEFAULT_MODEL
        faults = copy.deepcopy(self.faults)
        session = MockSession(wire, self.script, faults, model, query, is_call=is_call, reported_model=reported)
        self.sessions.append(session)
        self._ended[session.id] = asyncio.Event()
        return session

    async def _serve_socket(self, ws: ServerConnection) -> None:
        route = self._routes.pop(ws)
        session: MockSession | GeminiMockSession | None = route.session
        first: str | bytes | None = None
        if self.dialect == GEMINI and session is None:   # a setup with a handle continues a session
            first, session = await _resumed_session(ws, self.sessions)
            if session is not None and session.ended:   # resumed after its connections all closed
                session.ended, self._ended[session.id] = False, asyncio.Event()
        if self.dialect in (GEMINI, LIVE) and session is None:   # a new session (a Live sideband joins one)
            make = GeminiMockSession if self.dialect == GEMINI else partial(LiveMockSession, options=self.live_options)
            session = make(self.script, copy.deepcopy(self.faults), route.query, self.quirks)
            self.sessions.append(session)
            self._ended[session.id] = asyncio.Event()
        elif session is None:
            model = route.query.get("model") or route.query.get("deployment") or DEFAULT_MODEL
            session = self._new_session(self._wire(beta=route.beta), model, route.query, is_call=False)
        elif session.ended:
            await ws.close(NORMAL_CLOSURE, "call ended")
            return
        connection = _connection(route, len(session.connections), ws)
        self._sockets[(session.id, connection.index)] = ws
        try:
            await self._run(session, session.connected(connection))
            if first is not None:
                await self._on_frame(session, connection, first)
            async for message in ws:
                await self._on_frame(session, connection, message)
        except ConnectionClosed:
            pass
        finally:
            connection.closed = True
            self._sockets.pop((session.id, connection.index), None)
            if not session.is_call and all(conn.closed for conn in session.connections):
                self._end(session)

    async def _on_frame(
        self, session: MockSession | GeminiMockSession, connection: MockConnection, message: str | bytes
    ) -> None:
        try:
            event = json.loads(message)
        except (ValueError, RecursionError) as exc:  # ValueError includes bad UTF-8 in a binary frame
            actions = session.invalid_frame(str(exc) or type(exc).__name__, connection.index)
        else:
            if isinstance(event, dict):
                self._received.add(Record(session.id, connection.index, event))
            try:
                actions = session.handle(event, connection.index)
            except Exception:
                log.exception("mock session %s failed to handle a client event", session.id)
                actions = session.internal_error(event, connection.index)
        await self._run(session, actions)

    async def _run(self, session: MockSession | GeminiMockSession, actions: list[Action | Hangup]) -> None:
        for action in actions:
            if isinstance(action, Emit):
                await self._emit(session, action.event, action.to)
            elif isinstance(action, Hangup):
                await self.close_session(session, action.code, action.reason)
                return
            elif isinstance(action, Stream):
                assert isinstance(session, MockSession)
                self._start_stream(session, action.run)
            elif isinstance(action, Wake):
                self._wake(action.run)

    def _wake(self, run: ResponseRun) -> None:
        waker = self._wakers.get(run.id)
        if waker is not None:
            waker.set()

    async def _emit(
        self, session: MockSession | GeminiMockSession, event: dict[str, Any] | str | bytes, to: int | None
    ) -> None:
        for connection in list(session.connections):
            if not connection.closed and to in (None, connection.index):
                await self._deliver(session, connection, event)

    async def _deliver(
        self, session: MockSession | GeminiMockSession, connection: MockConnection, event: dict[str, Any] | str | bytes
    ) -> None:
        faults = session.faults
        is_done = isinstance(event, dict) and str(event.get("type", "")).endswith(".done")
        frame: str | bytes = json.dumps(event) if isinstance(event, dict) else event
        if isinstance(session, GeminiMockSession) and isinstance(frame, str) and isinstance(event, dict):
            frame = frame.encode()   # the Gemini service sends its JSON in binary frames
        for _ in range(2 if is_done and faults.duplicate_done else 1):
            if faults.event_delay:
                await asyncio.sleep(faults.event_delay)
                self.waits.append(Wait("event_delay", faults.event_delay, "elapsed"))
            ws = self._sockets.get((session.id, connection.index))
            if ws is None or connection.closed:
                return
            try:
                await ws.send(frame)
            except ConnectionClosed:
                return
            connection.events_sent += 1
            if isinstance(event, dict):
                self._sent.add(Record(session.id, connection.index, event))
            if faults.drop_after_events is not None and connection.events_sent >= faults.drop_after_events:
                connection.closed = True
                if faults.drop_close_code is None:
                    abort(ws)
                else:
                    await ws.close(faults.drop_close_code, "dropped by fault injection")
                return

    # -- tasks ---------------------------------------------------------------------------------
    def _spawn(self, session: MockSession | GeminiMockSession, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        owned = self._session_tasks.setdefault(session.id, set())
        self._tasks.add(task)
        owned.add(task)

        def forget(done: asyncio.Task[None]) -> None:
            self._tasks.discard(done)
            owned.discard(done)
            if not done.cancelled() and done.exception() is not None:
                log.error("mock session %s task failed", session.id, exc_info=done.exception())

        task.add_done_callback(forget)

    def _start_stream(self, session: MockSession, run: ResponseRun) -> None:
        self._finished[run.id] = asyncio.Event()
        self._spawn(session, self._stream(session, run))

    async def _stream(self, session: MockSession, run: ResponseRun) -> None:
        try:
            for step in run.steps():
                if isinstance(step, Pause):
                    waker = self._wakers[run.id] = asyncio.Event()
                    ended = "woken"
                    try:
                        await asyncio.wait_for(waker.wait(), step.seconds)
                    except TimeoutError:
                        ended = "elapsed"
                    finally:
                        self._wakers.pop(run.id, None)
                    if step.seconds is not None:
                        self.waits.append(Wait("pause", step.seconds, ended))
                else:
                    await self._emit(session, step, None)
        finally:
            self._finished.pop(run.id).set()

    def _end(self, session: MockSession | GeminiMockSession) -> None:
        session.ended = True
        self._ended[session.id].set()
        for task in self._session_tasks.pop(session.id, set()):
            task.cancel()

    # -- REST (relay/mock/rest.py) --------------------------------------------------------------
    async def accept_call(self, session: MockSession, config: Any) -> None:
        """A REST accept: apply `config` (a GA session config) to the call and send what follows;
        raises ProtocolError for an invalid config."""
        await self._run(session, session.accept(config))


async def _resumed_session(ws: ServerConnection, sessions: list[Any]) -> tuple[str | bytes | None, GeminiMockSession | None]:
    """A new Gemini connection's first message, and the session it continues when it is a setup
    with one of that session's resumption handles (None: a new session)."""
    try:
        first = await ws.recv()
        data = json.loads(first)
    except ConnectionClosed:
        return None, None
    except (ValueError, RecursionError):
        return first, None
    message = gemini_event_of(data) if isinstance(data, dict) else None
    return first, next((session for session in sessions
                        if isinstance(session, GeminiMockSession) and session.resumed_by(message)), None)


def _connection(route: Route, index: int, ws: ServerConnection) -> MockConnection:
    """The mock's record of a socket of a session, as its handshake was routed."""
    return MockConnection(index=index, path=route.path, query=route.query, headers=route.headers, auth=route.auth,
                          subprotocol=ws.subprotocol)


def _headers(headers: Headers) -> dict[str, str]:
    merged: dict[str, str] = {}
    for name, value in headers.raw_items():
        key = name.lower()
        merged[key] = f"{merged[key]}, {value}" if key in merged else value
    return merged
