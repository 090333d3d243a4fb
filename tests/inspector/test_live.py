"""The live inspector without a browser: `relay serve --inspector` against the mock on 127.0.0.1,
a page's feed opened as the page opens it (tests/support/clients.py `inspector_feed`).

Off by default; the list and the feed need the relay's token and a page of the relay's own
origin; nobody watching, the session loop records through the edge's own recorder (nothing else
runs per frame); a recorded session is seen from its start and its frames are the recording's,
one without a recording from the moment it is opened; the provider key is in nothing the
inspector shows; live and recent sessions are listed; when the last watcher leaves the session
goes back to its own recorder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from relay.inspector import build_model
from relay.mock import MockUpstream
from relay.observe.metrics import TrafficTap
from relay.recording.reader import read_recording
from tests.support.clients import http_get, inspector_feed, realtime_client
from tests.support.frames import user_text
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.relays import captured_logs, relay_for, weather_turn
from tests.support.tools import WEATHER_SCRIPT, get_weather

BEARER = {"Authorization": f"Bearer {RELAY_TOKEN}"}


def inspected(mock: MockUpstream, **options: Any) -> Any:
    return relay_for(mock, tools=[get_weather], inspector=True, **options)


async def test_the_inspector_is_off_by_default() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, tools=[get_weather]) as server:
        for path in ("/inspector", "/inspector/sessions"):
            status, _, _ = await http_get(server.port, path, BEARER)
            assert status == 404, path
        assert server.live is None


async def test_the_list_and_the_feed_need_the_relay_token_and_the_page_does_not_hold_data() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, inspected(mock) as server:
        status, headers, body = await http_get(server.port, "/inspector")
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert "connect-src 'self'" in body.decode() and "live-config" in body.decode()
        for given in ({}, {"Authorization": "Bearer wrong"}):
            status, headers, body = await http_get(server.port, "/inspector/sessions", given)
            assert status == 401 and "relay token" in json.loads(body)["error"]["message"]
            assert headers["www-authenticate"] == 'Bearer realm="relay"'
        status, _, body = await http_get(server.port, "/inspector/sessions", BEARER)
        assert status == 200 and json.loads(body) == {"live": [], "recent": []}
        for token in (None, "wrong"):
            with pytest.raises(InvalidStatus) as refused:
                async with inspector_feed(server, token=token):
                    pass
            assert refused.value.response.status_code == 401
        async with inspector_feed(server) as feed:
            assert feed.ws.subprotocol == "relay-inspector"
            assert feed.sessions == {"live": [], "recent": []}


async def test_a_page_of_another_origin_is_refused_even_with_the_token() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, inspected(mock) as server:
        with pytest.raises(InvalidStatus) as refused:
            async with inspector_feed(server, origin="http://elsewhere.example"):  # type: ignore[arg-type]
                pass
        assert refused.value.response.status_code == 403
        status, _, _ = await http_get(server.port, "/inspector/sessions", {**BEARER, "Origin": "http://elsewhere.example"})
        assert status == 403
        async with inspector_feed(server, origin=f"http://127.0.0.1:{server.port}"):  # type: ignore[arg-type]
            pass


async def test_nobody_watching_the_loop_records_through_the_edges_own_recorder_and_after_the_last_watcher_again(
        ) -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, inspected(mock) as server:
        async with realtime_client(server) as client:
            await weather_turn(client)
            [proxy] = server.sessions.values()
            assert server.live is not None
            live = server.live.live[proxy.id]
            assert proxy.loop is not None and proxy.loop.recorder is live.tap

            def recorded_by_the_edge() -> bool:
                assert live.tap is not None
                return [type(member) for member in live.tap.taps.members] == [TrafficTap]

            assert recorded_by_the_edge() and live.model is None
            async with inspector_feed(server) as first, inspector_feed(server) as second:
                await first.watch(proxy.id)
                await second.watch(proxy.id)
                assert not recorded_by_the_edge() and live.model is not None and len(live.watchers) == 2
                await first.send({"type": "unwatch"})
                await weather_turn(client)
                await second.until(lambda feed: len(feed.calls()) == 1)   # the one after it opened
                assert len(live.watchers) == 1
            await weather_turn(client)
            assert recorded_by_the_edge() and live.model is None and not live.watchers


async def test_a_recorded_session_is_seen_from_its_start_and_its_frames_are_the_recordings(tmp_path: Path) -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, \
            inspected(mock, record_dir=tmp_path) as server:
        async with inspector_feed(server) as feed:
            async with realtime_client(server) as client:
                await weather_turn(client, says="sunny in Paris")   # before anyone watches
                [session_id] = server.sessions
                await feed.until(lambda f: [s["id"] for s in f.sessions["live"]] == [session_id])
                snapshot = await feed.watch(session_id)
                assert snapshot["type"] == "snapshot" and "since" not in snapshot["model"].get("live", {})
                [first] = feed.calls().values()
                assert (first["name"], first["output"], first["outcome"]) == ("get_weather", "sunny in Paris", "ok")
                await weather_turn(client)                           # while it watches
                await feed.until(lambda f: len(f.calls()) == 2 and all(c["output"] for c in f.calls().values()))
            ended = await feed.wait_for(lambda m: m["type"] == "delta" and "ended" in m)
            assert ended["ended"]["live"] is False
    [path] = tmp_path.glob("*.jsonl")
    recorded = build_model(read_recording(path)).snapshot()
    assert [frame[1:] for frame in feed.model_frames] == [frame[1:] for frame in recorded["frames"]]
    assert sorted(c["call_id"] for c in feed.calls().values()) == sorted(
        e["call_id"] for e in recorded["events"] if e["kind"] == "call")


async def test_without_a_recording_a_session_is_seen_from_the_moment_it_is_opened() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, inspected(mock) as server:
        async with realtime_client(server) as client, inspector_feed(server) as feed:
            await weather_turn(client)
            [session_id] = server.sessions
            snapshot = await feed.watch(session_id)
            assert snapshot["model"]["live"]["since"] > 0 and feed.calls() == {}
            await weather_turn(client)
            await feed.until(lambda f: [c["outcome"] for c in f.calls().values()] == ["ok"])


async def test_a_key_echoed_by_the_upstream_is_not_in_the_page_the_list_or_the_feed(tmp_path: Path) -> None:
    echo = {"type": "x.echo", "note": f"the key is {PROVIDER_KEY}"}
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, \
            inspected(mock, record_dir=tmp_path) as recorded_server, inspected(mock) as live_server:
        for server in (recorded_server, live_server):
            async with realtime_client(server) as client, inspector_feed(server) as feed:
                await weather_turn(client)
                [session_id] = server.sessions
                mock_session = mock.sessions[-1]
                await mock.inject(mock_session, echo)                # before watching (from the recording)
                await client.wait_type("x.echo")
                await feed.watch(session_id)
                await mock.inject(mock_session, echo)                # while watching (from the tap)
                await client.wait_type("x.echo")
                await feed.until(lambda f: sum("x.echo" in frame[2] for frame in f.model_frames
                                               if frame[1] == "upstream>relay") == (2 if server is recorded_server else 1))
                seen = [*feed.frames, (await http_get(server.port, "/inspector", BEARER))[2].decode(),
                        (await http_get(server.port, "/inspector/sessions", BEARER))[2].decode()]
            assert not any(PROVIDER_KEY in text for text in seen)
            assert any("[redacted]" in text for text in seen)


async def test_the_list_shows_live_and_recent_sessions_and_an_ended_one_opens_from_what_was_kept(
        tmp_path: Path) -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, \
            inspected(mock, record_dir=tmp_path) as recorded_server, inspected(mock) as unrecorded_server:
        for server in (recorded_server, unrecorded_server):
            async with inspector_feed(server) as feed:
                async with realtime_client(server) as first:
                    await weather_turn(first)
                    [first_id] = server.sessions
                async with realtime_client(server) as second:
                    await second.wait_type("session.updated")
                    [second_id] = server.sessions
                    await feed.until(lambda f: [s["id"] for s in f.sessions["live"]] == [second_id]
                                     and [s["id"] for s in f.sessions["recent"]] == [first_id])
                    [recent] = feed.sessions["recent"]
                    assert recent["live"] is False and recent["end_reason"] is not None
                    assert recent["recorded"] is (server is recorded_server)
                    opened = await feed.watch(first_id)
                    if server is recorded_server:
                        assert opened["type"] == "snapshot" and [c["output"] for c in feed.calls().values()] == [
                            "sunny in Paris"]
                    else:
                        assert opened["type"] == "unavailable" and "not recorded" in opened["message"]


@pytest.mark.parametrize("ended", [False, True], ids=["live", "ended"])
async def test_a_recording_replaced_by_a_link_out_of_its_directory_is_refused_without_the_servers_path(
        tmp_path: Path, ended: bool) -> None:
    """Someone who can write in the recordings directory swaps a recording for a link to
    /etc/passwd: the inspector does not read it; the page is told why in words, without the
    server's path or a traceback; the feed goes on."""
    outside = tmp_path / "outside"
    outside.write_text('{"type": "session.created", "secret": "not for the page"}\n')
    records = tmp_path / "recordings"
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, \
            inspected(mock, record_dir=records) as server:
        with captured_logs() as logs:
            async with inspector_feed(server) as feed:
                async with realtime_client(server) as client:
                    await weather_turn(client)
                    [session_id] = server.sessions
                    [path] = records.glob("*.jsonl")
                    path.unlink()
                    path.symlink_to(outside)
                    if not ended:
                        refused = await feed.watch(session_id)
                if ended:
                    await feed.until(lambda f: [s["id"] for s in f.sessions["recent"]] == [session_id])
                    refused = await feed.watch(session_id)
                assert refused["type"] == "error"
                assert refused["message"] == ("cannot open this session: its recording is a link out of the "
                                              "recordings directory")
                await feed.send({"type": "unwatch"})
    assert str(tmp_path) not in json.dumps(feed.messages)
    assert "not for the page" not in json.dumps(feed.messages)
    assert "Traceback" not in logs.getvalue()


async def test_a_lone_surrogate_a_session_carries_reaches_the_feed_and_the_feed_goes_on() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, inspected(mock) as server:
        async with realtime_client(server) as client, inspector_feed(server) as feed:
            await client.wait_type("session.created")
            [session_id] = server.sessions
            await feed.watch(session_id)
            await client.send(user_text("odd \ud800 text"))
            await client.wait_type("conversation.item.added")
            await feed.until(lambda f: any("odd \ud800 text" in frame[2] for frame in f.model_frames))
            await weather_turn(client)   # the feed goes on
            await feed.until(lambda f: [c["outcome"] for c in f.calls().values()] == ["ok"])
