"""Process control for the long-running commands: run one piece of work in a fresh event loop
(`run_in_loop`: asyncio's own or uvloop's, as `--loop` says) until it ends, turning SIGTERM and
SIGINT into a graceful stop (`run_until_signalled`), and `--workers`: several processes sharing
one port with SO_REUSEPORT (`run_workers`).

What a signal means (drain the sessions, detach from the call) is the caller's: this module
only delivers it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from typing import Awaitable, Callable, Sequence, TypeVar

import anyio

from relay.errors import ANOTHER_PORT, UnusableInput, cannot_listen

log = logging.getLogger("relay.process")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
LOOPS = ("auto", "asyncio", "uvloop")
"""`--loop`: uvloop's event loop (`auto` when it is installed: the `fast` extra), or asyncio's own."""

T = TypeVar("T")


def event_loop_factory(loop: str = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the event loop `loop` names (one of LOOPS), as uvicorn's `--loop` does:
    `asyncio` is asyncio's own loop whatever policy is installed; `auto` is uvloop's when it is
    installed, else the installed policy's (asyncio's own unless the application set another).
    UnusableInput for `uvloop` when it is not installed."""
    if loop not in LOOPS:
        raise UnusableInput(f"--loop takes {', '.join(LOOPS)}, not {loop!r}")
    if loop == "asyncio":
        return asyncio.SelectorEventLoop
    try:
        import uvloop
    except ImportError:
        if loop == "uvloop":
            raise UnusableInput("--loop uvloop: uvloop is not installed (pip install 'realtime-relay[fast]')") from None
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def run_in_loop(main: Callable[[], Awaitable[T]], loop: str = "auto") -> T:
    """`main()` run to its end in a new event loop of the kind `loop` names (see
    event_loop_factory), closed afterwards."""
    with asyncio.Runner(loop_factory=event_loop_factory(loop)) as runner:
        return runner.run(main())   # type: ignore[arg-type]

OnSignal = Callable[[str, bool], Awaitable[None]]
"""Called with the signal's name (`SIGTERM`) and whether a stop signal came before."""


def run_until_signalled(work: Callable[[], Awaitable[int]], on_signal: OnSignal,
                        signals: Sequence[int] = STOP_SIGNALS, *, loop: str = "auto") -> int:
    """Run `work` in a new event loop (of the kind `loop` names, see event_loop_factory) and
    return its exit status. Each of `signals` calls `on_signal`, after which `work` is expected
    to finish. The handlers are in place before `work` starts, so a signal that comes as soon as
    a server listens already stops it; once `work` is done, the signals are ignored, so that one
    that comes while the process exits (an orchestrator's second SIGTERM to a relay whose drain
    has just ended) does not kill it on its way out, turning exit 0 into death by signal.

    The handlers are Python-level ones (`signal.signal`) that hand the signal to the loop, not
    the loop's own (`add_signal_handler`): taking the loop's away puts the default action back
    (death, for SIGTERM) before SIG_IGN can replace it, and a signal in that gap killed a relay
    whose drain had ended (the cluster test). Ours go straight to SIG_IGN. They run in the main
    thread, which the kernel gives a process's signals first, and a signal interrupts the loop's
    wait there, so they are as prompt as the loop's."""

    async def main() -> int:
        received: asyncio.Queue[str] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def hand_to_loop(signum: int, frame: object) -> None:
            loop.call_soon_threadsafe(received.put_nowait, signal.Signals(signum).name)

        async def deliver() -> None:
            again = False
            while True:
                name = await received.get()
                await on_signal(name, again)
                again = True

        before = {signum: signal.signal(signum, hand_to_loop) for signum in signals}
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(deliver)
                status = await work()
                group.cancel_scope.cancel()
        except BaseException:   # the caller's handlers back, for whatever it does with the error
            for signum, handler in before.items():
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)
            raise
        for signum in signals:
            signal.signal(signum, signal.SIG_IGN)
        return status

    return run_in_loop(main, loop)


def run_workers(host: str, port: int, workers: int, run_worker: Callable[[int], int],
                on_worker_exit: Callable[[int], None] | None = None) -> int:
    """Fork `workers` processes that each run `run_worker(port)` and listen on the same port
    (SO_REUSEPORT: the kernel spreads connections over them; port 0 is chosen here, once). A
    worker stops on SIGTERM only; the parent only supervises: SIGTERM or SIGINT is passed on as
    SIGTERM, so every worker stops as it would alone, and `on_worker_exit(pid)` hears of each
    worker that exited. Returns 1 when a worker failed, 2 when the platform cannot do it; a port
    that cannot be had raises UnusableInput (`relay.cli.exits`)."""
    if not hasattr(os, "fork") or not hasattr(socket, "SO_REUSEPORT"):
        log.error("--workers needs fork() and SO_REUSEPORT (Linux, BSD, macOS)")
        return 2
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError as exc:   # a host name that does not resolve
        raise cannot_listen(host, port, exc) from None
    reservation = socket.socket(family, socket.SOCK_STREAM)
    reservation.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        reservation.bind(address)   # holds the port (chosen here when 0) without accepting on it
    except OSError as exc:
        reservation.close()
        raise cannot_listen(host, port, exc, if_in_use=ANOTHER_PORT) from None
    port = reservation.getsockname()[1]
    children: list[int] = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:   # the worker: the parent tells it when to stop
            status = 1
            try:
                reservation.close()
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                status = run_worker(port)
            except UnusableInput as exc:   # said here, in one line: os._exit leaves nothing behind
                log.error("worker %d: %s", os.getpid(), exc)
            except Exception:
                log.exception("worker %d failed", os.getpid())
            finally:
                os._exit(status)
        children.append(pid)

    def forward(signum: int, frame: object) -> None:
        for child in children:
            try:
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    while children:
        pid, wait_status = os.waitpid(-1, 0)
        if pid in children:
            children.remove(pid)
            if on_worker_exit is not None:
                on_worker_exit(pid)
            code = os.waitstatus_to_exitcode(wait_status)
            if code != 0:
                log.error("worker %d exited with status %d", pid, code)
                status = status or 1
    reservation.close()
    return status
