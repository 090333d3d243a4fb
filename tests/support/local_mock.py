"""The mock upstream's sans-I/O core run in-process: no loop, no sockets, no clock.

`LocalMock` holds one `relay.mock.session.MockSession` and carries out its actions itself, as
`MockUpstream` does over sockets, except that every response stream is stepped at once, to its end
or to a hold (a reply with `hold` or `hold_before_done`), and its events are handed back as a list.
So the test decides when a held response finishes, when the user barges in, what the model says on
its own account, and from which connection a client frame comes: the relay under test (`RELAY`) or
a second writer on the same session (`OTHER`, whose events, errors included, the relay never sees,
as over sockets). Ids are drawn from a seeded generator, so a run repeats itself exactly.

A failure inside the mock raises here, rather than becoming a `server_error` event as over a socket:
in a test, a traceback says more.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from relay.dialects import OPENAI, OpenAIFamily
from relay.mock import (
    Faults,
    MockConnection,
    MockScript,
    MockSession,
    Reply,
    ResponseRun,
    StreamOptions,
    ToolCall,
)
from relay.mock.quirks import Quirks
from relay.mock.requests import Action, Emit, Stream, Wake
from relay.mock.responses import Pause
from relay.mock.wire import DEFAULT_MODEL, Wire, seed_ids

RELAY, OTHER = 0, 1
"""Connection indexes: the relay under test, and a second writer on the same session."""

ENGINE_SCRIPT = MockScript(
    default=Reply(say="Okay."),
    options=StreamOptions(audio_chunks=1, audio_chunk_bytes=480, strict_tools=False),
)
"""What the model does unless a test says otherwise: answers "Okay.", speaks tool outputs back, and
makes whatever calls a test scripts, declared or not (engine tests give the calls themselves);
each spoken message carries one audio delta of 10 ms."""

Event = dict[str, Any]


class LocalMock:
    """One mock session driven in-process; every method returns the events the relay receives."""

    def __init__(self, dialect: OpenAIFamily = OPENAI, script: MockScript = ENGINE_SCRIPT, *,
                 seed: int | None = 0, quirks: Quirks | None = None) -> None:
        if seed is not None:   # None: several live sessions share the generator (a benchmark's upstream)
            seed_ids(seed)
        wire = Wire.of(dialect, quirks)   # the provider's quirks as documented, unless given
        self.session = MockSession(wire, script, Faults(), DEFAULT_MODEL, {"model": DEFAULT_MODEL})
        self.errors: list[Event] = []
        """Every `error` event the mock sent, to any connection."""
        self._held: dict[str, Iterator[Event | Pause]] = {}

    # ---- what the relay causes ---------------------------------------------------------------
    def connect(self) -> list[Event]:
        """The relay's connection opens: `session.created`."""
        connection = MockConnection(index=RELAY, path="/v1/realtime", query={"model": DEFAULT_MODEL}, headers={},
                                    auth="bearer")
        return self._run(self.session.connected(connection))

    def receive(self, frame: str | bytes, origin: int = RELAY) -> list[Event]:
        """A client frame from `origin` arrives; the events it causes."""
        try:
            event = json.loads(frame)
        except (ValueError, RecursionError) as exc:
            return self._run(self.session.invalid_frame(str(exc) or type(exc).__name__, origin))
        return self._run(self.session.handle(event, origin))

    # ---- what the server does on its own --------------------------------------------------------
    def respond(self, outputs: list[str | ToolCall], *, finish: bool = True,
                stop: Callable[[Event], bool] | None = None) -> list[Event]:
        """A response of the server's own, as server VAD starts one: a spoken text first, if any,
        then the calls. `finish=False` holds it before `response.done` until `finish_response()` or
        a cancel; `stop` leaves its stream right after the first event it matches, mid-item."""
        texts = [output for output in outputs if isinstance(output, str)]
        calls = tuple(output for output in outputs if isinstance(output, ToolCall))
        assert len(texts) <= 1 and outputs[:len(texts)] == texts, "a reply says one text, before its calls"
        assert self.session.active_response is None, "a response is already active"
        reply = Reply(say=texts[0] if texts else None, calls=calls, hold_before_done=not finish)
        return self._run(self.session.start_response({}, origin="server", reply=reply)[1], stop)

    def finish_response(self) -> list[Event]:
        """The active response runs to its end (nothing when none is active)."""
        run = self.session.active_response
        if run is None:
            return []
        run.release()
        return self._step(run, self._held.pop(run.id), None)

    def barge_in(self) -> list[Event]:
        """The user starts speaking: `speech_started`, which cuts an in-conversation response."""
        return self._run(self.session.speech_started()[1])

    def user_turn(self, transcript: str = "hello") -> list[Event]:
        """A user audio turn committed without VAD events (no barge-in), with its transcript."""
        return self._run(self.session.commit_user_turn(transcript))

    @property
    def hold_responses(self) -> bool:
        """Whether every response, the relay's own included, waits before `response.done` until
        `finish_response()` or a cancel (the script option `hold_before_done`)."""
        return self.session.script.options.hold_before_done

    @hold_responses.setter
    def hold_responses(self, hold: bool) -> None:
        script = self.session.script
        options = script.options.model_copy(update={"hold_before_done": hold})
        self.session.script = script.model_copy(update={"options": options})

    # ---- looking -----------------------------------------------------------------------------
    @property
    def items(self) -> list[Event]:
        """The conversation, in order."""
        return self.session.items

    @property
    def active(self) -> ResponseRun | None:
        return self.session.active_response

    @property
    def responses(self) -> list[ResponseRun]:
        return self.session.responses

    def response(self, response_id: str) -> ResponseRun:
        return next(run for run in self.session.responses if run.id == response_id)

    # ---- carrying out actions -----------------------------------------------------------------
    def _run(self, actions: list[Action], stop: Callable[[Event], bool] | None = None) -> list[Event]:
        events: list[Event] = []
        for action in actions:
            if isinstance(action, Emit):
                assert isinstance(action.event, dict)
                if action.event.get("type") == "error":
                    self.errors.append(action.event)
                if action.to in (None, RELAY):
                    events.append(action.event)
            elif isinstance(action, Stream):
                events += self._step(action.run, action.run.steps(), stop)
            elif isinstance(action, Wake) and action.run.id in self._held:
                events += self._step(action.run, self._held.pop(action.run.id), None)
        return events

    def _step(self, run: ResponseRun, stream: Iterator[Event | Pause],
              stop: Callable[[Event], bool] | None) -> list[Event]:
        """Step a response stream until it ends, holds (kept for a later `Wake`), or `stop` says so.
        Timed pauses (paced audio) pass at once: there is no clock here."""
        events: list[Event] = []
        for step in stream:
            if isinstance(step, Pause):
                if step.seconds is None:
                    self._held[run.id] = stream
                    return events
                continue
            events.append(step)
            if stop is not None and stop(step):
                self._held[run.id] = stream
                return events
        return events


def model_call(name: str, arguments: str = "{}", call_id: str | None = None) -> ToolCall:
    """A function call the model makes, with its arguments as the JSON text it streams."""
    return ToolCall(name=name, arguments=arguments, call_id=call_id)
