"""The `Transport` seam (relay/session/transport.py) holds what every transport must do, at most
five methods (receive, hold_reading, send, write, close), and every transport implements the same
five with the same parameters: the websockets and picows transports, and the in-memory one the
tests run the session loop over."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from relay.session import transport as seam
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
    found: list[type] = [WebsocketsTransport, InMemoryTransport]
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
