"""The WebSocket libraries the relay's sockets can run on, one module each, behind the transport
seam (relay/session/transport.py): `websockets` (pure Python; always installed) and `picows` (C
framing; the `fast` extra). `backend_named` turns `--transport` into a `Backend`, importing only
the library it names."""

from __future__ import annotations

import importlib.util

from relay.errors import ConfigError
from relay.session.transport import Backend

TRANSPORTS = ("auto", "websockets", "picows")
"""`--transport`: `auto` is the first of AUTO_ORDER that is installed."""
AUTO_ORDER = ("picows", "websockets")
PICOWS_SERIES = "2.3."
"""The picows releases relay/transports/picows.py was checked against (its pin in pyproject.toml)."""


def installed(name: str) -> bool:
    """The transport `name` can run here (picows: installed, and of the series the relay knows)."""
    if name == "websockets":
        return True
    if importlib.util.find_spec("picows") is None:
        return False
    from picows import __version__

    return __version__.startswith(PICOWS_SERIES)


def resolved(name: str) -> str:
    """The transport `name` means here (`auto`: picows when installed, else websockets);
    ConfigError when it cannot run."""
    if name not in TRANSPORTS:
        raise ConfigError(f"--transport takes {', '.join(TRANSPORTS)}, not {name!r}")
    if name == "auto":
        return next(candidate for candidate in AUTO_ORDER if installed(candidate))
    if not installed(name):
        raise ConfigError(f"--transport {name}: picows {PICOWS_SERIES}x is not installed "
                          "(pip install 'realtime-relay[fast]')")
    return name


def backend_named(name: str) -> Backend:
    """The Backend of the transport `name` (one of TRANSPORTS)."""
    if resolved(name) == "picows":
        from relay.transports.picows import BACKEND as PICOWS

        return PICOWS
    from relay.transports.websockets import BACKEND as WEBSOCKETS

    return WEBSOCKETS
