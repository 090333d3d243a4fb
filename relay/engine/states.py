"""States kept as a table, as h11 keeps HTTP's: an enum per machine, the steps each state may
take, and one method that makes every step and refuses any other.

The call book keeps a call's life this way (`calls.LIFECYCLE`, `CallLedger.move`); `Machines`
does it for an object that runs a few small machines side by side (`sequencer.Sequencer`,
`holding.HeldCreates`). A refused step is a bug in the engine, never in the input: it raises
`IllegalTransition` in strict mode (the tests) and is reported to `on_refused` otherwise (the
engine records an anomaly), the state staying as it was.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Callable, ClassVar

from relay.engine.calls import refuse_step

Steps = dict[type[Enum], dict[Any, frozenset[Any]]]


class Machines:
    """Subclasses name their table (`steps`: machine -> state -> the states it may go to) and
    the attribute holding each machine's state (`attributes`); `move` alone sets those."""

    steps: ClassVar[Steps]
    attributes: ClassVar[dict[type[Enum], str]]

    def __init__(self, *, strict: bool = True, on_refused: Callable[[str], None] | None = None) -> None:
        self.strict = strict
        self._on_refused = on_refused

    def move(self, to: Enum) -> bool:
        """The one way a state changes: the steps of the table only. A refused step raises
        `IllegalTransition` in strict mode; otherwise it is reported to `on_refused`, the state
        stays, and False is returned."""
        machine = type(to)
        attribute = self.attributes[machine]
        current = getattr(self, attribute)
        if to in self.steps[machine][current]:
            setattr(self, attribute, to)
            return True
        message = (f"{type(self).__name__} {machine.__name__}: {current.value} -> {to.value} "
                   f"is not a step of its table")
        return refuse_step(message, strict=self.strict, on_refused=self._on_refused)
