"""The relay's tools in the tool-turnaround benchmark (`relay serve --tools scripts/bench_tools.py`):
handlers that return at once, so the figure is the relay's own turnaround. One of each kind the
runner treats differently: async handlers run as tasks, sync ones in worker threads."""

from __future__ import annotations

from relay import tool


@tool
async def instant(n: int) -> dict:
    """Return the number at once."""
    return {"n": n}


@tool
def instant_sync(n: int) -> dict:
    """Return the number at once, from a worker thread."""
    return {"n": n}
