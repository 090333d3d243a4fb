"""The call ledger's store, as one small async interface every store implements.

A store keeps, per session, the latest `CallRecord` of each relay call (`put` replaces it,
`update` changes its phase and fields), gives them back (`session_records`), and holds each
session under at most one lease (`acquire`, `renew`, `release`), whose token fences writes: a
write carrying a token older than the session's newest is refused with `Fenced`, so an owner that
lost its lease cannot overwrite its successor. A token of 0 is a write outside any lease (what a
session that takes no lease writes). A leased session is also listed with its target (what a
replica attaches to: the provider's call id) until it ends (`end`), so that another replica finds
it once its lease expires (`orphans`); an owner that drains `offer`s its sessions, which makes
them free to `acquire` at once although the lease still holds (the handoff). A store that
cannot be reached raises `StoreError`; what it gives back that is not a record is skipped and
counted (`skipped`), never raised.

A proxied session that a client may resume (relay/edges/resume.py) also keeps its resume state:
one text under a key derived from the resume token (`keep_resume`, replaced by each write and
expiring `ttl` seconds after the latest), read back by whichever replica the client reconnects to
(`resume_state`). While a session's resume state lives, its call records live too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from relay.engine.records import CallRecord, Phase
from relay.errors import RelayError


class StoreError(RelayError):
    """The store could not do what was asked (unreachable, refused, too slow)."""


class Fenced(StoreError):
    """A write carried a fencing token older than the session's newest: its writer lost the lease."""


@dataclass(frozen=True, slots=True)
class Lease:
    """One owner's hold on a session until `expires_at` (the store's clock, seconds); `token`
    fences its writes and grows with every acquisition of the session."""

    session_id: str
    owner: str
    token: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class Orphan:
    """A listed session no live owner holds: its id, its target, and whether its owner offered it
    (a drain) rather than lost it."""

    session_id: str
    target: str
    offered: bool = False


class CallStore(ABC):
    """Where the call records of sessions are kept. `synchronous` stores (memory) also write with
    `put_now`, which the write-ahead uses so that nothing waits on them."""

    synchronous = False
    shared = False   # other processes read it: sessions take leases, and replicas take them over
    name = "store"

    def __init__(self) -> None:
        self.skipped = 0   # records read back that were not records (bad data), skipped

    async def open(self) -> None:
        """Connect and check the store answers (StoreError if not)."""

    async def close(self) -> None:
        """Let go of connections."""

    def forget_now(self, session_id: str) -> None:
        """Let an ended session's records go, where nothing reads them after it (synchronous
        stores: a process's memory); a shared store keeps them until they expire."""

    def put_now(self, record: CallRecord, *, fence: int = 0) -> None:
        """`put` at once (synchronous stores only)."""
        raise NotImplementedError(f"{type(self).__name__} does not write synchronously")

    @abstractmethod
    async def put(self, record: CallRecord, *, fence: int = 0) -> None:
        """Keep `record` as its call's latest (Fenced if `fence` is older than the session's)."""

    @abstractmethod
    async def update(self, session_id: str, call_id: str, phase: Phase, *, fence: int = 0,
                     **changes: Any) -> bool:
        """Move a kept call to `phase` (with `changes` to its other fields); False if no record of
        it is kept. Fenced as `put`."""

    @abstractmethod
    async def session_records(self, session_id: str) -> list[CallRecord]:
        """The latest record of each call of the session, oldest decision first."""

    @abstractmethod
    async def acquire(self, session_id: str, owner: str, ttl: float, *, target: str = "") -> Lease | None:
        """Hold the session for `ttl` seconds with a new token, unless another owner holds it (and
        has not offered it). A `target` lists the session (for `orphans`) under that target."""

    @abstractmethod
    async def orphans(self, limit: int = 100) -> list[Orphan]:
        """Listed sessions whose lease expired, or was offered, and that have not ended: the
        sessions a replica may take over (its `acquire` decides)."""

    @abstractmethod
    async def offer(self, lease: Lease) -> bool:
        """Offer the session to a peer (the owner drains): it stays held until a peer acquires it,
        then `renew` tells the owner it is gone. False if the lease was already lost."""

    @abstractmethod
    async def end(self, lease: Lease) -> bool:
        """The session is over: unlist it and release the lease (if still held)."""

    @abstractmethod
    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        """Extend a lease still held; None once it was lost (expired and taken, or released). A
        lease that expired while no other owner took it is taken back with the same token: the
        store answering a renewal late (a slow Redis) costs the owner nothing it still holds."""

    @abstractmethod
    async def release(self, lease: Lease) -> bool:
        """Let the session go, if the lease still holds it."""

    async def keep_resume(self, key: str, session_id: str, state: str, ttl: float) -> None:
        """Keep `state` (the resume state of `session_id`) under `key` for `ttl` seconds."""
        raise StoreError(f"the {self.name} store keeps no resume state")

    async def resume_state(self, key: str) -> str | None:
        """The resume state kept under `key`; None once it expired (or was never kept)."""
        raise StoreError(f"the {self.name} store keeps no resume state")

    def _read(self, texts: Any) -> list[CallRecord]:
        """Records from stored JSON texts, the bad ones skipped (and counted), by time."""
        records = []
        for text in texts:
            try:
                records.append(CallRecord.from_json(text))
            except (ValueError, TypeError):
                self.skipped += 1
        records.sort(key=lambda record: record.at)
        return records


def updated(record: CallRecord, phase: Phase, changes: dict[str, Any]) -> CallRecord:
    """`record` moved to `phase` with `changes` (unknown fields refused with TypeError)."""
    data = record.as_dict() | changes | {"phase": phase}
    return CallRecord.from_dict(data)
