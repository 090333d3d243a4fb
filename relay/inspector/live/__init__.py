"""The live inspector: the sessions an edge runs, shown as they happen in the inspector's page.

    hub = LiveHub()                                     # one per edge (process)
    taps = Taps(metrics.tap(), writer)                  # the edge's own recorders
    tap = hub.open_session(session_id, header=runtime.session_header(...),
                           as_recorded=runtime.recording_filter(writer), recording=writer, taps=taps)
    SessionLoop(..., recorder=tap)                      # and `tap.close(reason)` when it ends
    InspectorEndpoint(hub, token=...)                   # /inspector on a transport's server
    asgi_app(hub, token=...)                            # or mounted in an ASGI app

`relay serve --inspector` and `relay attach --inspector HOST:PORT` use it; hub.py says what it
costs (nothing while nobody watches) and what a watcher sees, feed.py what the page and the relay
say to each other, endpoints.py how the page authenticates.
"""

from relay.inspector.live.endpoints import (
           BASE_PATH,
           InspectorEndpoint,
           asgi_app,
           render_live_page,
           serve_inspector,
)
from relay.inspector.live.feed import FeedConnection
from relay.inspector.live.hub import LiveHub, LiveSession, LiveTap

__all__ = ["BASE_PATH", "FeedConnection", "InspectorEndpoint", "LiveHub", "LiveSession", "LiveTap", "asgi_app",
           "render_live_page", "serve_inspector"]
