"""Where each handler finished, as a recording says, for its replay (relay/offline/replay.py).

A recording's `handler_finished` lines (docs/recording-format.md) sit among the frames where the
relay's handler reported its outcome. The replay runs the real handlers on the real clock while it
plays the frames on virtual time, so a handler's finish would otherwise land wherever the clock
brings it: before a barge-in it recorded after, or after one it recorded before, and what the relay
does next (a follow-up or none, an output spoken or withdrawn) changes. With the lines, a finish
that comes early is held until the replay's play reaches its line, and a frame recorded after the
line waits (at most the gate timeout) for the handler to finish. A recording without them (written
before they were) replays as before: each finish is taken when it comes.
"""

from __future__ import annotations

from collections import deque

from relay.engine import Outcome
from relay.recording.format import HANDLER_FINISHED_NOTE, Note, Recording


class RecordedFinishes:
    """The recording's handler finishes, in order, and the outcomes the replay holds until each is
    reached."""

    def __init__(self, recording: Recording) -> None:
        notes = [note for note in recording.notes
                 if note.kind == HANDLER_FINISHED_NOTE and isinstance(note.fields.get("call_id"), str)]
        # a recording built in memory has no line numbers: nothing says where its finishes were
        self._ahead: deque[Note] = deque(notes if all(note.line_no > 0 for note in notes) else ())
        self._due: dict[str, int] = {}   # call id -> its finishes not reached yet
        for note in self._ahead:
            call_id = str(note.fields["call_id"])
            self._due[call_id] = self._due.get(call_id, 0) + 1
        self._held: dict[str, Outcome] = {}

    def hold(self, call_id: str, outcome: Outcome) -> bool:
        """Keep a handler's outcome that came before its recorded finish was reached; False when
        nothing recorded says where it lands (it is taken at once)."""
        if not self._due.get(call_id):
            return False
        self._held[call_id] = outcome
        return True

    def held(self, call_id: str) -> bool:
        return call_id in self._held

    def reached(self, line_no: float) -> list[Note]:
        """The finishes recorded before line `line_no` not reached yet, in order: each is now."""
        passed: list[Note] = []
        while self._ahead and self._ahead[0].line_no < line_no:
            note = self._ahead.popleft()
            self._due[str(note.fields["call_id"])] -= 1
            passed.append(note)
        return passed

    def release(self, call_id: str) -> Outcome | None:
        """The outcome held for the call, if any (it goes to the engine now)."""
        return self._held.pop(call_id, None)


__all__ = ["RecordedFinishes"]
