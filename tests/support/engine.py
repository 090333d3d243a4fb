"""One engine driver for every dialect: a fake clock, no sockets, no loop.

`EngineDriver(tools, dialect=...)` builds the dialect's engine (`relay.engine.new_engine`) and
feeds it frames from both sides. For the OpenAI family the upstream is the project's mock, run
in-process (`LocalMock`): every frame the engine sends upstream reaches it at once (unless
`deliver` is off) and its answers are fed back, in order, until nothing moves. For Gemini Live the
test writes the server's messages itself (JSON in binary frames, as the service sends them).

Handlers never run by themselves: a test decides when each finishes (`finish`, `fail`,
`yield_value`, `end_stream`, `run_all`), which is how it orders completions.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, Iterable

from relay.dialects import OPENAI, Dialect, GeminiDialect
from relay.engine import (
    CancelHandler,
    Close,
    EngineConfig,
    Notice,
    OpenAIEngine,
    Outcome,
    SendClient,
    SendUpstream,
    StartHandler,
    new_engine,
)
from relay.mock import MockScript
from relay.mock.quirks import Quirks
from tests.support.local_mock import ENGINE_SCRIPT, LocalMock

Message = dict[str, Any]
GEMINI_MODEL = "models/gemini-live-2.5-flash-preview"


class EngineDriver:
    def __init__(self, tools: Iterable[Any] = (), *, dialect: Dialect = OPENAI, config: EngineConfig | None = None,
                 script: MockScript = ENGINE_SCRIPT, deliver: bool = True, quirks: Quirks | None = None) -> None:
        self.dialect = dialect
        self.gemini = isinstance(dialect, GeminiDialect)
        self.engine = new_engine(tools, dialect=dialect, config=config or EngineConfig(strict=True),
                                 session_id="test", id_prefix="t")
        self._mock = None if self.gemini else LocalMock(dialect, script, quirks=quirks)
        self.now = 1000.0
        self.deliver = deliver
        """Send the engine's upstream frames to the mock at once; when off they wait in `undelivered`."""
        self.undelivered: deque[str | bytes] = deque()
        self.upstream_frames: list[str | bytes] = []   # every frame the engine sent upstream, raw
        self.client_frames: list[str | bytes] = []     # every frame it sent the client, raw
        self.started: dict[str, StartHandler] = {}
        self.cancelled: list[CancelHandler] = []
        self.notices: list[Notice] = []
        self.closes: list[Close] = []
        self._reported: set[str] = set()
        self._inbox: deque[tuple[str, Any]] = deque()
        self._busy = False

    @property
    def mock(self) -> LocalMock:
        """The in-process mock upstream (the OpenAI family only)."""
        assert self._mock is not None, "Gemini tests write the server's messages themselves"
        return self._mock

    # ---- feeding -----------------------------------------------------------------------------
    def upstream(self, messages: Message | list[Message] | str | bytes, *, binary: bool | None = None) -> None:
        """Server messages arrive: a dict or a list of them, as JSON (in binary frames for Gemini,
        unless `binary` says otherwise), or one raw frame as it is."""
        for frame in self._frames(messages, self.gemini if binary is None else binary):
            self._inbox.append(("upstream", frame))
        self._drain()

    def client(self, message: Message | str | bytes, *, binary: bool = False) -> None:
        """A client message arrives: a dict as JSON (in a text frame unless `binary`), or a raw frame."""
        for frame in self._frames(message, binary):
            self._inbox.append(("client", frame))
        self._drain()

    def connect(self) -> None:
        """OpenAI: the upstream connection opens (`session.created`)."""
        self.upstream(self.mock.connect())

    def setup(self, tools: list[Message] | None = None) -> None:
        """Gemini: the client's setup (with its own tools, if any) and the server's setupComplete."""
        setup: Message = {"model": GEMINI_MODEL}
        if tools is not None:
            setup["tools"] = tools
        self.client({"setup": setup})
        self.upstream({"setupComplete": {}})

    def respond(self, outputs: list[Any], **options: Any) -> None:
        """OpenAI: the model produces a response of its own, as after server VAD (`LocalMock.respond`)."""
        self.upstream(self.mock.respond(outputs, **options))

    def flush(self) -> None:
        """Deliver the frames held back while `deliver` was off."""
        while self.undelivered:
            self.upstream(self.mock.receive(self.undelivered.popleft()))

    def disconnect(self) -> None:
        self._act(self.engine.upstream_disconnected(self.now))

    def reconnect(self) -> None:
        self._act(self.engine.upstream_reconnected(self.now))
        self._drain()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._inbox.append(("tick", None))
        self._drain()

    def finish(self, call_id: str, value: Any = None, *, dt: float = 0.001) -> None:
        self.now += dt
        self._inbox.append(("finished", (call_id, Outcome.returned(value))))
        self._drain()

    def fail(self, call_id: str, error: BaseException, *, dt: float = 0.001) -> None:
        self.now += dt
        self._inbox.append(("finished", (call_id, Outcome.raised(error))))
        self._drain()

    def yield_value(self, call_id: str, value: Any) -> None:
        self._inbox.append(("yielded", (call_id, value)))
        self._drain()

    def end_stream(self, call_id: str) -> None:
        self._inbox.append(("finished", (call_id, Outcome.ended())))
        self._drain()

    def run_all(self) -> None:
        """Run every started sync handler not reported yet (finished or cancelled), in start order."""
        for call_id, start in list(self.started.items()):
            if call_id in self._reported or call_id in {c.call_id for c in self.cancelled}:
                continue
            try:
                value = start.tool.handler(**start.arguments)
            except Exception as exc:  # reported like the runner does
                self.fail(call_id, exc)
            else:
                self.finish(call_id, value)

    @staticmethod
    def _frames(messages: Message | list[Message] | str | bytes, binary: bool) -> list[str | bytes]:
        if isinstance(messages, (str, bytes)):
            return [messages]
        texts = [json.dumps(m) for m in ([messages] if isinstance(messages, dict) else messages)]
        return [text.encode() for text in texts] if binary else list(texts)

    def _drain(self) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            while self._inbox:
                kind, payload = self._inbox.popleft()
                if kind == "upstream":
                    actions = self.engine.receive_upstream(payload, self.now)
                elif kind == "client":
                    actions = self.engine.receive_client(payload, self.now)
                elif kind == "tick":
                    actions = self.engine.tick(self.now)
                elif kind == "yielded":
                    actions = self.engine.handler_yielded(payload[0], payload[1], self.now)
                else:
                    self._reported.add(payload[0])
                    actions = self.engine.handler_finished(payload[0], payload[1], self.now)
                self._act(actions)
            self._check_hold_bound()
        finally:
            self._busy = False

    def _check_hold_bound(self) -> None:
        """Every engine test keeps the promise that a client's create waits at most the hold
        limit for the relay's tools (once no response is active)."""
        view = getattr(self.engine, "view", None)
        assert view is None or not view.held_past_limit(), (
            f"a client's response.create held past the hold limit at {self.now}: {self.engine.dump()}")

    def _act(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, SendUpstream):
                self.upstream_frames.append(action.frame)
                if self._mock is None:
                    continue
                if self.deliver:
                    self._inbox.extend(("upstream", json.dumps(event)) for event in self._mock.receive(action.frame))
                else:
                    self.undelivered.append(action.frame)
            elif isinstance(action, SendClient):
                self.client_frames.append(action.frame)
            elif isinstance(action, StartHandler):
                self.started[action.call_id] = action
            elif isinstance(action, CancelHandler):
                self.cancelled.append(action)
            elif isinstance(action, Notice):
                self.notices.append(action)
            elif isinstance(action, Close):
                self.closes.append(action)

    def spy_decoded(self) -> list[str | bytes]:
        """From now on, every frame the engine parses (decodes as JSON), in order: what a test
        shows was forwarded without being parsed is not among them."""
        decoded: list[str | bytes] = []
        decode = self.engine.ctx.decode
        self.engine.ctx.decode = lambda frame: decoded.append(frame) or decode(frame)   # type: ignore[method-assign]
        return decoded

    # ---- looking -----------------------------------------------------------------------------
    @property
    def sent(self) -> list[Message]:
        """Every message the engine sent upstream, parsed."""
        return [json.loads(frame) for frame in self.upstream_frames]

    @property
    def to_client(self) -> list[Message]:
        """Every message the engine sent the client, parsed."""
        return [json.loads(frame) for frame in self.client_frames]

    def sent_of(self, type_: str) -> list[Message]:
        """OpenAI: the events of this type the engine sent upstream."""
        return [e for e in self.sent if e["type"] == type_]

    @property
    def creates(self) -> list[Message]:
        """OpenAI: every response.create the engine sent."""
        return self.sent_of("response.create")

    @property
    def outputs(self) -> list[Message]:
        """What the relay sent as answers to calls, in order: OpenAI `conversation.item.create`
        events of function_call_output items; Gemini FunctionResponses."""
        if self.gemini:
            return [answer for message in self.sent if "toolResponse" in message
                    for answer in message["toolResponse"]["functionResponses"]]
        return [e for e in self.sent_of("conversation.item.create") if e["item"]["type"] == "function_call_output"]

    def outputs_for(self, call_id: str) -> list[Message]:
        """The answers sent for one call: OpenAI output items, Gemini FunctionResponses."""
        if self.gemini:
            return [answer for answer in self.outputs if answer["id"] == call_id]
        return [e["item"] for e in self.outputs if e["item"]["call_id"] == call_id]

    def output_for(self, call_id: str) -> Message:
        """The one answer sent for a call."""
        matches = self.outputs_for(call_id)
        assert len(matches) == 1, f"expected one output for {call_id}, got {matches}"
        return matches[0]

    def call_ids(self) -> list[str]:
        return [e.call_id for e in self.engine.ledger]


class DeadlineStuckInThePast(OpenAIEngine):
    """An engine whose deadline a tick does not move (for its first STUCK_FOR asks): what a bug
    in the engine would look like to what drives it (the session loop, replay, the harness). Its
    deadline, 1.0 (`DEADLINE`), is long past on a real clock, and one virtual second in for the
    harness and a replay (whose clock starts at 0). Without a guard, a driver fires it until the asks
    run out (with a real bug: forever)."""

    STUCK_FOR = 1000
    DEADLINE = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ticks = 0
        self.asked = 0

    def next_deadline(self) -> float | None:
        self.asked += 1
        return self.DEADLINE if self.asked <= self.STUCK_FOR else None

    def tick(self, now: float) -> list[Any]:
        self.ticks += 1
        return super().tick(now)


class StuckEngines:
    """An engine factory (`new_engine`'s signature) that makes DeadlineStuckInThePast engines
    and keeps them (`made`), for a test to count their ticks."""

    def __init__(self) -> None:
        self.made: list[DeadlineStuckInThePast] = []

    def __call__(self, *args: Any, **kwargs: Any) -> DeadlineStuckInThePast:
        self.made.append(DeadlineStuckInThePast(*args, **kwargs))
        return self.made[-1]
