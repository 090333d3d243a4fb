"""relay: runs an application's tools server-side inside realtime speech-to-speech sessions."""

from __future__ import annotations

__version__ = "0.2.0.dev0"  # the one place the version is set (pyproject.toml reads it)

# The public surface, imported lazily so `import relay` stays light for the CLI and workers.
_EXPORTS = {
    "tool": "relay.tools",
    "ToolResult": "relay.tools",
    "ToolRegistry": "relay.tools",
    "Scheduling": "relay.tools",
    "Interruption": "relay.tools",
    "delegate": "relay.tools",
    "Delegation": "relay.tools",
    "Engine": "relay.engine",
    "EngineConfig": "relay.engine",
    "GeminiEngine": "relay.engine",
    "OpenAIEngine": "relay.engine",
    "new_engine": "relay.engine",
    "serve": "relay.edges.serve",
    "RelayServer": "relay.edges.serve",
    "ServerConfig": "relay.edges.serve",
    "attach": "relay.edges.attach",
    "Sidecar": "relay.edges.attach",
    "SidecarConfig": "relay.edges.attach",
}


def __getattr__(name: str):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'relay' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


__all__ = ["__version__", *_EXPORTS]
