"""`relay attach` as a Python call: run the relay's tools beside one live WebRTC or SIP call,
given by its id, until the call ends. The attached call itself (connecting, reconnecting while the
call lives, logging, recording) is relay/edges/sideband.py's, shared with `relay sidecar`.
"""

from __future__ import annotations

from typing import Any

from relay.edges.config import SidecarConfig
from relay.edges.sideband import CallEnded, Sidecar
from relay.session.loop import SessionEnd
from relay.tools.sources import ToolSources

__all__ = ["CallEnded", "Sidecar", "SidecarConfig", "attach"]


async def attach(call_id: str, tools: ToolSources = (), **options: Any) -> SessionEnd:
    """Attach to a live call and run `tools` beside it until the call ends, like `relay attach`:

        end = await attach("rtc_...", tools=[get_weather])

    `options` are `SidecarConfig` fields (`upstream`, `dialect`, `declare_tools`, `record_dir`,
    ...). Returns how the session ended. Raises `ConfigError` for a configuration that cannot
    work, `UpstreamUnavailable` (`CallEnded` for an unknown call) when it cannot attach."""
    return await Sidecar(call_id, SidecarConfig(tools=tools, **options)).run()
