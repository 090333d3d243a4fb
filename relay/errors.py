"""The relay's errors, under one root.

`RelayError` is the root of every error the relay's commands and edges raise on purpose (the
test harness's own failures are `ScriptError`, `ExpectationFailed` and `SessionOver`, and
arguments a function cannot take are `ValueError`s). `UnusableInput` is the branch a command
cannot work with: its message is the one line the user sees, and the command exits 2
(`relay.cli.exits`). Every input error the relay knows (a configuration, a recording, a tools
file, a dialect, an export) derives from it, so the command line recognises them by their root,
not by a list of classes that must be kept in step with the code that raises them. Errors that
are not about input (a provider that cannot be reached, a step the call table forbids) derive from
`RelayError` alone.

This module imports nothing of the relay: every layer may raise these.
"""

from __future__ import annotations

import errno
import os
import socket

ANOTHER_PORT = "choose another --port (0 picks a free one)"
"""What to do about a port in use, for a command whose listener `--port` sets."""

REDACTED = "[redacted]"
"""What stands in for a secret (a key, a token) wherever one is kept out of text: in frames, in
recordings, and in error messages of every layer (hence here)."""


class RelayError(Exception):
    """The root of every error the relay's commands and edges raise on purpose."""


class UnusableInput(RelayError):
    """Input or usage a command cannot work with; the message is the one line the user sees."""


class ConfigError(UnusableInput, ValueError):
    """The edge cannot start with this configuration; the message says what to change."""


def cannot_listen(host: str, port: int, exc: OSError, *, what: str = "", hint: str = "",
                  if_in_use: str = "") -> UnusableInput:
    """The error for an address that cannot be listened on (`what` says which of a command's
    listeners, `hint` which option changes it; `if_in_use`, the hint when the port is taken)."""
    if not hint and exc.errno == errno.EADDRINUSE:
        hint = if_in_use
    reason = exc.strerror or str(exc)
    if isinstance(exc.errno, int) and exc.errno > 0 and not isinstance(exc, socket.gaierror):
        reason = os.strerror(exc.errno)   # asyncio's own text repeats the address
    where = f" for {what}" if what else ""
    return UnusableInput(f"cannot listen on {host}:{port}{where}: {reason}{'; ' + hint if hint else ''}")
