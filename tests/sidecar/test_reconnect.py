"""The sideband's lifecycle: it drops and comes back (outputs decided meanwhile are delivered
once, after reconnecting; a follow-up that reached the upstream before the drop is not sent
again), the call ends (404 on reconnect), reconnecting gives up after the configured attempts,
attaching fails clearly, and `stop()` works at any point.

The backoff's `sleep` is the test's: it records the waits and decides what happens while the
sidecar is disconnected, so nothing here waits on a clock."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any, Sequence

import anyio
import pytest

from relay import attach
from relay.edges.sideband import CallEnded, SidebandLoop, Sidecar, SidecarConfig
from relay.edges.upstream import UpstreamUnavailable
from relay.engine import CallState, EngineConfig, OpenAIEngine
from relay.mock import Faults, MockUpstream, Reply
from relay.session.loop import SessionEnd
from relay.session.transport import TransportClosed
from tests.support.clients import TIMEOUT, http_request
from tests.support.frames import outputs_received, said
from tests.support.peers import MemoryPeer
from tests.support.relays import (
    ACTIVE_RESPONSE,
    SidecarTap,
    accepted_call,
    captured_logs,
    sidecar_on,
)
from tests.support.tools import WEATHER_SCRIPT, Gate, get_weather


def log_messages(logs: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in logs.getvalue().splitlines()]


@pytest.mark.parametrize("handler_finishes", ["while disconnected", "after reconnecting"])
async def test_the_sideband_drops_mid_handler_and_the_output_arrives_once(handler_finishes: str) -> None:
    gate = Gate()
    waits: list[float] = []
    states_while_disconnected: list[tuple[bool, CallState]] = []
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        call_id, session = await accepted_call(mock)

        async def backoff(seconds: float) -> None:
            waits.append(seconds)
            session.faults = Faults()   # the new connection stays up
            assert sidecar.engine is not None
            if handler_finishes == "while disconnected":
                gate.opened.set()
                await gate.finished.wait()   # the runner reported it in the same step
            entry = sidecar.engine.calls[0]
            states_while_disconnected.append((sidecar.engine.upstream_connected, entry.state))

        async with sidecar_on(mock, call_id, [gate.tool], sleep=backoff) as (sidecar, frames):
            await mock.user_turn(session, "What's the weather in Paris?")
            await gate.entered.wait()
            await frames.wait_for("upstream>relay", lambda e: e["type"] == "response.done")
            sideband = session.connections[0]
            session.faults = Faults(drop_after_events=sideband.events_sent + 1)
            await mock.inject(session, {"type": "rate_limits.updated", "event_id": "event_drop", "rate_limits": []})
            await frames.wait_for("upstream>relay", lambda e: e["type"] == "session.created", start=1)
            gate.opened.set()
            answer = await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "found" in said(e))
            assert sidecar.engine is not None
            entry = sidecar.engine.calls[0]
    expected_state = CallState.FINISHED if handler_finishes == "while disconnected" else CallState.RUNNING
    assert states_while_disconnected == [(False, expected_state)], "decided outputs wait for the new socket"
    assert sideband.closed and len(session.connections) == 2
    assert outputs_received(mock) == [(1, entry.call_id)], "delivered once, on the new sideband"
    assert (entry.state, entry.outcome) == (CallState.ANSWERED, "ok")
    assert "sunny in Paris" in said(answer.event)
    assert waits == [0.2] and sidecar.reconnects == 1


async def test_a_follow_up_refused_by_a_response_it_never_saw_start_is_retried_after_its_done() -> None:
    """A response started while the sideband was down: the sidecar's follow-up is refused as
    "already active" although it knows of no active response; it asks again after the next
    response.done, once."""
    gate = Gate()
    unseen: list[Any] = []
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        call_id, session = await accepted_call(mock)

        async def backoff(seconds: float) -> None:
            session.faults = Faults()
            # out of band, so the conversation still ends in the tool's output afterwards
            unseen.append(mock.start_response(session, Reply(say="One moment.", hold=True),
                                              request={"conversation": "none"}))

        async with sidecar_on(mock, call_id, [gate.tool], sleep=backoff) as (sidecar, frames):
            await mock.user_turn(session, "What's the weather in Paris?")
            await gate.entered.wait()
            await frames.wait_for("upstream>relay", lambda e: e["type"] == "response.done")
            session.faults = Faults(drop_after_events=session.connections[0].events_sent + 1)
            await mock.inject(session, {"type": "rate_limits.updated", "event_id": "event_drop", "rate_limits": []})
            await frames.wait_for("upstream>relay", lambda e: e["type"] == "session.created", start=1)
            gate.opened.set()
            refusal = await frames.wait_for("upstream>relay", lambda e: e["error"]["code"] == ACTIVE_RESPONSE)
            assert frames.sent("response.create") and len(session.responses) == 2, "refused: one is active"
            mock.release(session)
            answer = await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "found" in said(e))
    creates = frames.sent("response.create")
    assert [create["event_id"] for create in creates] == [refusal["error"]["event_id"]] * 2, "one retry"
    assert [run.status for run in session.responses][1:] == ["completed", "completed"]
    assert answer.event["response"]["id"] == session.responses[-1].id and unseen[0].id == session.responses[1].id
    assert "sunny in Paris" in said(answer.event)


async def test_a_frame_the_dropped_socket_did_not_take_goes_out_on_the_new_one() -> None:
    class DroppedPeer(MemoryPeer):
        """A socket that has dropped: a send fails the way a transport's does."""

        def __init__(self) -> None:
            super().__init__()
            self.send_failed = anyio.Event()

        async def send(self, frames: Sequence[str | bytes]) -> None:
            self.send_failed.set()
            raise TransportClosed(1006, "connection lost", received=False, initiated_here=False)

    old, new = DroppedPeer(), MemoryPeer()

    async def reopen() -> MemoryPeer:
        return new

    engine = OpenAIEngine([get_weather], config=EngineConfig(mode="sidecar", declare_tools=True, strict=True))
    frames = SidecarTap()
    recorder = SimpleNamespace(record=frames, record_notice=lambda kind, fields: None)
    loop = SidebandLoop(engine, upstream=old, reopen=reopen, context={}, recorder=recorder)
    async with anyio.create_task_group() as group:
        group.start_soon(loop.run)
        await loop.started.wait()
        # the engine declares its tools in answer; the send fails on the dropped socket
        await old.feed(json.dumps({"type": "session.created", "event_id": "event_1",
                                   "session": {"type": "realtime", "tools": []}}))
        await old.send_failed.wait()
        await old.feed(None)   # then the reader sees the close
        update = await new.wait_for(lambda e: e["type"] == "session.update")
        await new.feed(json.dumps({"type": "session.updated", "event_id": "event_2",
                                   "session": {"type": "realtime", "tools": update["session"]["tools"]}}))
        await frames.wait_for("upstream>relay", lambda e: e["type"] == "session.updated")   # read on the new one
        await loop.finish("relay", 1000, "done")
    assert [json.loads(frame)["type"] for frame in new.sent] == ["session.update"]
    assert engine.upstream_connected and loop.end == SessionEnd("relay", 1000, "done")


async def test_a_follow_up_that_reached_the_upstream_before_the_drop_is_not_sent_again() -> None:
    gate = Gate()
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        call_id, session = await accepted_call(mock)

        async def backoff(seconds: float) -> None:
            session.faults = Faults()
            # the follow-up reached the server, and its response ran while the sideband was down
            await mock.wait_for(lambda e: e["type"] == "response.create")
            await mock.wait_response_finished(session.responses[-1])

        async with sidecar_on(mock, call_id, [gate.tool], sleep=backoff) as (sidecar, frames):
            await mock.user_turn(session, "What's the weather in Paris?")
            await gate.entered.wait()
            await frames.wait_for("upstream>relay", lambda e: e["type"] == "response.done")
            # drop after the output's conversation.item.added and .done, before response.created
            session.faults = Faults(drop_after_events=session.connections[0].events_sent + 2)
            gate.opened.set()
            await frames.wait_for("upstream>relay", lambda e: e["type"] == "session.created", start=1)
            # what the engine decided on reconnecting is in `frames` by now
            creates = frames.sent("response.create")
    assert len(creates) == 1, "the model answers the tool's output once"


async def test_a_hung_up_call_ends_the_session_and_cancels_its_handler() -> None:
    gate = Gate()
    waits: list[float] = []

    async def backoff(seconds: float) -> None:
        waits.append(seconds)

    with captured_logs() as logs:
        async with MockUpstream(script=WEATHER_SCRIPT) as mock:
            call_id, session = await accepted_call(mock)
            async with sidecar_on(mock, call_id, [gate.tool], sleep=backoff) as (sidecar, _):
                await mock.user_turn(session, "What's the weather in Paris?")
                await gate.entered.wait()
                response = await http_request("POST", f"{mock.rest_url}/realtime/calls/{call_id}/hangup")
                assert response.status_code == 200
                with anyio.fail_after(TIMEOUT):
                    await sidecar.ended.wait()
                assert sidecar.engine is not None
                entry = sidecar.engine.calls[0]
    assert sidecar.end == SessionEnd("upstream", 1000, "call ended")
    assert waits == [0.2], "one attempt: the 404 says the call is over"
    assert not gate.finished.is_set() and entry.outcome == "abandoned"
    lines = [(line["msg"], line.get("realtime_call_id")) for line in log_messages(logs)
             if line["logger"] == "relay.sidecar"]
    assert ("call ended", call_id) in lines and lines[-1] == ("session end", call_id)
    # Realtime says nothing before a hung-up call's sideband closes: a drop until the 404 says otherwise
    assert ("sideband lost; reconnecting", call_id) in lines
    assert [status for _, status in mock.handshakes] == [None, 404], "the one re-attach, refused"


async def test_reconnecting_gives_up_after_the_configured_attempts() -> None:
    waits: list[float] = []

    async def backoff(seconds: float) -> None:
        waits.append(seconds)

    mock = MockUpstream(script=WEATHER_SCRIPT)
    await mock.start()
    try:
        call_id = mock.create_call()
        async with sidecar_on(mock, call_id, [get_weather], sleep=backoff,
                              reconnect_attempts=3, reconnect_delay=0.5) as (sidecar, _):
            await mock.stop()   # the sideband drops, and nothing answers any more
            with anyio.fail_after(TIMEOUT):
                await sidecar.ended.wait()
    finally:
        await mock.stop()
    assert waits == [0.5, 1.0, 2.0]
    assert sidecar.end == SessionEnd("relay", 1011, "sideband lost")


async def test_attaching_to_an_unknown_call_fails_with_call_ended() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        with pytest.raises(CallEnded) as failure:
            await attach("rtc_nope", tools=[get_weather], upstream=mock.url, dialect="openai")
    assert failure.value.status == 404 and "rtc_nope" in str(failure.value)


async def test_a_refused_key_is_not_retried() -> None:
    waits: list[float] = []

    async def backoff(seconds: float) -> None:
        waits.append(seconds)

    async with MockUpstream(script=WEATHER_SCRIPT, api_key="sk-right") as mock:
        call_id = mock.create_call()
        sidecar = Sidecar(call_id, SidecarConfig(tools=[get_weather], upstream=mock.url, dialect="openai",
                                                 api_key="sk-wrong"), sleep=backoff)
        with pytest.raises(UpstreamUnavailable) as failure:
            await sidecar.run()
    assert failure.value.status == 401 and "sk-wrong" not in str(failure.value)
    assert waits == [] and sidecar.end is not None and sidecar.end.code == 1011


async def test_stop_while_still_trying_to_attach() -> None:
    waiting = anyio.Event()

    async def backoff(seconds: float) -> None:
        waiting.set()
        await anyio.sleep_forever()

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()   # a server that drops every connection: the handshake fails, worth a retry

    async with await asyncio.start_server(hang_up, "127.0.0.1", 0) as dropping:
        port = dropping.sockets[0].getsockname()[1]
        sidecar = Sidecar("rtc_x", SidecarConfig(tools=[get_weather], upstream=f"ws://127.0.0.1:{port}/v1/realtime",
                                                 dialect="openai"), sleep=backoff)
        async with anyio.create_task_group() as group:
            group.start_soon(sidecar.run)
            with anyio.fail_after(TIMEOUT):
                await waiting.wait()
            await sidecar.stop("not needed")
    assert sidecar.end == SessionEnd("relay", 1000, "not needed") and sidecar.loop is None
