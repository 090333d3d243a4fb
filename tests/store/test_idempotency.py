"""Idempotency keys: a handler that declares an `IdempotencyKey` parameter gets its call's key
(hidden from the model's schema), an MCP server gets it in the request's `_meta`, a tool may
declare itself idempotent."""

from __future__ import annotations

import json

import pytest

from relay.engine.records import idempotency_key
from relay.mock import MockUpstream
from relay.testing import Script, Turn, call
from relay.tools import IdempotencyKey, tool
from relay.tools.errors import ToolDefinitionError
from tests.support.clients import realtime_client
from tests.support.keys import PROVIDER_KEY
from tests.support.mcp import calls, outputs_sent, settings, stdio_server, turn
from tests.support.relays import relay_for

KEYS: list[str] = []


@tool(idempotent=True)
def refund(order: int, key: IdempotencyKey) -> str:
    """Refund an order once."""
    KEYS.append(key)
    return f"refunded {order}"


@tool
async def book(room: str, key: IdempotencyKey) -> str:
    KEYS.append(key)
    return f"booked {room}"


def test_the_key_parameter_is_the_relay_s_and_not_the_model_s() -> None:
    spec = refund.__relay_tool__
    assert spec.idempotent and spec.key_parameter == "key"
    assert set(spec.parameters["properties"]) == {"order"} and spec.parameters.get("required") == ["order"]
    assert spec.parse_arguments('{"order": 3, "key": "forged"}') == {"order": 3}
    @tool
    def lookup(city: str) -> str:
        return city

    assert not lookup.__relay_tool__.idempotent and lookup.__relay_tool__.key_parameter is None
    def once(order: int) -> int:
        return order

    with pytest.raises(ToolDefinitionError, match="idempotent must be True or False"):
        tool(idempotent="yes")(once)   # type: ignore[arg-type]


@pytest.mark.parametrize("dialect", ["openai", "gemini"])
@pytest.mark.parametrize("handler", [refund, book])
def test_a_handler_that_asks_gets_its_call_s_key(handler, dialect: str) -> None:
    KEYS.clear()
    arguments = {"order": 7} if handler is refund else {"room": "blue"}
    script = Script(Turn(calls=[call(handler.__relay_tool__.name, **arguments)]), Turn(say="done"))
    with script.start([handler], dialect=dialect) as session:
        session.user("go")
        session.advance(1)
    [started] = [record for record in session.records if record.phase == "started"]
    assert KEYS == [started.idempotency_key]
    assert started.idempotency_key == idempotency_key(started.session_id, started.call_id, json.dumps(arguments))


async def test_an_mcp_server_gets_the_key_in_the_request_meta() -> None:
    async with MockUpstream(script=calls(("key", "meta_key", {})), api_key=PROVIDER_KEY) as mock:
        async with relay_for(mock, mcp=settings(stdio_server())) as server:
            async with realtime_client(server) as client:
                await turn(client, "key please", ":")
    [output] = outputs_sent(mock)
    session_part, call_id, digest = output.split(":")
    assert call_id and len(digest) == 16 and session_part
