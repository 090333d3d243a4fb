"""Scripted conversations on a delegating wire, GPT-Live's: the same `Script` as on the other
wires (`relay.offline.scripted`), played by the project's GPT-Live mock (`relay.mock.live`) in
process, against the relay's real engine and the user's real tools, on virtual time.

    from relay.testing import Script, Turn, call

    WEATHER = Script(Turn(say="Let me check.", calls=[call("get_weather", city="Paris")]))

    def test_the_backend_calls_the_tool_once():
        with WEATHER.start([get_weather], dialect="live", delegation="responses") as session:
            session.user("What's the weather in Paris?")
            session.advance(3)
        session.expect().next_call("get_weather").output(contains="sunny").spoken("sunny")

A turn's `calls` are what the model delegates, in the session's delegation mode (`delegation`):

- `responses` (the default): a Responses backend calls the tools (function calls in the nested
  `response.output_item.done`); the relay answers its own, the caller answers its own
  (`client_tools`: declared in its `session.start`, answered with a `function_call_output` and the
  batch's `response.create`, as a client application does);
- `client`: one client delegation (`session.delegation.created`, no tool, no arguments), which the
  relay's delegate (`relay.tools.delegate`, among the tools) answers with appends.

`mode="sidecar"` runs the relay attached to the session's sideband, as `relay attach` does, beside
the caller's application on its own connection (relay/offline/sidecar_app.py): the application
sends the `session.start` and the audio, answers its own tools and asks for their response; the
relay declares its tools on the sideband, reads the server's events there (the caller's audio
reflected, the model's track with its timing) and answers its own.

GPT-Live's timeline advances with the input audio only: the scripted caller sends 100 ms of
silence for every 100 ms of virtual time `advance` lets pass, so the model speaks, and appends are
placed and acknowledged, as time goes. A turn's `ends` other than `done` has no GPT-Live meaning
and is refused. Strict mode (the default) fails at an error from the upstream and at a turn never
used.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Callable, Iterable

import msgspec

from relay.dialects import live as wire
from relay.mock import Faults, MockConnection
from relay.mock.gemini import Hangup
from relay.mock.live import LiveMockSession
from relay.mock.requests import Emit
from relay.mock.wire import event_text, seed_ids
from relay.offline.expect import failure
from relay.offline.harness import HarnessSession
from relay.offline.sidecar_app import APP, RELAY, SidecarApp, chosen_mode
from relay.recording.format import RELAY_TO_UPSTREAM
from relay.tools import ToolRegistry
from relay.tools.sources import ToolSources

MODEL = "gpt-live-1"
BACKEND_MODEL = "gpt-5.4"
AUDIO_STEP = 0.1
START_EPOCH = 1_767_225_600   # 2026-01-01T00:00:00Z: the mock's wall clock at virtual time 0, so its
                              # `expires_at` and `created_at` are the same on every run
"""Seconds of input audio the scripted caller sends at a time (silence, PCM16 at 24 kHz)."""
_SILENCE = base64.b64encode(bytes(int(24_000 * 2 * AUDIO_STEP))).decode()
CLIENT, RESPONSES, _ = wire.DELEGATION_TARGETS
DELEGATIONS = (RESPONSES, CLIENT)


class StrictScript:
    """What a scripted session (this module's, `relay.offline.scripted.ScriptedSession`) checks in
    strict mode beside the harness's own: an error from the upstream fails the step it happens in,
    a turn of the script never used fails at the end of the `with` block. `script_picks`: the
    replies the mock chose so far (`turn` for each of the script's)."""

    strict: bool
    script: Any
    timeline: Any
    upstream_closes: tuple[tuple[int, str], ...] = ()
    """Each close of the upstream's own (code, reason): the mock's answer to something it was sent."""

    fail: Callable[[str, str], None]
    close: Callable[[], None]
    mark: Callable[[str, str], None]

    def upstream_closed(self, code: int, reason: str) -> None:
        """The upstream closed the session itself: kept (`upstream_closes`) and marked on the timeline."""
        self.upstream_closes += ((code, reason),)
        self.mark("closed", f"the upstream closed the session ({code}: {reason})")

    def script_picks(self) -> list[str]:
        raise NotImplementedError

    def upstream_error(self, what: str) -> None:
        if self.strict:
            self.fail("no error from the upstream", what)

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        self.close()
        if exc_type is None:
            self.check_script_used()

    def check_script_used(self) -> None:
        """Strict mode: every turn of the script was used."""
        used = self.script_picks().count("turn")
        if self.strict and used < len(self.script.turns):
            turn = self.script.turns[used]
            raise failure(self.timeline, f"the model to use all {len(self.script.turns)} turns of the script",
                          f"turn {used + 1} ({turn.say or ', '.join(c.name for c in turn.calls) or 'empty'}) "
                          "was never used: the relay did not ask the model for that response", None)


class DelegatingSession(SidecarApp, StrictScript, HarnessSession):
    """One scripted GPT-Live conversation (see the module docstring). `script` is a
    `relay.offline.scripted.Script`; options as `ScriptedSession`'s: `delegation` (`responses` or
    `client`), `mode` (`proxy` or `sidecar`), `client_tools` (the caller's own, in Responses
    delegation), `strict`, and the harness's `config`, `engine`, `faults`, `thread_limit`, `name`."""

    kind = "scripted session"

    def __init__(self, script: Any, tools: ToolSources = (), *, dialect: str = "live", delegation: str = RESPONSES,
                 client_tools: Iterable[Callable[..., Any]] = (), strict: bool | None = None,
                 mode: str | None = None, **options: Any) -> None:
        if delegation not in DELEGATIONS:
            raise ValueError(f"delegation is one of {', '.join(DELEGATIONS)}, not {delegation!r}")
        for number, turn in enumerate(script.turns, start=1):
            if turn.ends != "done":
                raise ValueError(f"turn {number} ends {turn.ends!r}, which GPT-Live has no way to play: "
                                 "its model cancels nothing")
        strict = script.strict if strict is None else strict
        sidecar = chosen_mode(mode, options, dialect, strict)
        super().__init__(tools, dialect=dialect, strict=strict, **options)
        self.script = script
        self.delegation = delegation
        self.client_tools = ToolRegistry(client_tools)
        self._owed: list[dict[str, Any]] = []     # the caller's calls of the batch in progress
        self.refused_for_app: set[str] = set()   # the relay's creates refused for the application's outputs
        seed_ids(0)   # the mock's ids: the same on every run
        self.mock = LiveMockSession(script.mock_script(), Faults(), wall=lambda: START_EPOCH + self.now)
        self._relay = RELAY if sidecar else 0   # the relay's connection to the mock
        primary = MockConnection(index=0, path=wire.LIVE_PATH, query={}, headers={}, auth="bearer")
        if not sidecar:
            self.from_upstream(self._carry(self.mock.connected(primary)))
            self.from_caller([self._session_start()])
        else:
            self._beside()
            self._carry(self.mock.connected(primary))
            self.from_caller([self._session_start()])
            self.relay_attached = True
            self.from_upstream(self._carry(self.mock.connected(MockConnection(
                index=RELAY, path=f"{wire.LIVE_PATH}/{self.mock.id}/attach", query={}, headers={}, auth="bearer"))))
        self._run(self.now)

    def _session_start(self) -> str:
        if self.delegation == CLIENT:
            delegation: dict[str, Any] = {"type": CLIENT}
        else:
            tools = [self.dialect.function_tool(s.name, s.description, s.parameters) for s in self.client_tools]
            delegation = {"type": RESPONSES, RESPONSES: {"model": BACKEND_MODEL, "tools": tools}}
        return wire.encode(wire.SessionStart(session={"model": MODEL, "delegation": delegation}))

    # ---- what the test does -------------------------------------------------------------------
    def user(self, text: str) -> None:
        """The caller says `text` (its transcript on the session's timeline); the model answers
        with its next turn."""
        if self.closed:
            raise RuntimeError(f"the session ended at {self.now:.3f} s")
        self.from_upstream(self._carry(self.mock.user_turn(text)))
        self._run(self.now)

    def advance(self, seconds: float) -> None:
        """Let `seconds` of virtual time pass, the caller sending silence all along (GPT-Live's
        timeline, and with it the model's speech and the appends' places, advances with it)."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        end = self.now + seconds
        while self.now < end - 1e-9 and not self.closed:
            self.from_caller([wire.encode(wire.InputAudioAppend(audio=_SILENCE))])
            self._run(min(end, self.now + AUDIO_STEP))

    def script_picks(self) -> list[str]:
        return self.mock.picks

    # ---- the peers ----------------------------------------------------------------------------
    def _upstream_receive(self, frame: str | bytes) -> list[str | bytes]:
        return self._from(frame, self._relay)

    def _app_sends(self, frame: str | bytes) -> list[str | bytes]:
        return self._from(frame, APP)

    def _from(self, frame: str | bytes, origin: int) -> list[str | bytes]:
        """The server reads `frame` from the connection `origin`: what it sends the relay back."""
        try:
            data = _read(frame)
        except ValueError:
            return self._carry(self.mock.invalid_frame("not JSON", origin))
        return self._carry(self.mock.handle(data, origin))

    def _caller_receive(self, frame: str | bytes) -> list[str | bytes]:
        """The caller answers its own tools' calls (Responses delegation), as a client application
        does: each output, then the batch's one `response.create` once its response completed."""
        if not len(self.client_tools) or self.closed:
            return []
        event = wire.event_of(_object(frame))
        if not isinstance(event, wire.ResponseEnvelope):
            return []
        nested = wire.backend_event(event)
        if isinstance(nested, wire.BackendItemDone):
            item = nested.item if isinstance(nested.item, dict) else {}
            if item.get("type") == wire.FUNCTION_CALL and item.get("name") in self.client_tools:
                self._owed.append(item)
            return []
        if not isinstance(nested, wire.BackendCompleted) or not self._owed:
            return []
        frames: list[str | bytes] = []
        for item in self._owed:
            spec = self.client_tools.get(str(item["name"]))
            assert spec is not None
            arguments = json.loads(item.get("arguments") or "{}")
            output = spec.handler(**(arguments if isinstance(arguments, dict) else {}))
            frames.append(wire.encode(wire.ResponseItemCreate(item={
                "type": wire.FUNCTION_CALL_OUTPUT, "call_id": item["call_id"],
                "output": output if isinstance(output, str) else json.dumps(output)})))
        self._owed = []
        return [*frames, wire.encode(wire.ResponseCreate())]

    def _partial_for_app(self, refused: wire.Error) -> bool:
        """A sidecar: the server refuses a create of the relay's as a partial batch when only the
        application's own calls lack their outputs (the sideband sees none of them: the relay
        asked, the application's own create continues the batch once it answers,
        relay/engine/client_asks.py `_sidecar_continues`). Such a refusal is noted
        (`refused_for_app`, by the create's event id), not taken as an error of the session's."""
        if not self.sidecar:
            return False
        missing = [call for call in self.mock.backend.batch.values() if call.output is None]
        named = refused.client_event_id
        if not missing or not isinstance(named, str) or any(call.name not in self.client_tools for call in missing):
            return False
        if not any(frame.direction == RELAY_TO_UPSTREAM and frame.raw and _CREATE in frame.raw
                   and f'"{named}"' in frame.raw for frame in reversed(self.frames)):
            return False   # not a create of the relay's: refused for a reason of its own
        self.refused_for_app.add(named)
        return True

    def _carry(self, actions: list[Any]) -> list[str | bytes]:
        """The frames the mock's actions send the relay: an event to every connection, or to the
        relay's (a sidecar's application is sent the rest: `SidecarApp.reaches_relay`)."""
        frames: list[str | bytes] = []
        relay = self._relay
        for action in actions:
            if isinstance(action, Emit):
                event = action.event
                frame = event if isinstance(event, (str, bytes)) else event_text(event)
                if not self.reaches_relay(action.to, frame, relay):
                    continue
                # only an `error` is read (typed): not the model's audio track, every 100 ms
                refused = wire.event_of(event) if isinstance(event, dict) and event.get("type") == _ERROR else None
                if isinstance(refused, wire.Error) and not self._partial_for_app(refused):
                    self.upstream_error(f"the upstream refused something: {refused.error}")
                frames.append(frame)
            elif isinstance(action, Hangup):
                self.upstream_closed(action.code, action.reason)
                self.loop.call_soon(self.end, "upstream closed the session")
        return frames


_ERROR = wire.Error.__struct_config__.tag
_CREATE = f'"{wire.ResponseCreate.__struct_config__.tag}"'


def _read(frame: str | bytes) -> Any:
    """A frame's JSON, as `json.loads` reads it (ValueError: not JSON): msgspec first, at a
    fraction of the cost on the caller's audio appends; what it refuses (NaN, a number past a
    float's range, a lone surrogate) `json.loads` decides."""
    try:
        return msgspec.json.decode(frame)
    except ValueError:
        return json.loads(frame)


def _object(frame: str | bytes) -> Any:
    try:
        return json.loads(frame)
    except ValueError:
        return None


__all__ = ["DelegatingSession", "StrictScript"]
