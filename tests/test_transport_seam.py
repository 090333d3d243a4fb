"""The `Transport` seam (relay/session/transport.py) holds what every transport must do, at most
five methods (receive, hold_reading, send, write, close), and every transport implements the same
five with the same parameters: the websockets and picows transports, the in-memory one the
tests run the session loop over, and the harness's (`relay.offline.peers.PeerTransport`, the
sockets of the relay under test on virtual time), whose behaviour on the seam is checked here too."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import anyio
import pytest

from relay.offline.peers import PeerTransport
from relay.session import transport as seam
from relay.session.transport import FrameQueue, TransportClosed
from relay.transports.websockets import WebsocketsTransport
from tests.support.peers import InMemoryTransport

MOST_METHODS = 5
SEAM = Path(seam.__file__)


def methods_of(source: str, class_name: str) -> list[str]:
    """The names of what the class `class_name` in `source` defines as methods (properties too:
    an attribute read through a call is still a method to implement)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return [item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
    raise LookupError(f"no class {class_name}")


def test_the_transport_seam_has_at_most_five_methods() -> None:
    methods = methods_of(SEAM.read_text(), "Transport")
    assert len(methods) <= MOST_METHODS, methods
    assert methods == ["receive", "hold_reading", "send", "write", "close"]


def test_the_count_sees_every_method() -> None:
    """The count above is not blind: a sixth method, sync or async, a property among them, is counted."""
    source = ("class Transport:\n    async def receive(self): ...\n    def hold_reading(self): ...\n"
              "    async def send(self): ...\n    def write(self): ...\n    async def close(self): ...\n"
              "    @property\n    def more_buffered(self): ...\n")
    assert len(methods_of(source, "Transport")) == MOST_METHODS + 1


def transports() -> list[type]:
    found: list[type] = [WebsocketsTransport, InMemoryTransport, PeerTransport]
    try:
        from relay.transports.picows_connection import PicowsTransport
    except ImportError:   # picows is the `fast` extra's
        return found
    return [*found, PicowsTransport]


@pytest.mark.parametrize("implementation", transports(), ids=lambda kind: kind.__name__)
def test_every_transport_implements_the_seam_with_its_parameters(implementation: type) -> None:
    for name in methods_of(SEAM.read_text(), "Transport"):
        declared = inspect.signature(getattr(seam.Transport, name))
        implemented = inspect.signature(getattr(implementation, name))
        assert list(implemented.parameters) == list(declared.parameters), name
        assert inspect.iscoroutinefunction(getattr(implementation, name)) == \
            inspect.iscoroutinefunction(getattr(seam.Transport, name)), name


def test_the_harness_s_peer_reads_writes_holds_and_closes_as_the_seam_says() -> None:
    answered: list[str] = []
    peer = PeerTransport(answered.append)
    delivered: list[tuple[str, bool]] = []
    expressed: list[str] = []

    def express(frame: str, more: bool) -> bool:   # takes the audio, leaves the rest to `deliver`
        if frame.startswith("audio"):
            expressed.append(frame)
            return True
        return False

    async def main() -> None:
        ended: list[TransportClosed] = []

        async def read() -> None:
            try:
                await peer.receive(lambda frame, more: delivered.append((frame, more)), express)
            except TransportClosed as closed:
                ended.append(closed)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            await anyio.wait_all_tasks_blocked()   # the reader is reading
            peer.arrive("a")
            peer.arrive("audio 1")
            peer.hold_reading(True)   # held: kept, in order, until reading resumes
            peer.arrive("b")
            peer.arrive("c")
            assert delivered == [("a", False)]
            peer.hold_reading(False)
            queue = FrameQueue(1000)
            queue.put("x", wake=False)
            queue.put("y", wake=False)
            assert peer.write(queue) and not queue.frames and queue.size == 0   # written, all of it
            assert peer.write(queue, "z")   # a lone frame, nothing ahead of it: at once
            queue.put("w", wake=False)
            assert not peer.write(queue, "v")   # frames wait ahead of it: refused, to be queued
            await peer.send(["s"])
            await peer.close(1000, "bye")
        assert [c.code for c in ended] == [1000]
        peer.arrive("after")   # nobody reads any more: dropped
        with pytest.raises(TransportClosed):
            await peer.send(["late"])

    anyio.run(main)
    assert delivered == [("a", False), ("b", False), ("c", False)] and expressed == ["audio 1"]
    assert answered == ["x", "y", "z", "s"]


def test_a_peer_without_the_express_lane_hands_every_frame_to_deliver() -> None:
    peer = PeerTransport(lambda frame: None, express=False)
    delivered: list[str] = []
    peer.read_by(lambda frame, more: delivered.append(frame), lambda frame, more: True)
    peer.arrive("audio 1")
    assert delivered == ["audio 1"]
