"""The explorer's space, grown from what perturbed runs reach: a call the conversation as scripted
never makes (the relay's tool the caller asks for in a barge-in, a call the model makes again
after the server cancelled its first, the calls of a turn asked for again after a reconnect), or
an anchor the scripted run never reached, gets perturbations of its own.

A perturbation names a call by its number in the run (the Nth call the relay owns), so one found
in the run of schedule S means something only beside S: its schedule is S with it (an
*extension*). A run of S takes the same course as the run of S with it up to the moment it lands
(it is anchored on what that run reached), so it lands where S's run showed it; one whose effect
is set before the run starts (a delegate's interruption policy) may change that course, and then
may not fire: the summary counts the grown perturbations that fired.

What grows, and what does not:

- A schedule is learnt from only when all its perturbations are of the scripted run's space and
  it has room for one more (`MAX_PERTURBATIONS`): extensions are not grown further, or each
  context would sweep every pair of its own perturbations before anything else is tried.
- A perturbation already found beside a context is not found again beside that context with
  more of the scripted run's perturbations (S ⊆ S' adds only scripted ones): the random draws
  combine those.
- Only new places count: a perturbation of a kind, call and anchor the scripted run's space has
  (a handler's finish after more provider events than it saw, a reconnect's other attempt) is
  left to the space as it is; nor is one that acts on the whole run (`WHOLE_RUN`) grown.

The extensions the singles found are tried after every single (the scripted run's boundaries
first), and one found later as soon as it is (before the next pair or random schedule); an
extension a schedule cannot hold (`fits`: two handler behaviours for one call) is not grown. The
random schedules then draw a grown perturbation, with one of its contexts, as often as one of the
scripted run's (each perturbation weighs the same).
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any, Callable

from relay.offline.explore_session import Observed, Perturbation, Schedule

MAX_PERTURBATIONS = 3
"""The most perturbations one schedule holds."""
WHOLE_RUN = frozenset({"done_first"})
"""Perturbations that act on the whole run from its start, not where their call is reached
(`done_first` reorders every response's frames): one of a call only a perturbed run makes changes
the course that made it, and is not grown (the scripted run's already acts on every response)."""


def _place(perturbation: Perturbation) -> tuple[str, int, str]:
    return perturbation.kind, perturbation.call, perturbation.anchor


class Growth:
    """The perturbations perturbed runs reached that the scripted run did not (see the module
    docstring). `space`: the scripted run's; `base`: what it observed; `space_of(observed,
    names)`: the perturbations a run's shape allows (`relay.offline.explore.boundaries`); `fits`:
    whether a schedule may hold its perturbations together."""

    def __init__(self, space: list[Perturbation], base: Observed,
                 space_of: Callable[[Observed, dict[str, str]], list[Perturbation]],
                 fits: Callable[[Schedule], bool] = lambda schedule: True) -> None:
        self._fits = fits
        self._scripted = frozenset(space)
        self._places = {_place(p) for p in space}
        self._base = base
        self._space_of = space_of
        self.queue: deque[Schedule] = deque()   # extensions not tried yet, in the order found
        self._beside: dict[Schedule, list[Perturbation]] = {}     # context -> its grown perturbations
        self._found: dict[Perturbation, list[frozenset[Perturbation]]] = {}   # perturbation -> its contexts

    @property
    def count(self) -> int:
        """How many grown perturbations there are, whatever their contexts."""
        return len(self._found)

    @property
    def found(self) -> frozenset[Perturbation]:
        """The grown perturbations, whatever their contexts."""
        return frozenset(self._found)

    def learn(self, schedule: Schedule, observed: Observed, names: Callable[[], dict[str, str]]) -> None:
        """What the run of `schedule` reached that the scripted run did not: each new perturbation
        becomes an extension of `schedule` (queued). `names`: the run's call ids -> tool names."""
        if not schedule or len(schedule) >= MAX_PERTURBATIONS or not self._reaches_more(observed):
            return
        members = frozenset(schedule)
        if not members <= self._scripted:
            return
        for perturbation in self._space_of(observed, names()):
            extension = tuple(sorted((*schedule, perturbation)))
            if (perturbation.kind in WHOLE_RUN or _place(perturbation) in self._places
                    or self._known(perturbation, members) or not self._fits(extension)):
                continue
            self._found.setdefault(perturbation, []).append(members)
            self._beside.setdefault(tuple(sorted(schedule)), []).append(perturbation)
            self.queue.append(extension)

    def _reaches_more(self, observed: Observed) -> bool:
        base = self._base
        return (len(observed.calls) > len(base.calls) or len(observed.client_calls) > len(base.client_calls)
                or not observed.anchors <= base.anchors)

    def _known(self, perturbation: Perturbation, members: frozenset[Perturbation]) -> bool:
        """Found already beside a context this one holds (with only scripted perturbations more)."""
        return any(context <= members for context in self._found.get(perturbation, ()))

    def draw(self, draw: random.Random, size: int, space: list[Perturbation]) -> Schedule | None:
        """A random schedule of `size` perturbations around a grown one (in one of its contexts),
        or None when this draw takes the scripted run's space instead: each grown perturbation
        weighs as much as one of the scripted run's, whatever the contexts it was found in."""
        grown = list(self._found)
        if not grown or draw.randrange(len(grown) + len(space)) < len(space):
            return None
        perturbation = grown[draw.randrange(len(grown))]
        contexts = self._found[perturbation]
        context = tuple(sorted(contexts[draw.randrange(len(contexts))]))
        chosen = {*context, perturbation}
        others = [p for p in (*space, *self._beside[context]) if p not in chosen]
        room = max(0, min(size, MAX_PERTURBATIONS) - len(chosen))
        chosen.update(draw.sample(others, min(room, len(others))))
        return tuple(sorted(chosen))


def names_of(session: Any) -> Callable[[], dict[str, str]]:
    """A run's call ids -> its tools' names (for `mcp_dies`), read when asked."""
    return lambda: {entry.call_id: entry.name for entry in session.engine.ledger}


__all__ = ["MAX_PERTURBATIONS", "WHOLE_RUN", "Growth", "names_of"]
