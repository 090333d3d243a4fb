"""Bad client input, on real sockets through `RelayServer` to the mock upstream: each kind gets the
documented `error` event or close code, nothing that should not be is forwarded upstream, and a
second session running at the same time completes a tool call."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from websockets.exceptions import ConnectionClosed

from relay.mock import MockUpstream
from relay.session.policy import EventBudget
from tests.support.clients import gemini_client
from tests.support.frames import frame_of_size, user_text
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.relays import LeakGuard, weather_turn
from tests.support.tools import GEMINI_SCRIPT

DEEP = 100_000


# (what the client sends, the `error.code` it gets back)
BAD_FRAMES = {
    "not JSON": ("this is not json", "invalid_json"),
    "truncated JSON": ('{"type": "response.create"', "invalid_json"),
    "a JSON array": ('[{"type": "response.create"}]', "invalid_event"),
    "a JSON string": ('"response.create"', "invalid_event"),
    "no type": ('{"event_id": "e1", "response": {}}', "missing_type"),
    "a numeric type": ('{"type": 7}', "missing_type"),
    "a binary frame": (b'{"type": "response.create"}', "binary_frame_not_supported"),
    "arrays nested 100,000 deep": ("[" * DEEP + "]" * DEEP, "invalid_json"),
    "an event nested 100,000 deep": (
        '{"type": "response.create", "response": {"metadata": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}}",
        "invalid_json"),
    # what the audio fast path would otherwise forward unparsed
    "an audio append with garbage after it": ('{"type":"input_audio_buffer.append","audio":"AAAA"}}}garbage',
                                              "invalid_json"),
    "an audio append nested 100,000 deep": (
        '{"type":"input_audio_buffer.append","x":' + "[" * DEEP + "]" * DEEP + ',"audio":"AAAA"}', "invalid_json"),
}


@pytest.mark.parametrize("frame, code", BAD_FRAMES.values(), ids=BAD_FRAMES.keys())
async def test_a_bad_frame_gets_an_error_event_and_nothing_reaches_the_upstream(
        guard: LeakGuard, mock: MockUpstream, frame: str | bytes, code: str) -> None:
    async with guard.relay(mock) as server, guard.client(server) as bystander, guard.client(server) as client:
        await client.wait_type("session.created")
        await bystander.wait_type("session.created")
        sent_upstream_before = len(mock.received)
        await client.ws.send(frame)
        error = await client.wait_type("error")
        assert error["error"]["code"] == code
        assert error["error"]["type"] == "invalid_request_error"
        assert len(error["error"]["message"]) < 300, "the error repeats the whole frame back"
        await client.send(user_text("still there?"))   # the session goes on
        await client.wait_type("conversation.item.added")
        await weather_turn(bystander)
        assert server.metrics.errors[("relay", code)] == 1
    from_client = [r.event for r in mock.received[sent_upstream_before:] if r.session_id == mock.sessions[1].id]
    assert [e["type"] for e in from_client] == ["conversation.item.create"]


async def test_an_unknown_event_type_is_forwarded_and_the_upstream_answers_it(
        guard: LeakGuard, mock: MockUpstream) -> None:
    """The relay does not know every event a provider will add: it forwards what it does not
    know, and the provider's own error comes back to the client."""
    async with guard.relay(mock) as server, guard.client(server) as client:
        await client.send({"type": "conversation.future_feature", "event_id": "mine"})
        error = await client.wait_type("error")
    assert error["error"]["code"] == "invalid_value" and error["error"]["event_id"] == "mine"
    assert mock.received[-1].event == {"type": "conversation.future_feature", "event_id": "mine"}


async def test_invalid_utf8_in_a_text_frame_closes_that_client_with_1007_only(
        guard: LeakGuard, mock: MockUpstream, capfd: pytest.CaptureFixture[str]) -> None:
    async with guard.relay(mock) as server, guard.client(server) as bystander:
        await bystander.wait_type("session.created")
        async with guard.client(server) as client:
            await client.wait_type("session.created")
            await client.ws.send(b'{"type": "\xff\xfe"}', text=True)
            code, _ = await client.closed()
        assert code == 1007
        await weather_turn(bystander)
        assert len(server.sessions) == 1
    assert "Logging error" not in capfd.readouterr().err   # the relay's DEBUG log survived the frame
    assert len(mock.sessions) == 2 and mock.sessions[1].ended


@pytest.mark.parametrize("over", [0, 1], ids=["at the limit", "one byte over"])
async def test_a_frame_one_byte_over_the_limit_closes_with_1009_and_one_at_it_passes(
        guard: LeakGuard, mock: MockUpstream, over: int) -> None:
    limit = 64 * 1024
    frame = frame_of_size(limit + over)
    async with guard.relay(mock, max_frame_bytes=limit) as server, guard.client(server) as bystander, \
            guard.client(server) as client:
        await client.wait_type("session.created")
        await client.ws.send(frame)
        if over:
            assert (await client.closed())[0] == 1009
        else:
            await mock.wait_for(lambda e: e["type"] == "input_audio_buffer.append")
            await client.send(user_text("still there?"))
            await client.wait_type("conversation.item.added")
        await weather_turn(bystander)
    appends = [r.event for r in mock.received if r.event["type"] == "input_audio_buffer.append"]
    assert len(appends) == (0 if over else 1)
    assert not [r for r in mock.sent if r.event["type"] == "error"], "the upstream refused what was forwarded"


async def test_a_flood_of_events_is_cut_off_with_an_error_and_1008_while_others_go_on(
        guard: LeakGuard, mock: MockUpstream) -> None:
    rate = 200
    async with guard.relay(mock, max_client_events_per_second=rate) as server, \
            guard.client(server) as bystander, guard.client(server) as flooder:
        await flooder.wait_type("session.created")
        await bystander.wait_type("session.created")
        loop = asyncio.get_running_loop()
        started = loop.time()
        append = json.dumps({"type": "input_audio_buffer.append", "audio": "AAAA"})

        async def flood() -> None:
            with contextlib.suppress(ConnectionClosed):   # the relay may close it before the last
                for _ in range(10_000):   # at well over 10,000 events/s: the client only buffers
                    await flooder.ws.send(append)

        async with asyncio.TaskGroup() as running:
            running.create_task(flood())
            # a whole tool call in the other session, during the flood (weather_turn fails the
            # test if its answer does not come)
            running.create_task(weather_turn(bystander))
            error = await flooder.wait_type("error")
            code, reason = await flooder.closed()
        elapsed = loop.time() - started
    assert error["error"]["code"] == "rate_limit_exceeded"
    assert str(rate) in error["error"]["message"]
    assert (code, reason) == (1008, "client sends events too fast")
    forwarded = sum(1 for r in mock.received if r.event["type"] == "input_audio_buffer.append")
    assert forwarded <= 2 * rate + rate * elapsed + 1
    assert server.metrics.errors[("relay", "rate_limit_exceeded")] == 1


def test_the_event_budget_allows_its_rate_for_ever_and_bursts_of_two_seconds() -> None:
    now = [0.0]
    budget = EventBudget(100, clock=lambda: now[0])
    for _ in range(1000):   # a steady stream just under the rate
        now[0] += 0.0101
        assert budget.take()
    assert all(budget.take() for _ in range(199))   # then a burst: two seconds' worth in all
    assert not budget.take()
    now[0] += 0.5
    assert sum(budget.take() for _ in range(100)) == 50


async def test_a_gemini_client_flooding_is_told_why_in_the_close_reason_alone(guard: LeakGuard) -> None:
    """Gemini Live has no error event: a message the client's SDK cannot parse would be worse."""
    async with MockUpstream(script=GEMINI_SCRIPT, dialect="gemini", api_key=PROVIDER_KEY) as mock, \
            guard.relay(mock.url, dialect="gemini", max_client_events_per_second=100) as server, \
            gemini_client(server.base_url, key=RELAY_TOKEN) as client:
        await client.setup()
        audio = json.dumps({"realtimeInput": {"audio": {"data": "AAAA", "mimeType": "audio/pcm;rate=16000"}}})
        with contextlib.suppress(ConnectionClosed):
            for _ in range(2_000):
                await client.ws.send(audio)
        code, reason = await client.closed()
    assert (code, reason) == (1008, "client sends events too fast")
    assert [list(message) for message in client.messages] == [["setupComplete"]]


async def test_a_lone_surrogate_from_the_client_is_text_like_any_other(guard: LeakGuard, mock: MockUpstream) -> None:
    """`"\\ud800"` is valid JSON though no UTF-8 can carry it: what the relay re-encodes goes on as
    the same JSON escape, and the session goes on."""
    async with guard.relay(mock) as server, guard.client(server) as client:
        await client.wait_type("session.created")
        await client.send({"type": "session.update", "session": {"type": "realtime", "instructions": "odd \ud800"}})
        updated = await client.wait_for(lambda e: e["type"] == "session.updated"
                                        and e["session"].get("instructions", "").startswith("odd"))
        await client.send(user_text("a lone \udfff surrogate"))
        added = await client.wait_type("conversation.item.added")
        done = await weather_turn(client)   # the session goes on
    assert updated["session"]["instructions"] == "odd \ud800"
    assert added["item"]["content"][0]["text"] == "a lone \udfff surrogate"
    assert done["response"]["status"] == "completed"
    assert server.metrics.sessions_ended.get("relay", 0) == 0
