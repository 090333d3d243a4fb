"""Where each handler finished, as a recording says, for its replay (relay/offline/replay.py).

A recording's `handler_finished` lines (docs/recording-format.md) sit among the frames where the
relay's handler reported its outcome. The replay runs the real handlers on the real clock while it
plays the frames on virtual time, so a handler's finish would otherwise land wherever the clock
brings it: before a barge-in it recorded after, or after one it recorded before, and what the relay
does next (a follow-up or none, an output spoken or withdrawn) changes. With the lines, a finish
that comes early is held until the replay's play reaches its line, and a frame recorded after the
line waits (at most the gate timeout) for the handler to finish. A streaming handler's values
(`handler_yielded`) are placed the same way. A handler of the recorded relay's that the session
never heard finish (the session ended first, or the relay cancelled it or answered for it) is
never heard in the replay either: what it reports is held for good, also in a whole recording where
no handler finished at all (its header's `handler_finishes` says that its relay wrote the lines). A
recording without the lines (written before they were) replays as before: each finish is taken
when it comes.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from relay.recording.format import HANDLER_FINISHED_NOTE, HANDLER_YIELDED_NOTE, Note, Recording

Report = tuple[str, Any]
"""What a handler reported: its note's kind (finished or yielded) and its outcome or value."""


class RecordedFinishes:
    """The recording's handler finishes (and a streaming handler's values), in order, and what the
    replay's handlers reported early, held until each is reached."""

    def __init__(self, recording: Recording) -> None:
        notes = [note for note in recording.notes if note.kind in (HANDLER_FINISHED_NOTE, HANDLER_YIELDED_NOTE)
                 and isinstance(note.fields.get("call_id"), str)]
        # a recording built in memory has no line numbers: nothing says where its finishes were
        self._ahead: deque[Note] = deque(notes if all(note.line_no > 0 for note in notes) else ())
        self._due: dict[str, int] = {}   # call id -> its reports recorded and not reached yet
        for note in self._ahead:
            call_id = str(note.fields["call_id"])
            self._due[call_id] = self._due.get(call_id, 0) + 1
        self._held: dict[str, deque[Report]] = {}
        # the recording says where its handlers reported: by its lines, or, when no handler of it
        # finished, by its header (a relay that writes the lines says so: in a whole recording,
        # none means none finished; one cut short says nothing of what came after its end)
        self._places = bool(self._ahead) or (recording.complete and (recording.header or {}).get("handler_finishes") is True)
        self._finished = {str(note.fields["call_id"]) for note in self._ahead if note.kind == HANDLER_FINISHED_NOTE}
        self._relays = set(recording.tool_calls_decided())   # the calls the recorded relay owned

    def never_finished(self, call_ids: set[str]) -> set[str]:
        """Those of `call_ids` whose handler the recorded session ended with still running: no
        `handler_finished` line of theirs, in a recording that places finishes (none without)."""
        return call_ids - self._finished if self._places else set()

    def hold(self, call_id: str, kind: str, value: Any) -> bool:
        """Keep what a handler reported before its recorded place was reached, or after a report of
        its still held (the order stays its own); False when nothing recorded says where it lands
        (it is taken at once)."""
        held = self._held.setdefault(call_id, deque())
        if not held and self._due.get(call_id, 0) == 0 and not self._unfinished(call_id):
            return False
        held.append((kind, value))
        return True

    def _unfinished(self, call_id: str) -> bool:
        """The recorded relay owned the call and never heard its handler finish, in a recording that
        places finishes: what the replay's handler reports is held past the last line (`left` keeps
        it). A call the recorded relay did not own (a tool added since) is taken as it comes."""
        return self._places and call_id in self._relays and call_id not in self._finished

    def held(self, call_id: str) -> bool:
        return bool(self._held.get(call_id))

    def reached(self, line_no: float) -> list[Note]:
        """The reports recorded before line `line_no` not reached yet, in order: each is now."""
        passed: list[Note] = []
        while self._ahead and self._ahead[0].line_no < line_no:
            note = self._ahead.popleft()
            self._due[str(note.fields["call_id"])] -= 1
            passed.append(note)
        return passed

    def release(self, call_id: str) -> list[Report]:
        """The call's first report held, if any, and, once no place of the call's is left ahead,
        all its others (they go to the engine now, in order), but for a call whose handler the
        recorded session never heard finish: what it reports past its last place (a streaming
        handler's end, come with its last value) stays held, as `left` keeps it."""
        held = self._held.get(call_id)
        if not held:
            return []
        if self._due.get(call_id, 0) == 0 and not self._unfinished(call_id):
            return [held.popleft() for _ in range(len(held))]
        return [held.popleft()]

    def drop(self, call_id: str) -> None:
        """The relay cancelled the call's handler: what it reported is never heard."""
        self._held.pop(call_id, None)

    def left(self) -> list[tuple[str, Report]]:
        """Every report still held (the recording's places all passed), in the order they came per
        call, but those of calls whose handler the recorded session never heard finish: those stay
        held, and the replay ends as the session did, with the handler still running."""
        left = [(call_id, report) for call_id, held in self._held.items() if not self._unfinished(call_id)
                for report in held]
        self._held = {call_id: held for call_id, held in self._held.items() if self._unfinished(call_id)}
        return left


__all__ = ["RecordedFinishes", "Report"]
