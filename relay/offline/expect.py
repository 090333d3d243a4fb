"""Fluent expectations over a session's timeline, and the invariants every session must keep.

    expect = Expect(timeline)           # or session.expect() for a scripted session
    (expect.next_call("book_table", arguments={"people": 2})   # a dict matches as a subset
           .filler(after=0.8)           # the relay's filler, 0.8 s after the call
           .output(contains="booked")   # the next answer that went upstream
           .follow_up()                 # the relay asked the model to speak about it
           .spoken("booked")            # and it did
           .no_more_events())

Each step looks for the next event of its kind after the previous match and checks it; events of
other kinds are walked over, the bookkeeping kinds (responses beginning and ending, a client's
`response.create`, the session closing) even by `no_more_events`. Text matches as a
case-insensitive substring, or a compiled regular expression, or any predicate. A step that does
not hold raises `ExpectationFailed`, which reads like the replay report: what was expected, what
came, and where on the timeline, with the command that shows the session in the inspector.

`check_invariants(timeline)` checks what holds for every session, whatever the script
(`INVARIANTS`): every relay call answered exactly once (and never a call the client owns, nor one
the server withdrew), never two responses at once, no `response.create` while a response is
active, the model speaks after every tool, and one follow-up per answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from relay.offline.events import (
    BARGE_IN,
    BOOKKEEPING,
    CALL,
    CANCELLED,
    ERROR,
    FILLER,
    FOLLOW_UP,
    OUTPUT,
    RESPONSE,
    RESPONSE_DONE,
    SPOKEN,
    UPDATE,
    USER,
    Event,
)
from relay.offline.timeline import Timeline

DEFAULT_WITHIN = 0.05
"""Seconds a timed expectation (`filler(after=...)`) may be off: none in a scripted session, the
relay's scheduling jitter in a recorded one."""

ACTIVE_RESPONSE_CODE = "conversation_already_has_active_response"

Text = str | re.Pattern[str] | Callable[[str], bool]


class ExpectationFailed(AssertionError):
    """An expectation or invariant that does not hold; the message says what was expected, what
    came, and where on the timeline."""


def failure(timeline: Timeline, expected: str, came: str, mark: int | None) -> ExpectationFailed:
    """The failure, worded like the replay report."""
    total = len(timeline)
    where = f"event {mark + 1} of {total}" if mark is not None and mark < total else f"after the last of {total} events"
    lines = [f"expected: {expected}", f"came:     {came}", f"where:    {timeline.source}, {where}:",
             timeline.render(mark, around=6)]
    command = timeline.inspect()
    if command:
        lines.append(f"look at it: {command}")
    return ExpectationFailed("\n".join(lines))


def text_matches(actual: str | None, wanted: Text) -> bool:
    actual = actual or ""
    if isinstance(wanted, re.Pattern):
        return wanted.search(actual) is not None
    if callable(wanted):
        return bool(wanted(actual))
    return wanted.casefold() in actual.casefold()


def arguments_match(actual: Any, wanted: Any) -> bool:
    """A dict matches as a subset (recursively); a callable is a predicate; else equality."""
    if callable(wanted):
        return bool(wanted(actual))
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            key in actual and arguments_match(actual[key], value) for key, value in wanted.items())
    return bool(actual == wanted)


def _shown(wanted: Any) -> str:
    if isinstance(wanted, re.Pattern):
        return f"/{wanted.pattern}/"
    if callable(wanted):
        return getattr(wanted, "__name__", "a predicate")
    return json.dumps(wanted, ensure_ascii=False)


def _call_check(name: str | None, arguments: Any, by: str | None) -> tuple[str, Callable[[Event], str | None]]:
    """What a call step looks for, said and checked."""
    parts = [f"a call to {name}" if name else "a call"]
    if arguments is not None:
        parts.append(f"with arguments matching {_shown(arguments)}")
    if by:
        parts.append(f"answered by the {by}")

    def check(event: Event) -> str | None:
        if name is not None and event.name != name:
            return f"it calls {event.name}, not {name}"
        if arguments is not None and not arguments_match(event.arguments, arguments):
            return f"its arguments do not match {_shown(arguments)}"
        if by is not None and event.by != by:
            return f"it is answered by the {event.by}"
        return None

    return " ".join(parts), check


class Expect:
    """A cursor walking one timeline (see the module docstring). Every step returns the cursor,
    so steps chain; `last` is the event the latest step matched."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.position = 0
        self.last: Event | None = None

    # ---- the steps -------------------------------------------------------------------------
    def next_event(self, kind: str | None = None) -> Event:
        """The next event (of `kind`; without one, the next that is not bookkeeping), for checks of
        your own."""
        wanted = f"a {kind} event" if kind else "another event"
        self._take(kind, wanted, lambda event: None)
        assert self.last is not None
        return self.last

    def next_call(self, name: str | None = None, *, arguments: Any = None, by: str | None = None) -> Expect:
        """The model's next call: to `name`, with `arguments` (a dict matches as a subset), answered
        by `by` (`relay` or `client`)."""
        wanted, check = _call_check(name, arguments, by)
        return self._take(CALL, wanted, check)

    def skip_to_call(self, name: str | None = None, *, arguments: Any = None, by: str | None = None) -> Expect:
        """The next call that matches, walking over those that do not (`next_call` stops at the
        first call): to start in the middle of a session."""
        wanted, check = _call_check(name, arguments, by)
        return self._take(CALL, wanted, lambda event: None, skip=lambda event: check(event) is not None)

    def output(self, contains: Text | None = None, *, equals: str | None = None, error: bool | None = None,
               status: str | None = None, call: str | None = None, by: str | None = None,
               outcome: str | None = None, final: bool = True) -> Expect:
        """The next answer that went upstream (interim Gemini answers are walked over unless
        `final=False`): its text contains `contains` / equals `equals`, it is (not) an `error`, has
        `status`, answers `call` (a name or a call id), came from `by`, ended with `outcome`."""
        wanted = "an output" if final else "an interim output"
        if call:
            wanted += f" for {call}"
        details = [f"{key} {_shown(value)}" for key, value in (("containing", contains), ("equal to", equals),
                                                                ("with status", status), ("by", by),
                                                                ("with outcome", outcome)) if value is not None]
        if error is not None:
            details.append("that is an error" if error else "that is not an error")
        if details:
            wanted += " " + ", ".join(details)

        def check(event: Event) -> str | None:
            if call is not None and call not in (event.call_id, event.name):
                return f"it answers {event.call_id} ({event.name})"
            if contains is not None and not text_matches(event.text, contains):
                return f"its text does not contain {_shown(contains)}"
            if equals is not None and event.text != equals:
                return "its text differs"
            if error is not None and event.is_error != error:
                return "it is an error" if event.is_error else "it is not an error"
            if status is not None and event.status != status:
                return f"its status is {event.status}"
            if by is not None and event.by != by:
                return f"it came from the {event.by}"
            if outcome is not None and event.outcome != outcome:
                return f"its outcome is {event.outcome}"
            return None

        return self._take(OUTPUT, wanted, check, skip=lambda event: event.final != final)

    def spoken(self, text: Text | None = None) -> Expect:
        """The assistant's next words (containing `text`)."""
        wanted = "the assistant speaking" + (f" words containing {_shown(text)}" if text is not None else "")
        return self._take(SPOKEN, wanted, lambda event: None if text is None or text_matches(event.text, text)
                          else f"the words do not contain {_shown(text)}")

    def filler(self, *, after: float | None = None, text: Text | None = None, call: str | None = None,
               within: float = DEFAULT_WITHIN) -> Expect:
        """The relay's next filler: `after` seconds after its call (± `within`), saying `text`, for
        `call` (a name or call id; else the call it names)."""
        wanted = "a filler"
        if call:
            wanted += f" for {call}"
        if after is not None:
            wanted += f" {after:g} s after the call"
        if text is not None:
            wanted += f" saying {_shown(text)}"

        def check(event: Event) -> str | None:
            calls = [c for c in (self._call(call_id) for call_id in event.call_ids) if c is not None]
            problem = self._not_covering(event, call, "it is for")
            if problem is not None:
                return problem
            if text is not None and not text_matches(event.text, text):
                return f"it does not say {_shown(text)}"
            if after is not None:
                if not calls:
                    return "the call it covers is not on the timeline"
                waited = event.t - calls[0].t
                if abs(waited - after) > within:
                    return f"it came {waited:.3f} s after the call"
            return None

        return self._take(FILLER, wanted, check)

    def follow_up(self, call: str | None = None) -> Expect:
        """The relay's next request that the model speak about outputs (for `call`)."""
        return self._take(FOLLOW_UP, "a follow-up" + (f" for {call}" if call else ""),
                          lambda event: self._not_covering(event, call, "it is for"))

    def user(self, text: Text | None = None) -> Expect:
        """The caller's next words."""
        return self._take(USER, "the caller speaking" + (f" words containing {_shown(text)}" if text else ""),
                          lambda e: None if text is None or text_matches(e.text, text) else "other words")

    def barge_in(self) -> Expect:
        """The caller speaking over the assistant."""
        return self._take(BARGE_IN, "a barge-in", lambda e: None)

    def cancelled(self, call: str | None = None) -> Expect:
        """The server withdrawing calls (`call`: one of them, a name or call id)."""
        return self._take(CANCELLED, "calls withdrawn" + (f" ({call})" if call else ""),
                          lambda event: self._not_covering(event, call, "it withdraws"))

    def error(self, code: str | None = None) -> Expect:
        """An error (from the upstream, or the relay refusing a client frame) with `code`."""
        return self._take(ERROR, "an error" + (f" {code}" if code else ""),
                          lambda e: None if code is None or e.status == code else f"its code is {e.status}")

    def no_more_events(self) -> Expect:
        """Nothing but bookkeeping after the last match."""
        rest = [e for e in self.timeline.events[self.position:] if e.kind not in BOOKKEEPING]
        if rest:
            raise failure(self.timeline, "no more events", rest[0].describe().strip(), rest[0].index)
        return self

    # ---- walking ---------------------------------------------------------------------------
    def _call(self, call_id: str) -> Event | None:
        return next((e for e in self.timeline.of(CALL) if e.call_id == call_id), None)

    def _not_covering(self, event: Event, call: str | None, saying: str) -> str | None:
        """Why `event` (naming calls) is not about `call` (a name or call id), or None when it is."""
        if call is None:
            return None
        calls = [self._call(call_id) for call_id in event.call_ids]
        if any(c is not None and call in (c.call_id, c.name) for c in calls):
            return None
        return f"{saying} {', '.join(event.call_ids) or 'no call'}"

    def _take(self, kind: str | None, wanted: str, check: Callable[[Event], str | None],
              skip: Callable[[Event], bool] = lambda event: False) -> Expect:
        events = self.timeline.events
        for event in events[self.position:]:
            if (event.kind == kind if kind else event.kind not in BOOKKEEPING) and not skip(event):
                problem = check(event)
                if problem is not None:
                    raise failure(self.timeline, wanted, f"{event.describe().strip()}  <- {problem}", event.index)
                self.position = event.index + 1
                self.last = event
                return self
        since = f" after {self.last.kind} at {self.last.t:.3f} s" if self.last is not None else ""
        raise failure(self.timeline, wanted, f"no {kind or 'other'} event{since}", len(events))


# ---- invariants --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Violation:
    index: int
    message: str


def _answered_once(timeline: Timeline) -> list[Violation]:
    violations: list[Violation] = []
    calls: dict[str, Event] = {}
    withdrawn: dict[str, Event] = {}
    answers: dict[str, list[Event]] = {}
    for event in timeline:
        if event.kind == CALL and event.call_id:
            calls.setdefault(event.call_id, event)
        elif event.kind == CANCELLED:
            for call_id in event.call_ids:
                withdrawn.setdefault(call_id, event)
        elif event.kind == OUTPUT and event.final and event.call_id:
            call = calls.get(event.call_id)
            if event.by == "relay" and call is not None and call.by != "relay":
                violations.append(Violation(event.index, f"the relay answered {event.call_id} ({call.name}), "
                                                         "a call the client owns"))
            if event.call_id in withdrawn:   # (a client answering its own withdrawn call is the client's affair)
                if event.by == "relay":
                    violations.append(Violation(event.index, f"{event.call_id} ({event.name}) was answered after the "
                                                             f"server withdrew it ({withdrawn[event.call_id].text})"))
                continue
            answers.setdefault(event.call_id, []).append(event)
    for call_id, call in calls.items():
        if call.by != "relay":
            continue
        given = answers.get(call_id, [])
        if not given and call_id not in withdrawn:
            violations.append(Violation(call.index, f"{call_id} ({call.name}) was never answered"))
        elif len(given) > 1:
            times = ", ".join(f"{e.t:.3f}" for e in given)
            violations.append(Violation(given[1].index, f"{call_id} ({call.name}) was answered {len(given)} times "
                                                        f"(at {times} s)"))
    return violations


def _responses(timeline: Timeline, on_overlap: Callable[[Event, dict[str, Event]], Violation | None]) -> list[Violation]:
    """Walk the responses, calling `on_overlap` at each event with the responses active then."""
    violations: list[Violation] = []
    active: dict[str, Event] = {}
    for event in timeline:
        found = on_overlap(event, active)
        if found is not None:
            violations.append(found)
        if event.kind == RESPONSE and event.response_id:
            active[event.response_id] = event
        elif event.kind == RESPONSE_DONE and event.response_id:
            active.pop(event.response_id, None)
    return violations


def _one_response_at_a_time(timeline: Timeline) -> list[Violation]:
    def overlap(event: Event, active: dict[str, Event]) -> Violation | None:
        if event.kind == RESPONSE and active:
            return Violation(event.index, f"response {event.response_id} began while {', '.join(active)} was active")
        if event.kind == ERROR and event.status == ACTIVE_RESPONSE_CODE and event.by != "relay":
            # (the relay's own refusal of a client's create is what keeps the second response away)
            return Violation(event.index, f"the upstream refused a second response: {event.text}")
        return None

    return _responses(timeline, overlap)


def _no_create_while_active(timeline: Timeline) -> list[Violation]:
    """A relay request (filler, follow-up) while a response is active, or while an earlier request
    of the relay's is not yet answered (the upstream would start two responses)."""
    waiting: list[Event] = []      # relay requests sent, not yet answered by a response or an error

    def overlap(event: Event, active: dict[str, Event]) -> Violation | None:
        if event.kind in (FILLER, FOLLOW_UP):
            what = "a filler" if event.kind == FILLER else "a follow-up"
            found = None
            if active:
                found = Violation(event.index, f"the relay asked for {what} while response {', '.join(active)} "
                                               "was active")
            elif waiting:
                found = Violation(event.index, f"the relay asked for {what} while its request at "
                                               f"{waiting[0].t:.3f} s was not yet answered")
            waiting.append(event)
            return found
        if waiting and ((event.kind == RESPONSE and str(event.by).startswith("relay"))
                        or (event.kind == ERROR and event.status == ACTIVE_RESPONSE_CODE and event.by != "relay")):
            waiting.pop(0)
        return None

    return _responses(timeline, overlap)


def _spoke_after_tools(timeline: Timeline) -> list[Violation]:
    violations = []
    events = timeline.events
    for event in timeline.of(OUTPUT):
        if event.by != "relay" or not event.final or event.call_id in timeline.silent_calls:
            continue
        if not any(later.kind == SPOKEN for later in events[event.index + 1:]):
            violations.append(Violation(event.index, f"nothing was said after the answer to {event.call_id} "
                                                     f"({event.name})"))
    return violations


def _one_follow_up(timeline: Timeline) -> list[Violation]:
    """A second follow-up about a call breaks the invariant unless a streaming tool's update went in
    after the first was asked for: a response covers only what the conversation held when it was
    asked for, so an update sent after that ask is news the model has yet to speak about."""
    violations = []
    asked_at: dict[str, int] = {}                       # call id -> the latest follow-up asked about it
    spoken_about: dict[str, tuple[Event, int]] = {}     # call id -> the follow-up that covered it, and its ask
    last_update = -1
    for event in timeline:
        if event.kind == FOLLOW_UP:
            for call_id in event.call_ids:
                asked_at[call_id] = event.index
        elif event.kind == RESPONSE and event.by == "relay follow-up":
            for call_id in event.call_ids:
                earlier = spoken_about.get(call_id)
                if earlier is not None and earlier[1] > last_update:
                    violations.append(Violation(event.index, f"the model was asked twice to speak about {call_id}: "
                                                             f"responses {earlier[0].response_id} and {event.response_id}"))
                spoken_about[call_id] = (event, asked_at.get(call_id, event.index))
        elif event.kind == OUTPUT and event.by == "relay" and event.call_id:
            spoken_about.pop(event.call_id, None)
        elif event.kind == UPDATE:
            last_update = event.index
    return violations


INVARIANTS: dict[str, tuple[str, Callable[[Timeline], list[Violation]]]] = {
    "answered_once": ("every relay call is answered exactly once (never a client's call, never a withdrawn one)",
                      _answered_once),
    "one_response_at_a_time": ("never two responses at once", _one_response_at_a_time),
    "no_create_while_active": ("no response.create while a response is active", _no_create_while_active),
    "spoke_after_tools": ("the model speaks after every tool", _spoke_after_tools),
    "one_follow_up": ("one follow-up per answer, never two responses about the same tool", _one_follow_up),
}


def violations(timeline: Timeline, *names: str) -> list[tuple[str, Violation]]:
    """What breaks the named invariants (all of them unless named), in timeline order."""
    unknown = [name for name in names if name not in INVARIANTS]
    if unknown:
        raise ValueError(f"unknown invariant {unknown[0]!r}; the invariants are {', '.join(INVARIANTS)}")
    found = [(name, violation) for name in (names or INVARIANTS) for violation in INVARIANTS[name][1](timeline)]
    return sorted(found, key=lambda pair: pair[1].index)


def check_invariants(timeline: Timeline, *names: str, silent: Iterable[str] = ()) -> None:
    """Raise `ExpectationFailed` naming every broken invariant; `silent`: more relay calls (ids
    or tool names) not owed speech after their answer."""
    quiet = frozenset(silent)
    if quiet:
        named = {e.call_id for e in timeline.of(CALL) if e.name in quiet or e.call_id in quiet}
        timeline = Timeline(timeline.events, timeline.source, timeline.relay_tools, timeline.dialect,
                            timeline.silent_calls | named, timeline.inspect)
    found = violations(timeline, *names)
    if not found:
        return
    first = found[0][1]
    broken = sorted({INVARIANTS[name][0] for name, _ in found})
    expected = "; ".join(broken)
    came = "\n          ".join(f"{violation.message} (at {timeline[violation.index].t:.3f} s)"
                               if violation.index < len(timeline) else violation.message
                               for _, violation in found)
    raise failure(timeline, f"the invariant{'s' if len(broken) > 1 else ''}: {expected}", came, first.index)


def own_verdict(check: Callable[[Any], Any], subject: Any) -> str | None:
    """What a user's own invariant (`--invariant`, `invariants=`) says of `subject` (an explored
    session, a replay's result): what broke, or None. A check that raises is broken under its
    own name, saying so, not a failure of the session or of the relay: its schedule and
    recording are what the user needs to debug it."""
    try:
        message = check(subject)
    except Exception as exc:   # the user's code: any error of it is its verdict
        text = " ".join(str(exc).split())
        return f"the check raised {type(exc).__name__}" + (f": {text}" if text else "")
    return str(message) if message else None


__all__ = ["DEFAULT_WITHIN", "INVARIANTS", "Expect", "ExpectationFailed", "Violation", "check_invariants",
           "own_verdict", "violations"]
