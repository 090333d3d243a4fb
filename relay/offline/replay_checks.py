"""The explorer's built-in invariants (relay/offline/explore_checks.py) checked on a replayed
session: `relay replay` names the one a recording breaks and exits 1, so that a finding the explorer
wrote for a built-in invariant replays to that same invariant, as one of a user's own
(`--invariant`) does.

A replay is read as an explored session is, from its `ReplayResult`: the timeline of the frames it
keeps (what the relay under test was given and sent upstream, `Timeline.from_replay`), its engine's
call book at the end, and the handler starts of its timeline (`ReplayResult.handler_starts`). A
replay ends where its recording does, the calls then open abandoned; one that ends with a call
abandoned is read as a session whose connection dropped (the explorer's `closed`): it owes that
call nothing, and no follow-up after what it answered.

Not checked on a replay, because it cannot show them: `client_never_sees_relay_call` (the replay
keeps no frame to the client: the recorded client is not there), `nothing_sent_while_away` (a
recording holds no mark of a reconnect), `upstream_accepted_every_send` (the recorded upstream
cannot refuse what the relay under test sends, and a recording's end line keeps the close's reason
but not its code or which side closed) and `replays_same` (the replay's own verdict: its
divergences). `cancelled_not_answered` reads frames only, the recorded upstream's and what the
relay under test sent, and is checked.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from relay.engine.calls import CallState
from relay.offline.explore_checks import SESSION_INVARIANTS, TIMELINE_INVARIANTS, broken
from relay.offline.replay_result import ReplayResult
from relay.offline.timeline import Timeline

NOT_ON_A_REPLAY = frozenset({"client_never_sees_relay_call", "nothing_sent_while_away", "upstream_accepted_every_send"})
CHECKED = (*TIMELINE_INVARIANTS, *(name for name in SESSION_INVARIANTS if name not in NOT_ON_A_REPLAY))
"""The built-in invariants a replay is checked against, by name."""


@dataclass
class _Observed:
    starts: dict[str, int] = field(default_factory=dict)


class ReplayedSession:
    """A replay's session as the explorer's invariants read one (see the module docstring)."""

    def __init__(self, result: ReplayResult) -> None:
        self.engine = result.engine
        self.tools = result.engine.tools
        self.dialect = result.engine.dialect
        self.frames = result.frames
        self.timeline = Timeline.from_replay(result)
        self.observed = _Observed(result.handler_starts)
        self.closed = any(entry.state is CallState.ABANDONED for entry in self.engine.ledger)

    @contextmanager
    def checking(self) -> Iterator[None]:
        yield


def builtin_broken(result: ReplayResult) -> list[tuple[str, str]]:
    """(invariant, message) for each built-in invariant the replayed session breaks."""
    return [(name, message) for name, message in broken(ReplayedSession(result), {})  # type: ignore[arg-type]
            if name in CHECKED]


def builtin_invariants() -> dict[str, Callable[[ReplayResult], Any]]:
    """The built-in invariants as `relay.offline.replay.replay`'s `invariants` take them: each a
    function of the result, what broke or None (the replayed session is read once for all)."""
    found: dict[int, list[tuple[str, str]]] = {}

    def check(name: str) -> Callable[[ReplayResult], Any]:
        def invariant(result: ReplayResult) -> str | None:
            if id(result) not in found:
                found.clear()
                found[id(result)] = builtin_broken(result)
            return next((message for broken_name, message in found[id(result)] if broken_name == name), None)
        return invariant

    return {name: check(name) for name in CHECKED}


__all__ = ["CHECKED", "NOT_ON_A_REPLAY", "ReplayedSession", "builtin_broken", "builtin_invariants"]
