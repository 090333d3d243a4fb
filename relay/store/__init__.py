"""Where a session's call ledger is kept beyond the engine: the store interface (`base`), the
in-memory store (the default), the Redis store (`redis://...`, the `store` extra) and `open_store`,
which picks one by URL. The engine never imports this package: what it decides reaches a store as
`Remember` actions, carried out by the session's driver (`writeahead.WriteAhead`)."""

from __future__ import annotations

from relay.store.base import CallStore, Fenced, Lease, StoreError
from relay.store.memory import MemoryStore

MEMORY = "memory"


def open_store(url: str | None) -> CallStore:
    """The store `url` names: None, "" or `memory` the in-memory store; `redis://` or `rediss://`
    (or `unix://`) a Redis store. Nothing is connected here (`CallStore.open` does)."""
    if not url or url == MEMORY:
        return MemoryStore()
    if url.startswith(("redis://", "rediss://", "unix://")):
        from relay.store.redis import RedisStore

        return RedisStore(url)
    raise StoreError(f"unknown store {url!r}: use 'memory' or a redis:// URL")


__all__ = ["CallStore", "Fenced", "Lease", "MEMORY", "MemoryStore", "StoreError", "open_store"]
