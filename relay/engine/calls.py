"""The call book: one entry per `call_id`, its lifecycle, and the invariant the relay lives by.

Every relay-owned call that became ready gets exactly one output, whatever happens (result,
handler error, bad arguments, timeout, interruption); a call the relay does not own is never
answered by it. A call's state changes only through `CallLedger.move`, which allows exactly the
steps of `LIFECYCLE` (one table per owner, as h11 keeps HTTP's rules) and refuses any other: it
raises in strict mode (the tests) and records an anomaly otherwise. How a decided call ended
(result, error, timeout, interruption...) is its `outcome`, set with the step to FINISHED.
The ledger is also what replay, export, metrics and users' tests read.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any, Callable, Collection, Iterable, Iterator

from relay.errors import RelayError


class CallState(str, Enum):
    ANNOUNCED = "announced"      # the model started the call item
    STREAMING = "streaming"      # argument deltas arriving
    COMPLETE = "complete"        # client-owned: the model finished the item (the client answers)
    READY = "ready"              # relay-owned, complete, from a live response: will run
    RUNNING = "running"          # the handler runs
    FINISHED = "finished"        # the output is decided, not yet injected
    ANSWERED = "answered"        # the output was injected (relay) or seen (client)
    SKIPPED = "skipped"          # never answered: its response was cancelled/failed, the item
                                 # incomplete, or the server cancelled the call
    ABANDONED = "abandoned"      # relay-owned: the session ended before its output could be sent


class Owner(str, Enum):
    RELAY = "relay"
    CLIENT = "client"


_S = CallState
LIFECYCLE: dict[Owner, dict[CallState, frozenset[CallState]]] = {
    # announced -> ready -> running -> finished -> answered; skipped and abandoned end a call early
    Owner.RELAY: {
        _S.ANNOUNCED: frozenset({_S.STREAMING, _S.READY, _S.SKIPPED}),
        _S.STREAMING: frozenset({_S.READY, _S.SKIPPED}),
        _S.READY: frozenset({_S.RUNNING, _S.FINISHED, _S.ABANDONED}),   # finished: unknown tool, bad arguments
        _S.RUNNING: frozenset({_S.FINISHED, _S.SKIPPED, _S.ABANDONED}),   # skipped: the server cancelled it
        _S.FINISHED: frozenset({_S.ANSWERED, _S.SKIPPED, _S.ABANDONED}),
        _S.ANSWERED: frozenset(),
        _S.SKIPPED: frozenset(),
        _S.ABANDONED: frozenset(),
    },
    # the relay only watches: the client's output may come before the item is done, and after a
    # cancelled response (the client may not know)
    Owner.CLIENT: {
        _S.ANNOUNCED: frozenset({_S.STREAMING, _S.COMPLETE, _S.ANSWERED, _S.SKIPPED}),
        _S.STREAMING: frozenset({_S.COMPLETE, _S.ANSWERED, _S.SKIPPED}),
        _S.COMPLETE: frozenset({_S.ANSWERED, _S.SKIPPED}),
        _S.ANSWERED: frozenset(),
        _S.SKIPPED: frozenset({_S.ANSWERED}),
    },
}
# the entry's timestamp each step sets
_STAMPS = {_S.READY: "ready_at", _S.RUNNING: "started_at", _S.ANSWERED: "injected_at"}
# states in which a relay call is owed an output
UNANSWERED = frozenset({_S.READY, _S.RUNNING, _S.FINISHED})
_DONE = frozenset({_S.ANSWERED, _S.SKIPPED, _S.ABANDONED})


class IllegalTransition(RelayError, RuntimeError):
    """A step a lifecycle table does not allow: a bug in the engine, never in the input."""


def refuse_step(message: str, *, strict: bool, on_refused: Callable[[str], None] | None) -> bool:
    """A step its table does not allow: raised as `IllegalTransition` in strict mode (the tests),
    otherwise told to `on_refused` (the engine records an anomaly). False: nothing moved."""
    if strict:
        raise IllegalTransition(message)
    if on_refused is not None:
        on_refused(message)
    return False


class CallOutcome(StrEnum):
    """How a relay-owned call ended: set when its output is decided (or when it is withdrawn or
    abandoned), and what its `tool_call` notice, the metrics, logs, traces, replays and the
    inspector say. Recordings keep the string value (docs/recording-format.md), and a member
    equals its value, so code that reads a recording compares with either."""

    OK = "ok"
    ERROR = "error"                  # the handler raised or returned ToolResult(error=...)
    BAD_ARGUMENTS = "bad_arguments"  # the arguments did not fit the tool's schema
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"          # interrupted by the user (policy `cancel`), or withdrawn by the server
    UNKNOWN_TOOL = "unknown_tool"
    SKIPPED = "skipped"              # never run: its response was cancelled or failed, its item incomplete
    ABANDONED = "abandoned"          # the session ended before the output could be sent

    @property
    def failed(self) -> bool:
        """Something went wrong with the call: its handler failed or refused the arguments, it
        timed out, its tool was missing, or the session ended before it was answered. A call
        that ended `ok`, `cancelled` (the user interrupted it, the server withdrew it) or
        `skipped` (the model dropped it) did not fail."""
        return self in _FAILED

    @staticmethod
    def means_failure(value: object) -> bool:
        """Whether `value` (an outcome, or its value as a recording or a notice carries it) is a
        failed outcome; False for anything else (None, a state such as `pending`)."""
        return isinstance(value, str) and value in _FAILED


_FAILED = frozenset({CallOutcome.ERROR, CallOutcome.BAD_ARGUMENTS, CallOutcome.TIMEOUT, CallOutcome.UNKNOWN_TOOL,
                     CallOutcome.ABANDONED})


@dataclass(slots=True)
class CallEntry:
    call_id: str
    name: str
    item_id: str | None
    response_id: str | None
    owner: Owner
    state: CallState = CallState.ANNOUNCED
    arguments: str = ""
    arguments_from_done: str | None = None
    delta_count: int = 0
    # the decided output (relay-owned) or the output seen from the client
    output: str | None = None
    output_status: str | None = None
    output_item_id: str | None = None
    output_event_id: str | None = None
    is_error: bool = False
    outcome: CallOutcome | None = None
    message: str | None = None          # what the assistant is to say about the result
    scheduling: str | None = None       # when_idle | interrupt | silent, as decided
    speak: bool = True                  # whether a follow-up response is wanted for it
    interrupted: bool = False
    skip_reason: str | None = None
    follow_up_response_id: str | None = None
    follow_up_event_id: str | None = None
    upstream_errors: tuple[str, ...] = ()   # errors the upstream aimed at our frames for this call
    updates: tuple[str, ...] = ()           # streaming tools: the values after the first
    output_retried: bool = False            # the output was sent again (its predecessor vanished)
    delivered_as: tuple[str, ...] = ()      # the shapes the call arrived in (Gemini: toolCall, a model-turn part)
    idempotency_key: str = ""               # set when it becomes ready (relay-owned): engine/records.py
    recorded: tuple[Any, bool] | None = None   # its latest record's (phase, follow_up): engine/records.py
    delivered: bool = False                 # the provider echoed its output item
    announced_at: float | None = None
    ready_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    injected_at: float | None = None

    @property
    def relay_owned(self) -> bool:
        return self.owner is Owner.RELAY

    def latency_ms(self) -> float | None:
        """Ready to injected, in milliseconds: the delay the relay's tool added."""
        if self.ready_at is None or self.injected_at is None:
            return None
        return (self.injected_at - self.ready_at) * 1000.0

    def as_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__slots__}
        data["owner"] = self.owner.value
        data["state"] = self.state.value
        return data


FORGOTTEN_CALLS_KEPT = 64
"""The forgotten calls a session's call book keeps the ids of (10 KB or so at the most): a provider
that delivers a call again does it within moments, not 64 forgotten calls later."""


class CallLedger:
    """The calls of one session by `call_id` (and by item id), and the one way their state
    changes. `on_refused` hears of a refused step when not `strict`; `on_step` of each step made;
    `before_forgetting`, when set, is called as `forget_old` begins, before it may forget calls (a
    reader of the book reads the entries it still needs first: the explorer's anchors)."""

    def __init__(self, *, strict: bool = True, on_refused: Callable[[str], None] | None = None,
                 on_step: Callable[[CallEntry], None] | None = None) -> None:
        self._entries: dict[str, CallEntry] = {}
        # the calls `forget_old` forgot, by id (the latest `FORGOTTEN_CALLS_KEPT`): what each was, so that
        # one delivered again is known as the call it is (`get`) and never runs a second time
        self._forgotten: dict[str, tuple[str, Owner, CallState]] = {}
        self._on_step = on_step   # hears of every step made, after it (the context's records)
        self._by_item: dict[str, str] = {}
        self.strict = strict
        self._on_refused = on_refused
        self.before_forgetting: Callable[[], None] | None = None

    def __iter__(self) -> Iterator[CallEntry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._entries or call_id in self._forgotten

    def get(self, call_id: object) -> CallEntry | None:
        """The call's entry; one forgotten comes back (its name, owner and final state: what tells
        a call delivered again from a new one)."""
        if not isinstance(call_id, str):
            return None
        entry = self._entries.get(call_id)
        if entry is None and call_id in self._forgotten:
            name, owner, state = self._forgotten.pop(call_id)
            entry = self._entries[call_id] = CallEntry(call_id, name, None, None, owner, state)
        return entry

    def owner_of(self, call_id: object) -> Owner | None:
        """Who owns a call the book holds or forgot (None: a call it never had), without bringing a
        forgotten one back as `get` does."""
        entry = self._entries.get(call_id) if isinstance(call_id, str) else None
        if entry is not None:
            return entry.owner
        forgotten = self._forgotten.get(call_id) if isinstance(call_id, str) else None
        return forgotten[1] if forgotten is not None else None

    def by_item(self, item_id: object) -> CallEntry | None:
        if not isinstance(item_id, str):
            return None
        call_id = self._by_item.get(item_id)
        return self._entries.get(call_id) if call_id else None

    def add(self, entry: CallEntry) -> CallEntry:
        """Record a new call (announced), or index an entry under the item id it now has."""
        self._entries[entry.call_id] = entry
        if entry.item_id:
            self._by_item[entry.item_id] = entry.call_id
        return entry

    def move(self, entry: CallEntry, to: CallState, now: float) -> bool:
        """The one way a call's state changes: allowed steps only (`LIFECYCLE`), each setting its
        timestamp. A refused step raises `IllegalTransition` in strict mode; otherwise it is
        reported to `on_refused`, the state stays, and False is returned."""
        if to not in LIFECYCLE[entry.owner].get(entry.state, ()):
            message = (f"call {entry.call_id} ({entry.owner.value}-owned {entry.name or '?'}): "
                       f"{entry.state.value} -> {to.value} is not a step of its lifecycle")
            return refuse_step(message, strict=self.strict, on_refused=self._on_refused)
        entry.state = to
        stamp = _STAMPS.get(to)
        if stamp is not None:
            setattr(entry, stamp, now)
        if self._on_step is not None:
            self._on_step(entry)
        return True

    def forget_old(self, keep: int, responses: Collection[str] = ()) -> None:
        """Keep the latest `keep` finished calls (answered, skipped, abandoned), every unfinished
        one and those of the `responses` still remembered; forget older finished calls. Their
        outputs are long delivered; a call of a response still remembered may yet be delivered
        again (a late `output_item.done`, a duplicate), and must be known when it is."""
        if self.before_forgetting is not None:
            self.before_forgetting()
        if len(self._entries) <= keep + keep // 2:   # forget in batches
            return
        finished = [e for e in self._entries.values() if e.state in _DONE and e.response_id not in responses]
        forgotten = self._forgotten
        for entry in finished[:-keep]:
            del self._entries[entry.call_id]
            if entry.item_id is not None:
                self._by_item.pop(entry.item_id, None)
            forgotten[entry.call_id] = (entry.name, entry.owner, entry.state)
        for call_id in list(forgotten)[:max(0, len(forgotten) - FORGOTTEN_CALLS_KEPT)]:
            del forgotten[call_id]

    def unanswered(self) -> list[CallEntry]:
        """Relay-owned calls that became ready but whose output has not been injected."""
        return [e for e in self._entries.values() if e.owner is Owner.RELAY and e.state in UNANSWERED]


class RunningHandlers:
    """The calls whose handler runs, and when each handler times out (its timer may stop before
    the handler: a streaming tool's first value decides the output, and the handler goes on)."""

    __slots__ = ("_calls", "_deadlines")

    def __init__(self) -> None:
        self._calls: set[str] = set()
        self._deadlines: dict[str, float] = {}   # call_id -> when its handler times out

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._calls

    def call_ids(self) -> list[str]:
        return list(self._calls)

    def start(self, call_id: str, deadline: float) -> None:
        self._calls.add(call_id)
        self._deadlines[call_id] = deadline

    def stop(self, call_id: str) -> None:
        """The handler is over (finished, cancelled, timed out)."""
        self._calls.discard(call_id)
        self._deadlines.pop(call_id, None)

    def stop_timer(self, call_id: str) -> None:
        self._deadlines.pop(call_id, None)

    def due(self, now: float) -> list[str]:
        """The calls whose handler's time is up."""
        return [call_id for call_id, deadline in self._deadlines.items() if deadline <= now]

    def deadlines(self) -> Iterable[float]:
        return self._deadlines.values()


def tool_call_fields(entry: CallEntry) -> dict[str, Any]:
    """The fields of a `tool_call` notice for `entry`: who, how it ended, what the relay decided
    the assistant says about it (`message`, content: recorded, never logged), and its timings."""
    latency = entry.latency_ms()
    handler_ms = None
    if entry.started_at is not None and entry.finished_at is not None:
        handler_ms = round((entry.finished_at - entry.started_at) * 1000.0, 3)
    return {
        "call_id": entry.call_id, "name": entry.name, "outcome": entry.outcome,
        "status": entry.output_status, "response_id": entry.response_id,
        "item_id": entry.item_id, "output_item_id": entry.output_item_id,
        "ms": None if latency is None else round(latency, 3), "handler_ms": handler_ms,
        "is_error": entry.is_error, "message": entry.message,
    }


def seconds_text(seconds: float) -> str:
    """`2` for 2.0, `0.5` for 0.5: how timeouts read in outputs."""
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"
