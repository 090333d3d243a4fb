"""Scripted conversations: the test says what the model does, the relay's real engine and the
user's real tools run against it on virtual time, and the session's events come back.

    from relay.testing import Script, Turn, call

    BOOKING = Script(
        Turn(say="Let me book that.", calls=[call("book_table", restaurant="Luigi", people=2)]),
        Turn(say="Your table is booked."),          # the model's answer after the output
    )

    def test_booking(dialect):                      # "openai" or "gemini": the same script
        with BOOKING.start([book_table], dialect=dialect) as session:
            session.user("A table for two at Luigi's, please")
            session.advance(3.5)
        session.expect().next_call("book_table").output(contains="booked").spoken("booked")
        session.check_invariants()

The model is the project's mock upstream (`relay.mock`), run in-process: its script gets the turns
(`MockScript.turns`), one per response the model gives, in order, except the responses in which
the relay asks it to say something exactly (fillers, tool messages), which it says. A turn says
text, calls tools (several: parallel calls) and ends: `done`, `held` (the response stays open until
`session.end_response()`), `cancelled` (the server cancels it while its calls stream: on OpenAI the
first call's item ends `incomplete` and the response `cancelled`, on Gemini `toolCallCancellation`
withdraws its calls: either way they must never be answered) or `interrupted` (the caller speaks
over it after its output, before it ends).

The caller is scripted too: `session.user(text)` is a spoken turn (on OpenAI, server VAD's
events; on Gemini, text input), `session.barge_in()` speaks over the assistant, and the caller's own
tools (`client_tools`) are declared to the session and answered by it, as a client application
answers its tools.

`mode="sidecar"` runs the relay as `relay attach` does, beside the call: the caller's application
talks to the server itself (its own connection to the mock's session), the relay is attached to
the same session by a second one, and every event the server sends goes to both (an error only
to whichever sent what it refuses). The application hears each event as the relay reads it
(relay/offline/sidecar_app.py); it answers its own tools' calls and asks for their response itself, unseen by the
relay, and never answers the relay's (it sees them: a sidecar hides nothing). The relay declares
its tools to the session (`relay attach --declare-tools`). Gemini Live and Voice Live have no
sidecar; GPT-Live's is `relay.offline.scripted_delegations`'s.

Strict mode (the default) fails at the step where something happens that nobody expected: an
error from the upstream, a response the script has no turn for, a turn never used (at the end),
a scripted call to a tool nobody declared, the engine breaking its own rules.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from relay.dialects import gemini_codec as gemini
from relay.dialects import get_dialect
from relay.dialects.base import ToolFlow
from relay.dialects import openai_codec as wire
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
from relay.mock.gemini import GeminiMockSession, Hangup
from relay.mock.quirks import Quirks, quirks_of
from relay.mock.requests import Emit, Stream, Wake
from relay.mock.responses import Pause
from relay.mock.wire import DEFAULT_MODEL, Wire, event_bytes, event_text, seed_ids
from relay.offline.expect import ExpectationFailed
from relay.offline.harness import HarnessSession
from relay.offline.scripted_delegations import START_EPOCH, DelegatingSession, StrictScript
from relay.offline.sidecar_app import APP, RELAY, SidecarApp, chosen_mode
from relay.offline.replaying import json_object as decode
from relay.tools import ToolRegistry
from relay.tools.sources import ToolSources

Ending = Literal["done", "held", "cancelled", "interrupted"]
ENDINGS = ("done", "held", "cancelled", "interrupted")
GEMINI_MODEL = "models/gemini-live-2.5-flash-preview"
UNSCRIPTED = frozenset({"after_outputs", "rule", "default"})
_STREAMING = StreamOptions(audio_chunks=1, audio_chunk_bytes=480)   # one 10 ms audio delta a message


class ScriptError(ValueError):
    """A script that cannot run as written."""


@dataclass(frozen=True)
class Call:
    """A tool call the model makes: `arguments` an object, or a string sent as it is (to test
    arguments that are not JSON); `call_id` chosen by the test, else drawn."""

    name: str
    arguments: dict[str, Any] | str
    call_id: str | None = None


def call(name: str, arguments: dict[str, Any] | str | None = None, *, call_id: str | None = None,
         **named: Any) -> Call:
    """`call("book_table", people=2)` or `call("book_table", {"people": 2})`."""
    if arguments is not None and named:
        raise ScriptError("give a call's arguments as a dict or as keywords, not both")
    return Call(name, named if arguments is None else arguments, call_id)


@dataclass(frozen=True)
class Turn:
    """What the model does in one response: says `say` (a `str.format` template over the outputs
    when it answers them: `{output}`, `{joined}`, `{by_name[tool]}`), makes `calls`, and `ends`."""

    say: str | None = None
    calls: tuple[Call, ...] = ()
    ends: Ending = "done"

    def __init__(self, say: str | None = None, calls: Iterable[Call] = (), ends: Ending = "done") -> None:
        if ends not in ENDINGS:
            raise ScriptError(f"a turn ends {' | '.join(ENDINGS)}, not {ends!r}")
        object.__setattr__(self, "say", say)
        object.__setattr__(self, "calls", tuple(calls))
        object.__setattr__(self, "ends", ends)

    def reply(self) -> Reply:
        calls = tuple(ToolCall(name=c.name, arguments=c.arguments, call_id=c.call_id) for c in self.calls)
        return Reply(say=self.say, calls=calls, hold_before_done=self.ends != "done")


class Script:
    """The model's turns, in order. One script runs against every dialect (`start`)."""

    def __init__(self, *turns: Turn, strict: bool = True) -> None:
        self.turns = turns
        self.strict = strict

    def mock_script(self) -> MockScript:
        """The script the mock model plays: the turns, and (when they run out, outside strict
        mode) a model that speaks the outputs back."""
        return MockScript(turns=tuple(turn.reply() for turn in self.turns), default=Reply(say="Okay."),
                          after_outputs=Reply(say="{joined}"), options=_STREAMING)

    def start(self, tools: ToolSources = (), *, dialect: str = "openai", **options: Any) -> ScriptedSession:
        """A session of this script against the relay with `tools` (see `ScriptedSession`; on a
        delegating wire, GPT-Live's, `relay.offline.scripted_delegations.DelegatingSession`)."""
        if get_dialect(dialect).flow is ToolFlow.DELEGATIONS:
            return DelegatingSession(self, tools, dialect=dialect, **options)   # type: ignore[return-value]
        return ScriptedSession(self, tools, dialect=dialect, **options)


class ScriptedSession(SidecarApp, StrictScript, HarnessSession):
    """One scripted conversation (see the module docstring). Options: `mode` (`proxy`, the default:
    the caller talks through the relay; `sidecar`: the caller talks to the server, the relay
    attached beside it; a `config` of `EngineConfig(mode="sidecar")` says so too), `client_tools`
    (the caller's own tools: functions it declares and answers), `faults` (`relay.testing.faults`),
    `config` (an `EngineConfig`), `strict` (default: the script's), `quirks` (what the provider's
    server does differently, `relay.testing.Quirks`; default: the dialect's provider as
    documented), and the harness's `engine` (an engine factory), `thread_limit` (the real seconds
    a sync tool may take) and `name`."""

    kind = "scripted session"

    def __init__(self, script: Script, tools: ToolSources = (), *, dialect: str = "openai",
                 client_tools: Iterable[Callable[..., Any]] = (), strict: bool | None = None,
                 quirks: Quirks | None = None, mode: str | None = None, **options: Any) -> None:
        strict = script.strict if strict is None else strict
        sidecar = chosen_mode(mode, options, dialect, strict, ScriptError)
        super().__init__(tools, dialect=dialect, strict=strict, **options)
        self.script = script
        self.quirks = quirks_of(self.dialect.name) if quirks is None else quirks
        self.client_tools = ToolRegistry(client_tools)
        self._check_names()
        seed_ids(0)   # the mock's ids: the same on every run
        if sidecar:
            self._beside()
        self.model: _Model = (_GeminiModel if self.gemini else _OpenAIModel)(self)
        self._picks_seen = 0
        if sidecar:   # the application's call is there first; the relay attaches to it
            self.model.connect_app()
            self.from_caller(self._caller_opening())
            self.from_upstream(self.model.connect())
        else:
            self.from_upstream(self.model.connect())
            self.from_caller(self._caller_opening())
        self._run(self.now)

    def _check_names(self) -> None:
        known = {spec.name for spec in self.tools} | {spec.name for spec in self.client_tools}
        for number, turn in enumerate(self.script.turns, start=1):
            for scripted in turn.calls:
                if scripted.name not in known and self.strict:
                    raise ScriptError(f"turn {number} calls {scripted.name!r}, which neither the relay's tools "
                                      f"({', '.join(s.name for s in self.tools) or 'none'}) nor the caller's "
                                      f"declare")

    # ---- what the test does -------------------------------------------------------------------
    def user(self, text: str) -> None:
        """The caller says `text` (over the assistant, if it is speaking: a barge-in too); the
        model answers with its next turn."""
        self._step(lambda: self.say_now(text))

    def barge_in(self, text: str | None = None) -> None:
        """The caller speaks over the assistant (with `text`: a whole turn, as `user`)."""
        self._step(lambda: self.barge_in_now(text))

    def end_response(self) -> None:
        """A `held` turn ends (its response completes)."""
        self._step(lambda: self.from_upstream(self.model.release()))

    def _step(self, do: Callable[[], None]) -> None:
        if self.closed:
            raise RuntimeError(f"the session ended at {self.now:.3f} s")
        do()
        self._run(self.now)

    def say_now(self, text: str) -> None:
        if self.gemini:
            self.from_caller([gemini.encode(gemini.RealtimeInput(text=text))])
        else:
            self.from_upstream(self.model.user(text))

    def barge_in_now(self, text: str | None = None) -> None:
        if text is not None:
            self.say_now(text)
        else:
            self.from_upstream(self.model.barge_in())

    # ---- the caller ---------------------------------------------------------------------------
    def _app_sends(self, frame: str | bytes) -> list[str | bytes]:
        return self.model.receive(frame, APP)

    def _caller_opening(self) -> list[str | bytes]:
        """What the caller sends first: its tools (OpenAI), its setup (Gemini)."""
        if self.gemini:
            setup = gemini.Setup(model=GEMINI_MODEL,
                                 generation_config=gemini.GenerationConfig(response_modalities=["AUDIO"]),
                                 output_audio_transcription={})
            if len(self.client_tools):
                setup.tools = [gemini.Tool(function_declarations=[
                    gemini.FunctionDeclaration(name=s.name, description=s.description, parameters=s.parameters)
                    for s in self.client_tools])]
            return [gemini.encode(setup)]
        if not len(self.client_tools):
            return []
        session = self.dialect.session_update({"tools": [s.definition() for s in self.client_tools]}, "caller_e1")
        return [json.dumps(session)]

    def _caller_receive(self, frame: str | bytes) -> list[str | bytes]:
        """The caller answers its own tools' calls, as a client application does."""
        if not len(self.client_tools):
            return []   # nothing to answer: the frame is not even read
        event = decode(frame)
        if event is None:
            return []
        if self.gemini:
            calls = [call for message in gemini.messages_of(event) if isinstance(message, gemini.ToolCall)
                     for call in gemini.entries(message.function_calls, gemini.FunctionCall)]
            answers = [gemini.FunctionResponse(id=c.id, name=c.name, response={
                           "output": self._client_answer(c.name, gemini.given(c.args))})
                       for c in calls if isinstance(c.name, str) and c.name in self.client_tools]
            return [gemini.encode(gemini.ToolResponse(function_responses=answers))] if answers else []
        done = wire.event_of(event)
        if not isinstance(done, wire.ResponseDone) or (done.response or {}).get("status") != "completed":
            return []
        frames: list[str | bytes] = []
        for item in (done.response or {}).get("output") or []:
            if item.get("type") == wire.FUNCTION_CALL and item.get("name") in self.client_tools:
                output = self._client_answer(item["name"], json.loads(item.get("arguments") or "{}"))
                frames.append(wire.encode(wire.ItemCreate(item={
                    "type": wire.FUNCTION_CALL_OUTPUT, "call_id": item["call_id"],
                    "output": output if isinstance(output, str) else json.dumps(output)})))
        if frames:
            frames.append(wire.encode(wire.ResponseCreate()))
        return frames

    def _client_answer(self, name: str, arguments: Any) -> Any:
        spec = self.client_tools.get(name)
        assert spec is not None
        return spec.handler(**(arguments if isinstance(arguments, dict) else {}))

    # ---- the model -----------------------------------------------------------------------------
    def _upstream_receive(self, frame: str | bytes) -> list[str | bytes]:
        return self.model.receive(frame, self.model.relay_index)

    def picked(self, picks: list[str]) -> None:
        """The mock chose replies: in strict mode, one the script has no turn for is a failure."""
        for source in picks[self._picks_seen:]:
            if source in UNSCRIPTED and self.strict:
                used = picks.count("turn")
                self.fail("a response the script has a turn for",
                          f"the model was asked for another response after the script's {used} turn"
                          f"{'s' if used != 1 else ''} were used")
        self._picks_seen = len(picks)

    def script_picks(self) -> list[str]:
        return self.model.picks


# ---- the mock, in-process --------------------------------------------------------------------------
class _Model:
    """The mock model of one session, its events handed back as frames."""

    picks: list[str]
    relay_index = 0
    """The mock's connection of the relay (a sidecar's application is `APP`, the relay the next)."""

    def connect(self) -> list[str | bytes]:
        raise NotImplementedError

    def connect_app(self) -> None:
        """A sidecar's application connects (before the relay): it hears the session's opening."""
        raise NotImplementedError

    def receive(self, frame: str | bytes, origin: int = 0) -> list[str | bytes]:
        """`frame` from the connection `origin`: what the server sends the relay back (a sidecar's
        application is sent the rest: `SidecarApp.reaches_relay`)."""
        raise NotImplementedError

    def user(self, text: str) -> list[str | bytes]:
        raise NotImplementedError

    def barge_in(self) -> list[str | bytes]:
        raise NotImplementedError

    def release(self) -> list[str | bytes]:
        raise NotImplementedError


def _connection(index: int = 0) -> MockConnection:
    return MockConnection(index=index, path="/v1/realtime", query={"model": DEFAULT_MODEL}, headers={}, auth="bearer")


class _OpenAIModel(_Model):
    def __init__(self, session: ScriptedSession) -> None:
        self.session = session
        # the server's clock is the session's (from the same epoch as GPT-Live's scripted mock):
        # its `expires_at`, `created_at` and pings are the same on every run
        server = Wire.of(session.dialect, session.quirks, wall=lambda: START_EPOCH + session.now)
        self.mock = MockSession(server, session.script.mock_script(), Faults(), DEFAULT_MODEL, {"model": DEFAULT_MODEL})
        self.picks = self.mock.picks
        self._endings: dict[str, str] = {}
        self._held: dict[str, Iterator[Any]] = {}
        self._errors = wire.names_of((wire.Error,), session.dialect)   # what `_carry` reads as an error
        self.relay_index = RELAY if session.sidecar else 0

    def connect(self) -> list[str | bytes]:
        self.session.relay_attached = True
        return self._carry(self.mock.connected(_connection(self.relay_index)))

    def connect_app(self) -> None:
        self._carry(self.mock.connected(_connection(APP)))

    def receive(self, frame: str | bytes, origin: int = 0) -> list[str | bytes]:
        event = decode(frame)
        if event is None:
            return self._carry(self.mock.invalid_frame("not a JSON object", origin))
        return self._carry(self.mock.handle(event, origin))

    def user(self, text: str) -> list[str | bytes]:
        item_id, actions, _ = self.mock.speech_started()
        frames = self._carry(actions)
        return frames + self._carry(self.mock.speech_stopped(item_id, text, None))

    def barge_in(self) -> list[str | bytes]:
        item_id, actions, _ = self.mock.speech_started()
        frames = self._carry(actions)
        return frames + self._carry(self.mock.speech_stopped(item_id, None, False))

    def release(self) -> list[str | bytes]:
        run = self.mock.active_response
        if run is None or run.id not in self._held:
            return []
        run.release()
        return self._step(run, self._held.pop(run.id))

    def _carry(self, actions: list[Any]) -> list[str | bytes]:
        """The frames the mock's actions send the relay (an event to every connection, or to the
        relay's; a sidecar's application is sent the rest: `SidecarApp.reaches_relay`)."""
        frames: list[str | bytes] = []
        session, relay = self.session, self.relay_index
        for action in actions:
            if isinstance(action, Emit):
                event = action.event
                frame = event if isinstance(event, (str, bytes)) else event_text(event)
                if not session.reaches_relay(action.to, frame, relay):
                    continue
                error = (wire.event_of(event, self.session.dialect)
                         if isinstance(event, dict) and event.get("type") in self._errors else None)
                if isinstance(error, wire.Error):
                    self.session.upstream_error(f"error {json.dumps(error.error)}")
                frames.append(frame)
            elif isinstance(action, Stream):
                self._endings[action.run.id] = self._ending()
                frames += self._step(action.run, action.run.steps())
            elif isinstance(action, Wake) and action.run.id in self._held:
                frames += self._step(action.run, self._held.pop(action.run.id))
        self.session.picked(self.picks)
        return frames

    def _ending(self) -> str:
        """How the response just started ends: its turn's ending, `done` for other replies."""
        if not self.picks or self.picks[-1] != "turn":
            return "done"
        return self.session.script.turns[self.picks.count("turn") - 1].ends

    def _cuts(self, event: dict[str, Any]) -> bool:
        """Where a `cancelled` turn is cut: at its first call's first argument delta, so that the
        call's item ends incomplete (and must never run)."""
        return isinstance(wire.event_of(event, self.session.dialect), wire.FunctionCallArgumentsDelta)

    def _step(self, run: ResponseRun, stream: Iterator[Any]) -> list[str | bytes]:
        """Run a response's events until it ends or holds; a hold ends as its turn says."""
        frames: list[str | bytes] = []
        for step in stream:
            if not isinstance(step, Pause):
                frames.append(event_text(step))
                if self._endings.get(run.id) == "cancelled" and self._cuts(step):
                    run.cancel("client_cancelled")
                continue
            if step.seconds is not None:
                continue   # paced audio: no clock here
            ending = self._endings.get(run.id, "done")
            if ending == "cancelled" and run.cancel("client_cancelled"):
                continue
            if ending == "interrupted":
                item_id, actions, _ = self.mock.speech_started()
                frames += [event_text(a.event) for a in actions if isinstance(a, Emit)]
                self._endings[run.id] = "done"
                frames += self._step(run, stream)
                return frames + self._carry(self.mock.speech_stopped(item_id, None, False))
            self._held[run.id] = stream
            return frames
        return frames


class _GeminiModel(_Model):
    def __init__(self, session: ScriptedSession) -> None:
        self.session = session
        self.mock = GeminiMockSession(session.script.mock_script(), Faults(), quirks=session.quirks)
        self.picks = self.mock.picks

    def connect(self) -> list[str | bytes]:
        return self._carry(self.mock.connected(_connection()))

    def receive(self, frame: str | bytes, origin: int = 0) -> list[str | bytes]:
        event = decode(frame)
        before = len(self.picks)
        if event is None:
            return self._carry(self.mock.invalid_frame("not a JSON object", 0))
        frames = self._carry(self.mock.handle(event, 0))
        if len(self.picks) > before and self.picks[-1] == "turn":
            ending = self.session.script.turns[self.picks.count("turn") - 1].ends
            if ending == "cancelled":
                frames += self._carry(self.mock.withdraw()) + self._carry(self.mock.release())
            elif ending == "interrupted":
                frames += self._carry(self.mock.interrupt())
        return frames

    def user(self, text: str) -> list[str | bytes]:
        raise AssertionError("a Gemini caller's words are client frames")   # ScriptedSession.say_now sends them

    def barge_in(self, generating: bool = False) -> list[str | bytes]:
        return self._carry(self.mock.interrupt(generating))

    def release(self) -> list[str | bytes]:
        return self._carry(self.mock.release())

    def _carry(self, actions: list[Any]) -> list[str | bytes]:
        frames: list[str | bytes] = []
        for action in actions:
            if isinstance(action, Emit):
                event = action.event
                frames.append(event if isinstance(event, bytes) else
                              (event.encode() if isinstance(event, str) else event_bytes(event)))
            elif isinstance(action, Hangup):
                self.session.upstream_error(f"the upstream closed the session ({action.code}: {action.reason})")
                self.session.upstream_closed(action.code, action.reason)
                self.session.loop.call_soon(self.session.end, "upstream closed the session")
        self.session.picked(self.picks)
        return frames


__all__ = ["Call", "ExpectationFailed", "Script", "ScriptError", "ScriptedSession", "Turn", "call"]
