"""An event a test waits on (with a timeout) instead of polling state with sleeps: set from a
callback once a method of a running object (a sidecar's engine, its store writes) has returned
for the arguments the test names.

    with returned(sidecar.engine, "handler_finished", lambda call_id, *_: call_id == wanted) as done:
        gate.opened.set()
        with anyio.fail_after(TIMEOUT):
            await done.wait()
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio


@contextmanager
def returned(owner: Any, name: str, when: Callable[..., bool] = lambda *args, **kwargs: True) -> Iterator[anyio.Event]:
    """An event set once `owner.name(...)` (a method, sync or async) returned for arguments that
    `when` accepts. The method is wrapped on the instance for the block, and unwrapped after."""
    event = anyio.Event()
    original = getattr(owner, name)
    wrapped: Callable[..., Any]
    if inspect.iscoroutinefunction(original):
        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = await original(*args, **kwargs)
            if when(*args, **kwargs):
                event.set()
            return result
    else:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if when(*args, **kwargs):
                event.set()
            return result
    setattr(owner, name, wrapped)
    try:
        yield event
    finally:
        delattr(owner, name)   # the class's method shows through again
