"""A real `redis-server` (Debian's) for the store's tests: started on a free loopback port in a
temporary directory, waited for until its port accepts (never a sleep), stopped after."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.processes import missing_program

INSTALL_REDIS = "apt-get install redis-server"
START_TIMEOUT = 10.0


def find_redis_server() -> str | None:
    return shutil.which("redis-server", path="/usr/bin:/usr/sbin:/usr/local/bin")


def redis_server_or_skip() -> str:
    program = find_redis_server()
    if program is None:
        missing_program(f"redis-server is not installed: {INSTALL_REDIS}")
    return program


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = START_TIMEOUT) -> None:
    """Until `port` accepts a connection (the server is up), or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited with {process.returncode} before it listened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not listen on {port} within {timeout} s") from None
            # a refused connection returns at once: block on the process for a moment instead
            try:
                process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass


class RedisServer:
    """A running redis-server: its `url`, and `stop` (what a test that loses its store calls)."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.url = f"redis://127.0.0.1:{port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def redis_server(directory: Path, port: int | None = None) -> Iterator[RedisServer]:
    """A redis-server of its own, without persistence, stopped after."""
    program = redis_server_or_skip()
    port = port or free_port()
    process = subprocess.Popen(
        [program, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory), "--save", "",
         "--appendonly", "no", "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = RedisServer(process, port)
    try:
        wait_for_port(port, process)
        yield server
    finally:
        server.stop()
