"""The client's `response.create`s a proxy holds back (OpenAI family), as a table of states.

A client's create that would meet an active response, or come before the relay's outputs are
in, waits (`hiding.ClientView.response_create` decides). Once nothing is active and the relay's
outputs are in, the first goes up if the relay's work held it (it answers those outputs) and the
others are refused as the provider would have refused them (they met an active response); when
only someone else's response held them, all are refused so, exactly as without the relay.

A create that went up later than the client sent it shifts the conversation: its response may
still run while the client adds to the conversation, and what the client adds is not in it. Were
the relay not there, that earlier create would have been refused and the client's next one
answered; so that next one is owed a response (`HeldCreates.collides`).

Two machines, side by side (`STEPS`, `Machines.move`):
- `HeldState`: none held, held behind someone else's response, held for the relay's work;
- `ShiftState`: no create went up late, one did (`SHIFTED`), and the client added since (`ADDED`).
The held creates themselves (frame, event id) are data, and so is when the first was held
(`since`): a client waits on its own create (LiveKit Agents gives up after 10 s), so a create held
for the relay's running tools goes up once it has waited `EngineConfig.hold_limit`, and the tools'
outputs follow later with their own follow-up (`hiding.ClientView.release_held_creates`).
The held creates are kept within `relay.engine.limits`: the first one's frame (the only one that
may go up), the others' event ids.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable

from relay.engine.limits import MAX_HELD_CHARS, MAX_HELD_CREATES
from relay.engine.states import Machines, Steps


class HeldState(str, Enum):
    NONE = "none"
    HELD = "held"                    # waiting behind someone else's response
    FOR_RELAY = "for_relay"          # the relay's work is (also) why: the first goes up at release


class ShiftState(str, Enum):
    NONE = "none"
    SHIFTED = "shifted"              # a held create went up late; its response may still run
    ADDED = "added"                  # and the client has added to the conversation since


_H, _T = HeldState, ShiftState
STEPS: Steps = {
    _H: {
        _H.NONE: frozenset({_H.HELD, _H.FOR_RELAY}),
        _H.HELD: frozenset({_H.FOR_RELAY, _H.NONE}),   # none: released (all refused), or the session closed
        _H.FOR_RELAY: frozenset({_H.NONE}),
    },
    _T: {
        _T.NONE: frozenset({_T.SHIFTED}),
        _T.SHIFTED: frozenset({_T.ADDED, _T.NONE}),    # none: nothing is active or on its way any more
        _T.ADDED: frozenset({_T.SHIFTED, _T.NONE}),    # shifted: another held create went up late
    },
}


# the members by module names: read from its class, a member costs a descriptor call
_NOT_HELD, _HELD, _FOR_RELAY = _H.NONE, _H.HELD, _H.FOR_RELAY
_NO_SHIFT, _SHIFTED, _ADDED = _T.NONE, _T.SHIFTED, _T.ADDED


class HeldCreates(Machines):
    """One session's held client creates, and whether one of them went up late."""

    steps = STEPS
    attributes = {HeldState: "held_state", ShiftState: "shift_state"}

    def __init__(self, *, strict: bool = True, on_refused: Callable[[str], None] | None = None) -> None:
        super().__init__(strict=strict, on_refused=on_refused)
        self.held_state = _NOT_HELD
        self.shift_state = _NO_SHIFT
        self._held: list[tuple[str, str | None]] = []   # (frame, event id), in the order they came
        self.since: float | None = None                 # when the first of them was held
        self._chars = 0   # of the frame and the event ids kept

    def has_room(self, event_id: str | None) -> bool:
        """Whether one more create may be held (`relay.engine.limits`): the first always is."""
        if not self._held:
            return True
        return (len(self._held) < MAX_HELD_CREATES
                and self._chars + len(event_id or "") <= MAX_HELD_CHARS)

    def hold(self, frame: str, event_id: str | None, *, for_relay: bool, now: float) -> None:
        """A client's create must wait. `for_relay`: the relay's work is why. Only the first one's
        frame is kept: the others are refused when released, by their event ids."""
        if self._held:
            frame = ""
        self._chars += len(frame) + len(event_id or "")
        self._held.append((frame, event_id))
        if self.held_state is _NOT_HELD:
            self.since = now
            self.move(_FOR_RELAY if for_relay else _HELD)
        elif for_relay and self.held_state is _HELD:
            self.move(_FOR_RELAY)

    def held_for_relay(self) -> None:
        """The relay's work turns out to be why they wait (they were held behind someone else's
        response, and now the relay's calls or its response keep them)."""
        self.move(_FOR_RELAY)

    def release(self) -> tuple[tuple[str, str | None] | None, list[str | None]]:
        """Nothing is active and the relay's outputs are in: the create to forward (frame, event
        id), if the relay's work held them, and the event ids of the creates to refuse."""
        held, for_relay = self._held, self.held_state is _FOR_RELAY
        self._held = []
        self.since = None
        self._chars = 0
        self.move(_NOT_HELD)
        if not for_relay:
            return None, [event_id for _frame, event_id in held]
        first, *rest = held
        if self.shift_state is not _SHIFTED:
            self.move(_SHIFTED)
        return first, [event_id for _frame, event_id in rest]

    def idle(self) -> bool:
        """Nothing held, and no create went up late (asked after every input)."""
        return self.held_state is _NOT_HELD and self.shift_state is _NO_SHIFT

    def waiting(self) -> bool:
        """Whether client creates are held."""
        return self.held_state is not _NOT_HELD

    def behind_others(self) -> bool:
        """Whether they wait only behind someone else's response (so far)."""
        return self.held_state is _HELD

    def drop(self) -> None:
        """The session is over: nobody is left to send them to."""
        if self.held_state is not _NOT_HELD:
            self._held = []
            self.since = None
            self._chars = 0
            self.move(_NOT_HELD)

    def client_added_item(self) -> None:
        """The client added an item (its call's output, a message)."""
        if self.shift_state is _SHIFTED:
            self.move(_ADDED)

    def collides(self) -> bool:
        """Whether a client create now meets the response of the create held back, and the client
        has added to the conversation since: the relay then owes it a response."""
        return self.shift_state is _ADDED

    def settle(self) -> None:
        """Nothing is active or on its way any more: the late create's response is over."""
        self.move(_NO_SHIFT)
