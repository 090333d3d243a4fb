"""Sideband connections by call_id, SIP-like calls, and the fake REST API."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from openai import AsyncOpenAI
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedOK, InvalidStatus

from tests.support.clients import MockFactory, http_request, raw_connect, sdk_connect, sdk_until
from tests.support.frames import types_of, user_text
from tests.support.tools import WEATHER_TOOL


async def test_a_second_connection_joins_by_call_id(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with sdk_connect(mock) as primary:
        session = mock.sessions[0]
        async with raw_connect(mock, f"call_id={session.call_id}") as sidecar:
            await primary.conversation.item.create(item=user_text("from the primary")["item"])
            on_primary = await sdk_until(primary, "conversation.item.done")
            on_sidecar = await sidecar.until("conversation.item.done")
            assert [e.event_id for e in on_primary] == [e["event_id"] for e in on_sidecar]
            error = await sidecar.ask({"type": "response.cancel", "event_id": "side"}, "error")
            await sidecar.send({"type": "response.create"})
            primary_events = await sdk_until(primary, "response.done")
            await sidecar.until("response.done")
    assert error[-1]["error"]["event_id"] == "side"
    assert "error" not in types_of(primary_events), "errors go only to the connection that caused them"
    assert len(mock.sessions) == 1 and len(session.connections) == 2
    assert session.connections[1].query == {"call_id": session.call_id}
    assert [(r.connection, r.event["type"]) for r in mock.received] == [
        (0, "conversation.item.create"),
        (1, "response.cancel"),
        (1, "response.create"),
    ]
    await mock.wait_session_ended(session)
    assert session.ended, "a WebSocket session ends with its last connection"


async def test_the_sdk_can_join_by_call_id(make_mock: MockFactory) -> None:
    mock = await make_mock()
    call_id = mock.create_call()
    client = AsyncOpenAI(api_key="sk-test", websocket_base_url=mock.base_url + "/v1")
    async with client.realtime.connect(call_id=call_id) as connection:
        created = await asyncio.wait_for(connection.recv(), 3)
    session = mock.find_session(call_id)
    assert created.type == "session.created" and created.session.id == session.id
    assert session.is_call and not session.ended, "a call outlives its sockets"


async def test_unknown_call_id_is_rejected_with_404(make_mock: MockFactory) -> None:
    mock = await make_mock()
    with pytest.raises(InvalidStatus) as rejected:
        async with connect(f"{mock.url}?call_id=rtc_nope"):
            pass
    assert rejected.value.response.status_code == 404


async def test_accept_configures_the_call_and_hangup_ends_it(make_mock: MockFactory) -> None:
    mock = await make_mock(api_key="sk-key")
    call_id = mock.create_call()
    rest = AsyncOpenAI(api_key="sk-key", base_url=mock.rest_url, max_retries=0)
    async with raw_connect(mock, f"call_id={call_id}", headers={"Authorization": "Bearer sk-key"}) as sidecar:
        await rest.realtime.calls.accept(
            call_id, type="realtime", instructions="Answer the phone.", tools=[WEATHER_TOOL]
        )
        updated = await sidecar.recv()
        await rest.realtime.calls.hangup(call_id)
        with pytest.raises(ConnectionClosedOK):
            await sidecar.recv()
        assert sidecar.ws.close_code == 1000
    session = mock.find_session(call_id)
    assert updated["type"] == "session.updated" and updated["session"]["instructions"] == "Answer the phone."
    assert session.tools == [WEATHER_TOOL]
    assert session.accepts == [{"type": "realtime", "instructions": "Answer the phone.", "tools": [WEATHER_TOOL]}]
    assert session.ended
    with pytest.raises(InvalidStatus) as rejected:
        async with connect(f"{mock.url}?call_id={call_id}", additional_headers={"Authorization": "Bearer sk-key"}):
            pass
    assert rejected.value.response.status_code == 404
    with pytest.raises(openai.NotFoundError):
        await rest.realtime.calls.hangup(call_id)


async def test_reject_declines_the_call_and_checks_its_status_code(make_mock: MockFactory) -> None:
    mock = await make_mock(api_key="sk-key")
    rest = AsyncOpenAI(api_key="sk-key", base_url=mock.rest_url, max_retries=0)
    busy, declined = mock.create_call(), mock.create_call()
    async with raw_connect(mock, f"call_id={busy}", headers={"Authorization": "Bearer sk-key"}) as sidecar:
        await rest.realtime.calls.reject(busy, status_code=486)
        with pytest.raises(ConnectionClosedOK):
            await sidecar.recv()
    await rest.realtime.calls.reject(declined)   # the provider's default, 603
    with pytest.raises(openai.BadRequestError):
        await rest.realtime.calls.reject(mock.create_call(), status_code=200)
    with pytest.raises(openai.NotFoundError):
        await rest.realtime.calls.reject(busy)
    assert mock.find_session(busy).ended and mock.find_session(declined).ended


async def test_rest_errors(make_mock: MockFactory) -> None:
    mock = await make_mock(api_key="sk-key")
    call_id = mock.create_call()
    auth = {"Authorization": "Bearer sk-key"}
    accept = f"{mock.rest_url}/realtime/calls/{call_id}/accept"
    with pytest.raises(openai.AuthenticationError):
        await AsyncOpenAI(api_key="sk-wrong", base_url=mock.rest_url, max_retries=0).realtime.calls.accept(
            call_id, type="realtime"
        )
    missing = await http_request("POST", f"{mock.rest_url}/realtime/calls/rtc_nope/accept", auth, b"{}")
    not_json = await http_request("POST", accept, auth, b"{oops")
    invalid = await http_request("POST", accept, auth, json.dumps({"instructions": "no type"}).encode())
    wrong_method = await http_request("GET", accept, auth)
    unknown = await http_request("POST", f"{mock.rest_url}/realtime/calls/{call_id}/refer", auth, b"{}")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "call_not_found")
    assert (not_json.status_code, not_json.json()["error"]["code"]) == (400, "invalid_json")
    assert (invalid.status_code, invalid.json()["error"]["param"]) == (400, "session.type")
    assert (wrong_method.status_code, unknown.status_code) == (405, 404)
    assert mock.find_session(call_id).accepts == []


async def test_accept_reaches_every_connection_of_the_call(make_mock: MockFactory) -> None:
    mock = await make_mock()
    call_id = mock.create_call()
    async with raw_connect(mock, f"call_id={call_id}") as first, raw_connect(mock, f"call_id={call_id}") as second:
        response = await http_request(
            "POST",
            f"{mock.rest_url}/realtime/calls/{call_id}/accept",
            {},
            json.dumps({"type": "realtime", "instructions": "hi"}).encode(),
        )
        assert response.status_code == 200 and response.content == b""
        assert [(await c.recv())["type"] for c in (first, second)] == ["session.updated", "session.updated"]


async def test_inject_sends_events_and_raw_frames_to_every_connection(make_mock: MockFactory) -> None:
    mock = await make_mock(validate=False)
    async with raw_connect(mock) as primary:
        session = mock.sessions[0]
        async with raw_connect(mock, f"call_id={session.call_id}") as sidecar:
            await mock.inject(session, [{"type": "response.mystery", "x": 1}, "{broken json", b"\x00binary"])
            for client in (primary, sidecar):
                assert json.loads(await client.ws.recv()) == {"type": "response.mystery", "x": 1}
                assert await client.ws.recv() == "{broken json"
                assert await client.ws.recv() == b"\x00binary"
    assert [r.event for r in mock.sent if r.event["type"] == "response.mystery"] == [
        {"type": "response.mystery", "x": 1}
    ] * 2


async def test_wait_for_is_event_driven_and_filtered(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as first, raw_connect(mock) as second:
        waiting = asyncio.ensure_future(
            mock.wait_for(lambda e: e["item"]["content"][0]["text"] == "two", session=mock.sessions[1])
        )
        await first.send(user_text("two"))
        await first.until("conversation.item.done")
        assert not waiting.done(), "an event of another session does not match"
        await second.send(user_text("two"))
        record = await waiting
        assert (record.session_id, record.connection) == (mock.sessions[1].id, 0)
        earlier = await mock.wait_for(lambda e: e["type"] == "conversation.item.create")
        assert earlier.session_id == mock.sessions[0].id, "events already received count"
        later = await mock.wait_for(lambda e: e["type"] == "conversation.item.create", start=1)
        assert later is record
        sent = await mock.wait_for_sent(lambda e: e["type"] == "conversation.item.done", session=mock.sessions[1])
        assert sent.session_id == mock.sessions[1].id
        with pytest.raises(TimeoutError):
            await mock.wait_for(lambda e: e["type"] == "response.create", timeout=0.05)
