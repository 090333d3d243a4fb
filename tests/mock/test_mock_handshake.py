"""Handshake rules: paths, auth forms, query parameters, dialects, and session.created shapes."""

from __future__ import annotations

import asyncio

import pytest
from openai import AsyncOpenAI
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from relay.mock import MockScript, MockUpstream, Reply
from tests.support.clients import MockFactory, raw_connect, sdk_connect
from tests.support.sdk import check_event


async def _status(url: str, **options: object) -> int:
    with pytest.raises(InvalidStatus) as rejected:
        async with connect(url, **options):  # type: ignore[arg-type]
            pass
    return rejected.value.response.status_code


async def test_sdk_connects_and_gets_a_ga_session(make_mock: MockFactory) -> None:
    mock = await make_mock()
    assert mock.url == f"ws://127.0.0.1:{mock.port}/v1/realtime"
    client = AsyncOpenAI(api_key="sk-test", websocket_base_url=mock.base_url + "/v1")
    async with client.realtime.connect(model="gpt-realtime-mini") as connection:
        created = await asyncio.wait_for(connection.recv(), 3)
    assert created.type == "session.created"
    session = mock.sessions[0]
    event = mock.sent[0].event["session"]
    assert event["type"] == "realtime" and event["object"] == "realtime.session"
    assert event["id"] == session.id and event["model"] == "gpt-realtime-mini"
    assert event["tools"] == [] and event["tool_choice"] == "auto" and event["output_modalities"] == ["audio"]
    assert event["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert session.query == {"model": "gpt-realtime-mini"} and session.auth == "bearer"
    assert session.call_id.startswith("rtc_")


async def test_rejects_unknown_paths_and_missing_parameters(make_mock: MockFactory) -> None:
    mock = await make_mock()
    assert await _status(f"{mock.base_url}/v2/realtime?model=m") == 404
    assert await _status(f"{mock.base_url}/v1/realtime") == 400
    assert await _status(f"{mock.base_url}/openai/realtime?deployment=d") == 400
    assert await _status(f"{mock.base_url}/openai/v1/realtime?model=d&api-version=2024-10-01") == 400
    assert mock.sessions == []


@pytest.mark.parametrize(
    ("options", "form"),
    [
        ({"additional_headers": {"Authorization": "Bearer sk-right"}}, "bearer"),
        ({"additional_headers": {"api-key": "sk-right"}}, "api-key"),
        ({"subprotocols": ["realtime", "openai-insecure-api-key.sk-right"]}, "subprotocol"),
    ],
)
async def test_auth_forms_are_accepted_and_recorded(make_mock: MockFactory, options: dict, form: str) -> None:
    mock = await make_mock(api_key="sk-right")
    async with connect(f"{mock.url}?model=gpt-realtime", **options) as ws:  # type: ignore[arg-type]
        await asyncio.wait_for(ws.recv(), 3)
        if form == "subprotocol":
            assert ws.subprotocol == "realtime"
    assert mock.sessions[0].auth == form


async def test_wrong_or_missing_key_is_rejected_with_401(make_mock: MockFactory) -> None:
    mock = await make_mock(api_key="sk-right")
    url = f"{mock.url}?model=gpt-realtime"
    assert await _status(url) == 401
    assert await _status(url, additional_headers={"Authorization": "Bearer sk-wrong"}) == 401
    # The query parameter is an Azure form: plain OpenAI does not accept it.
    assert await _status(f"{url}&api-key=sk-right") == 401
    client = AsyncOpenAI(api_key="sk-wrong", websocket_base_url=mock.base_url + "/v1", max_retries=0)
    with pytest.raises(InvalidStatus):
        async with client.realtime.connect(model="gpt-realtime"):
            pass


async def test_azure_accepts_the_query_key_and_records_deployment(make_mock: MockFactory) -> None:
    mock = await make_mock(dialect="azure", api_key="az-key")
    async with raw_connect(
        mock, "deployment=gpt-4o-rt&api-version=2025-04-01-preview&api-key=az-key", path="/openai/realtime"
    ):
        pass
    session = mock.sessions[0]
    assert session.auth == "api-key-query"
    assert session.query["deployment"] == "gpt-4o-rt" and session.query["api-version"] == "2025-04-01-preview"
    assert session.model == "gpt-4o-rt"
    assert session.wire.beta, "the preview path speaks beta"
    check_event(mock.sent[0].event, beta=True)


async def test_azure_v1_path_is_ga(make_mock: MockFactory) -> None:
    mock = await make_mock(dialect="azure", api_key="az-key")
    async with raw_connect(mock, "model=my-deployment", path="/openai/v1/realtime", headers={"api-key": "az-key"}):
        pass
    assert not mock.sessions[0].wire.beta and mock.sessions[0].auth == "api-key"
    assert mock.sent[0].event["session"]["type"] == "realtime"


async def test_beta_header_and_beta_dialect_give_flat_beta_sessions(make_mock: MockFactory) -> None:
    mock = await make_mock()
    client = AsyncOpenAI(api_key="sk-test", websocket_base_url=mock.base_url + "/v1")
    async with client.beta.realtime.connect(model="gpt-4o-realtime-preview") as connection:
        created = await asyncio.wait_for(connection.recv(), 3)
    assert created.type == "session.created" and created.session.modalities == ["text", "audio"]
    beta_mock = await make_mock(dialect="openai-beta")
    async with raw_connect(beta_mock, skip_created=False) as raw:
        session = (await raw.recv())["session"]
    assert "type" not in session and session["voice"] == "alloy" and session["input_audio_format"] == "pcm16"
    check_event(beta_mock.sent[0].event, beta=True)


async def test_many_sessions_are_served_concurrently_and_independently(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with sdk_connect(mock) as first, sdk_connect(mock) as second:
        await first.session.update(session={"type": "realtime", "instructions": "first"})
        await second.session.update(session={"type": "realtime", "instructions": "second"})
        updates = await asyncio.gather(asyncio.wait_for(first.recv(), 3), asyncio.wait_for(second.recv(), 3))
    assert [u.session.instructions for u in updates] == ["first", "second"]
    assert [s.instructions for s in mock.sessions] == ["first", "second"]
    assert len({s.id for s in mock.sessions}) == 2 and len({s.call_id for s in mock.sessions}) == 2


async def test_unstarted_mock_has_no_url() -> None:
    with pytest.raises(RuntimeError):
        MockUpstream().url
    with pytest.raises(ValueError):
        MockUpstream(dialect="bedrock")  # type: ignore[arg-type]


async def test_stopping_with_open_sockets_and_a_held_response_is_prompt(make_mock: MockFactory) -> None:
    script = MockScript(default=Reply(say="Never finished.", hold=True))
    mock = MockUpstream(script=script)
    async with mock:
        client = await connect(f"{mock.url}?model=gpt-realtime")
        await client.send('{"type": "response.create"}')
        await mock.wait_for_sent(lambda e: e["type"] == "response.output_audio_transcript.delta")
        assert mock.sessions[0].active_response is not None
    await asyncio.wait_for(client.wait_closed(), 3)
    assert client.close_code == 1001 and mock.sessions[0].ended
