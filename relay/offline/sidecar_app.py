"""The caller's application beside a sidecar relay, for the scripted sessions of every wire with a
sideband (relay/offline/scripted.py: the Realtime wires; relay/offline/scripted_delegations.py:
GPT-Live).

A sidecar relay (`relay attach`) is not in the call's path: the caller's application talks to the
server on its own connection, and the relay is attached to the same session by a second one. A
scripted session in `mode="sidecar"` plays both: the mock's session has the application's
connection (`APP`) and the relay's, every event the server sends every connection reaches the
relay and, as the relay reads it (`PeerTransport.overheard`, or as the relay's connection loses it
while away), the application; an event the server sends one connection (an error, the session's
opening before the relay attached) reaches that one only. The application reads what it hears as a
client reads its socket, once the server's step that sent it is over (a callback of the virtual
loop, at the same moment); it answers its own tools' calls and asks for their response itself,
straight to the server and unseen by the relay, and never answers the relay's calls, which it
sees. The relay declares its tools to the session, as `relay attach --declare-tools` does.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from relay.dialects import get_dialect
from relay.engine import EngineConfig
from relay.offline.harness import CallerFailed

MODES = ("proxy", "sidecar")
APP = 0
"""The mock's connection of the caller's application in a sidecar session (the relay's is 1)."""
RELAY = 1


def sidecar_config(*, strict: bool = True, history_limit: int | None = None) -> EngineConfig:
    """The engine of a relay attached beside the call, as `relay attach --declare-tools` runs it:
    no client (nothing to hide), its tools declared to the session."""
    return EngineConfig(mode="sidecar", hide_tool_events=False, declare_tools=True, strict=strict,
                        history_limit=history_limit)


def has_sidecar(dialect: str) -> bool:
    """Whether the relay can run as a sidecar on `dialect`: its server takes a second connection
    to a call (`Dialect.call_sideband`; not Gemini Live's, not Voice Live's). An unknown dialect
    has none (it is refused where it is chosen)."""
    try:
        return get_dialect(dialect).call_sideband
    except ValueError:
        return False


def chosen_mode(mode: str | None, options: dict[str, Any], dialect: str, strict: bool,
                error: type[Exception] = ValueError) -> bool:
    """Whether a scripted session of `dialect` runs the relay as a sidecar: `mode` (`proxy` or
    `sidecar`), else its `config`'s. A sidecar's `config` is put in `options` when none is given;
    `error` is raised for a mode that is not one, a wire without a sideband, or a proxy's config."""
    config = options.get("config")
    chosen = mode or ("sidecar" if config is not None and not config.has_client else "proxy")
    if chosen not in MODES:
        raise error(f"a scripted session's mode is {' or '.join(MODES)}, not {chosen!r}")
    if chosen == "proxy":
        return False
    if not has_sidecar(dialect):
        raise error(f"the {dialect} dialect has no sidecar: its server takes no second connection to a call "
                    "(relay attach)")
    if config is None:
        options["config"] = sidecar_config(strict=strict)
    elif config.has_client:
        raise error("mode='sidecar' with a proxy's config: give an EngineConfig(mode='sidecar')")
    return True


class SidecarApp:
    """A scripted session's caller as an application beside a sidecar relay (see the module
    docstring); inert in a proxy's session. The session says what the server answers the
    application's frame (`_app_sends`) and calls `_beside` before anything is sent."""

    sidecar = False
    relay_attached = True   # the relay's connection to the mock is open (a sidecar's opens second)
    _app_queue: Any = ()   # what the application heard and has not read yet

    def _beside(self) -> None:
        self.sidecar = True
        self.relay_attached = False
        self._app_queue: deque[str | bytes] = deque()
        self._app_reading = False
        self._relay_only: set[int] = set()   # frames the server sent the relay alone, by identity
        self.upstream.overheard = self.overhear   # type: ignore[attr-defined]

    def _app_sends(self, frame: str | bytes) -> list[str | bytes]:
        """The application sends `frame` to the server: what the server sends the relay back."""
        raise NotImplementedError

    def from_caller(self, frames: list[str | bytes]) -> None:
        """What the caller sends: to the relay (a proxy's), or to the server itself (a sidecar's:
        what the server sends back reaches the relay, and the application as the relay reads it)."""
        if not self.sidecar:
            super().from_caller(frames)   # type: ignore[misc]
            return
        for frame in frames:
            self._queue_upstream(self._app_sends(frame))   # type: ignore[attr-defined]
        self._pump()   # type: ignore[attr-defined]

    def reaches_relay(self, to: int | None, frame: str | bytes, relay: int) -> bool:
        """Whether the mock's event `frame`, sent to connection `to` (None: every connection),
        reaches the relay (on connection `relay`). A sidecar's application is sent its own at once
        (an error of its, every connection's before the relay attached); one sent the relay alone
        (an error of the relay's) it does not overhear; every connection's it overhears as the
        relay reads it (`overhear`)."""
        if not self.sidecar:
            return to is None or to == relay
        if to == APP or (to is None and not self.relay_attached):
            self.app_hears(frame)
            return False
        if to is None:
            return True
        if to != relay:
            return False
        self._relay_only.add(id(frame))   # (the frame is held until the relay reads it: no other takes the id)
        return True

    def overhear(self, frame: str | bytes) -> None:
        """The relay reads (or, while its connection is away, loses) `frame` from the server: the
        application, on its own connection, is sent it too, at the same moment."""
        if not self.sidecar:
            return
        if self._relay_only and id(frame) in self._relay_only:
            self._relay_only.discard(id(frame))
            return
        self.app_hears(frame)

    def app_hears(self, frame: str | bytes) -> None:
        """The server sends the application `frame`: it reads it once what the server is doing now
        is done (a callback of the loop, at this virtual moment), never in the middle of the
        server's own step."""
        self._app_queue.append(frame)
        if not self._app_reading:
            self._app_reading = True
            self.loop.call_soon(self._app_reads)   # type: ignore[attr-defined]

    def _app_reads(self) -> None:
        self._app_reading = False
        queue = self._app_queue
        while queue and not self.closed:   # type: ignore[attr-defined]
            frame = queue.popleft()
            try:
                answers = self._caller_receive(frame)   # type: ignore[attr-defined]
            except Exception as exc:   # the test's own code: the step fails with it
                self._problems.append(   # type: ignore[attr-defined]
                    CallerFailed(f"the caller's own tool raised {type(exc).__name__}: {exc}"))
                continue
            if answers:
                self.from_caller(answers)


__all__ = ["APP", "MODES", "RELAY", "SidecarApp", "chosen_mode", "has_sidecar", "sidecar_config"]
