"""Helpers for users' own tests: scripted conversations on virtual time, expectations over any
session, faults on demand, and replays of recordings.

    from relay.testing import Script, Turn, call, expect, faults, replay

    BOOKING = Script(Turn(calls=[call("book_table", restaurant="Luigi", people=2)]),
                     Turn(say="Your table is booked."))

    def test_the_caller_hears_a_filler_then_one_answer():
        with BOOKING.start([book_table], dialect="openai") as session:   # or "gemini"
            session.user("A table for two at Luigi's")
            session.advance(3.5)                                        # virtual seconds
        (session.expect().next_call("book_table", arguments={"people": 2})
                .filler(after=0.8).output(contains="booked").follow_up().spoken("booked")
                .no_more_events())
        session.check_invariants()

    def test_my_tools_still_answer_like_before():
        result = replay("recordings/20260101T000000Z_rs_ab12.jsonl", tools=["my_app/tools.py"])
        assert result.ok, "\\n".join(d.describe() for d in result.divergences)
        expect(result).next_call("lookup_order").output(error=False)

- `Script` / `Turn` / `call`: what the model does, turn by turn; `Script.start(tools, dialect=...)`
  gives a `ScriptedSession` (`user`, `barge_in`, `advance`, `end_response`, `run_until_quiet`,
  `expect`, `check_invariants`, `report`, `save`).
- `expect(x)`: expectations walking the events of a scripted session, a replay's result, a
  recording (path or `Recording`) or a `Timeline`; `check_invariants(x)` the session-wide rules.
- `faults`: `timeout`, `raises`, `slow`, `error_result`, `barge_in`, `drop_upstream`,
  `duplicate_delivery`, for `Script.start(..., faults=[...])` or `replay_with_faults(recording, ...)`.
- `Quirks` / `quirks_of(dialect)`: what a provider's server does differently from OpenAI's (xAI's
  calls joining the conversation at `response.done`, Voice Live's `cancel_previous`, Gemini's
  calls delivered twice...), played by the mock model: `Script.start(..., quirks=...)`. By default
  the dialect's provider as documented (xAI's and Voice Live's quirks on); what the documentation
  leaves open is switched on by hand (Gemini's double delivery: `Quirks(call_parts=True)`).
- `explore(script, tools=..., budget=...)` runs a conversation under many schedules (barge-ins
  at each point of each call, handlers finishing at each provider event, the providers' quirks,
  tools that hang, raise or answer twice), checks every invariant on each, and hands back the
  smallest failing schedule as a recording (relay/offline/explore.py).
- `replay` runs a recorded session against the given tools (decorated functions, ToolSpecs or
  `--tools` SPEC strings) and returns the calls, every frame the relay sent, and the divergences.

Under pytest, the plugin that comes with the package (`relay.offline.pytest_plugin`) replays every
recording of a folder as its own test item (`pytest --relay-recordings recordings/ --relay-tools
my_app/tools.py`), applies an expectations file beside a recording (`NAME.expect.yaml`), and marks
recordings by promotion level (`-m blocking`). docs/testing.md is the guide.
"""

# Only what `__all__` names is public here: the names this module needs for itself are imported
# under private names (and without `from __future__ import annotations`, which would add one).
from pathlib import Path as _Path
from typing import Any as _Any

from relay.mock.quirks import Quirks, quirks_of
from relay.offline import faults
from relay.offline.events import Event
from relay.offline.expect import INVARIANTS, Expect, ExpectationFailed
from relay.offline.expect import check_invariants as _check_invariants
from relay.offline.explore import ExploreResult as _ExploreResult
from relay.offline.faults import Fault
from relay.offline.harness import HarnessSession as _HarnessSession
from relay.offline.recorded import RecordedSession, replay_with_faults
from relay.offline.replay import (
    Divergence,
    ReplayCall,
    ReplayResult,
    replay,
    replay_async,
)
from relay.offline.scripted import (
    Call,
    Script,
    ScriptedSession,
    ScriptError,
    Turn,
    call,
)
from relay.offline.timeline import Timeline
from relay.offline.virtual import VirtualTimeError
from relay.recording.format import Recording as _Recording


def explore(conversation: _Any, tools: _Any = (), *, budget: int = 2000, seed: int = 0, dialect: str | None = None,
            lines: _Any = None, barge_in: str | None = None, invariants: _Any = None, reset: _Any = None,
            time_budget: float | None = None, out: _Any = None, delegation: str | None = None,
            mode: str | None = None) -> _ExploreResult:
    """Run `conversation` (a `Script`, a script file or recording path, or an explorer
    `Conversation`) with `tools` under up to `budget` schedules (relay.offline.explore) and
    return what held and what broke, each finding shrunk and written as a recording:
    `assert result.ok, result.report()`. `lines`: what the caller says (default: one line a
    turn); `barge_in`: what the caller says when it barges in (default: nothing, it only speaks
    over the assistant); `invariants`: your own, by name, each a function of the explored session
    returning what broke or None; `reset`: called before each schedule (to clear a tool's state);
    `dialect`: a `Script`'s (default openai), over a file's own; `delegation`: GPT-Live's mode
    (`responses`, the default, or `client`: the relay's `@delegate` among `tools` answers each
    delegation), over a script file's own, and a recording's own if given (`relay explore
    --delegation`: one `UnusableInput` line on another dialect, or against a recording's mode);
    `mode`: how the relay runs, `proxy` or `sidecar` (the caller talks to the server, the relay
    attached beside it: the wires with a sideband), over a file's own (a sidecar's
    recording is explored as a sidecar).
    A conversation in which the model calls none of `tools` raises
    `relay.offline.explore.NothingToExplore` (an `UnusableInput`): it would hold every invariant
    on nothing."""
    from relay.offline.explore import explore as _explore
    from relay.offline.explore_input import from_file, from_script
    from relay.offline.explore_session import Conversation
    from relay.tools.sources import tool_registry

    registry = tool_registry(tools)
    if isinstance(conversation, Script):
        conversation = from_script(conversation, registry, dialect=dialect or "openai",
                                   lines=tuple(lines) if lines is not None else None, barge_text=barge_in,
                                   delegation=delegation)
    elif isinstance(conversation, (str, _Path)):
        conversation = from_file(conversation, registry, dialect=dialect, delegation=delegation)
    elif not isinstance(conversation, Conversation):
        raise TypeError(f"not a conversation to explore: {conversation!r} (a Script, a path or a Conversation)")
    conversation = conversation.with_mode(mode, conversation.name)
    return _explore(conversation, budget=budget, seed=seed, time_budget=time_budget, invariants=invariants,
                    reset=reset, out=out)


def timeline_of(session: _Any) -> Timeline:
    """The events of any session: a scripted (or fault-played) session, a replay's result, a
    recording (a path or a `Recording`), or a `Timeline` as it is."""
    if isinstance(session, Timeline):
        return session
    if isinstance(session, _HarnessSession):
        return session.timeline
    if isinstance(session, ReplayResult):
        return Timeline.from_replay(session)
    if isinstance(session, (str, _Path, _Recording)):
        return Timeline.from_recording(session)
    raise TypeError(f"not a session: {session!r} (a ScriptedSession, a ReplayResult, a recording or a Timeline)")


def expect(session: _Any) -> Expect:
    """Expectations walking the events of `session` from its start (see `timeline_of`)."""
    return Expect(timeline_of(session))


def check_invariants(session: _Any, *names: str, silent: _Any = ()) -> None:
    """Fail (`ExpectationFailed`) when a session-wide invariant does not hold in `session`: all of
    `INVARIANTS` unless named; `silent` names relay calls (ids or tools) not owed speech."""
    _check_invariants(timeline_of(session), *names, silent=silent)


__all__ = [
    "INVARIANTS", "Call", "Divergence", "Event", "Expect", "ExpectationFailed", "Fault", "RecordedSession",
    "Quirks", "ReplayCall", "ReplayResult", "Script", "ScriptError", "ScriptedSession", "Timeline", "Turn",
    "VirtualTimeError", "call", "check_invariants", "expect", "explore", "faults", "replay", "replay_async",
    "quirks_of", "replay_with_faults", "timeline_of",
]
