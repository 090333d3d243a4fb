"""relay: runs an application's tools server-side inside realtime speech-to-speech sessions."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Loaded on first use, so `import relay` stays light (no websockets, no engine).
_LAZY = {
    "serve": "relay.server",
    "RelayServer": "relay.server",
    "ServerConfig": "relay.server",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'relay' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
