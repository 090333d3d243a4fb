"""The answers a turn-based engine (Gemini Live's, `GeminiEngine`) keeps before they go up:
while the upstream connection is away, and from the server's `interrupted` until its next
message decides them (`HeldAnswers`).

When the caller talks over the model, the service says `serverContent.interrupted` and withdraws
the turn's unanswered calls in a `toolCallCancellation`. An answer the relay sends between the two
crosses the cancellation of its call: the service needs no answer for a cancelled call, and what
it does with one is not documented (docs/gemini.md, "An answer crossing a cancellation"; the model
may speak of a call the caller talked over). So from `interrupted` on, while relay calls are
owed, the engine keeps the answers it decides until the server's next message: a
`toolCallCancellation` drops the answers of the calls it names (those calls are resolved,
skipped: owed nothing), and any other message says that none is coming. The answers left then go
up, in the order they were decided. A server that sends nothing more does not keep them: they go
up `HOLD_LIMIT` seconds after `interrupted` at the latest.

The interrupted turn's own `turnComplete` does not decide: an interrupted turn "will go through
interrupted > turn_complete" (google-genai's `LiveServerContent`), and whether the cancellation
comes before or after that `turnComplete` is not documented (docs/gemini.md, "The model
interrupted"). The message after it does.
"""

from __future__ import annotations

from typing import Any

HOLD_LIMIT = 0.5
"""Seconds an answer waits, at most, for the message after `interrupted` (the service sends its
`toolCallCancellation` right behind it)."""

Answer = tuple[str, dict[str, Any], bool]
"""(call id, the FunctionResponse, whether it is the call's final answer)."""


class HeldAnswers:
    """The answers that wait, in their order, and the hold behind `interrupted` (see the module
    docstring): `until` is the latest the hold lasts (None: no hold)."""

    __slots__ = ("until", "_fresh", "_turn_ended", "_waiting")

    def __init__(self) -> None:
        self.until: float | None = None
        self._fresh = False               # the message being handled does not decide the hold
        self._turn_ended = False          # the interrupted turn's `turnComplete` came
        self._waiting: list[Answer] = []

    @property
    def holding(self) -> bool:
        return self.until is not None

    def keep(self, answer: Answer) -> None:
        self._waiting.append(answer)

    def forget(self, call_id: str) -> None:
        """The server withdrew the call: what waits for it never goes up."""
        self._waiting = [waiting for waiting in self._waiting if waiting[0] != call_id]

    def take(self) -> list[Answer]:
        """What waits, to go up now (nothing waits after)."""
        waiting, self._waiting = self._waiting, []
        return waiting

    def begin(self, now: float) -> None:
        """The server said `interrupted` while relay calls are owed: answers wait from now."""
        self.until = now + HOLD_LIMIT
        self._fresh = True
        self._turn_ended = False

    def turn_ended(self) -> None:
        """The server ended a turn (`turnComplete`, with no words of a new one): the first end
        after `interrupted` is the interrupted turn's, part of the interruption, and does not
        decide the hold; the message after it does."""
        if self.until is not None and not self._turn_ended:
            self._turn_ended = True
            self._fresh = True

    def decided(self) -> bool:
        """A server message was handled: whether it ends a hold that an earlier one began (it was
        the message after `interrupted`)."""
        if self.until is None:
            return False
        if self._fresh:
            self._fresh = False
            return False
        self.until = None
        return True

    def due(self, now: float) -> bool:
        """Whether the hold ends by time (`HOLD_LIMIT` passed with no message from the server)."""
        if self.until is None or now < self.until:
            return False
        self.until = None
        return True

    def end(self) -> None:
        """No hold any more (a new connection: the old one's cancellation is not coming on it)."""
        self.until = None
        self._fresh = False

    def clear(self) -> None:
        """The session closed: nothing waits, nothing is held."""
        self.end()
        self._waiting.clear()


__all__ = ["HOLD_LIMIT", "HeldAnswers"]
