"""What was said in a GPT-Live session, as a delegate is given it (`relay.tools.Delegation`).

GPT-Live's transcripts come as deltas on the session's timeline (`session.input_transcript.delta`
for the caller, `session.output_transcript.delta` for the model) with no item and no "done": the
pieces are joined as they come (they carry their own spaces), a turn lasting while the same side
speaks. A session keeps the recent past only: the last `max_turns` turns, each cut to its last
`max_chars` characters, so a long call's memory stays flat.
"""

from __future__ import annotations

from relay.tools.delegation import Speaker, Turn

MAX_TURNS = 40
MAX_TURN_CHARS = 4000


class Transcript:
    """The turns of both sides, oldest first."""

    def __init__(self, *, max_turns: int = MAX_TURNS, max_chars: int = MAX_TURN_CHARS) -> None:
        self._turns: list[list[str]] = []    # [speaker, text]
        self._max_turns = max_turns
        self._max_chars = max_chars

    def add(self, speaker: Speaker, delta: str) -> None:
        """A piece of what `speaker` said: the end of their current turn, or a new turn."""
        if self._turns and self._turns[-1][0] == speaker:
            text = self._turns[-1][1] + delta
            self._turns[-1][1] = text[-self._max_chars:]
            return
        self._turns.append([speaker, delta[-self._max_chars:]])
        if len(self._turns) > self._max_turns:
            del self._turns[: len(self._turns) - self._max_turns]

    def turns(self) -> tuple[Turn, ...]:
        """The turns so far, each with its text stripped (a blank turn is left out)."""
        return tuple(Turn(speaker, text.strip()) for speaker, text in self._turns if text.strip())  # type: ignore[arg-type]


__all__ = ["MAX_TURNS", "MAX_TURN_CHARS", "Transcript"]
