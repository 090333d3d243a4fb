"""The picows transport's compiled lane (relay/transports/_picows_lane.pyx): the express lane over
the raw payloads of picows' reads. It must take the decisions the Python lane takes: its test of a
frame is the Python test over the same text (a property over generated frames), and a session on
picows forwards, records and counts audio the same with it and without it. The scenarios of the
express lane itself run through both in tests/test_session_forwarding.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.server import ServerConnection

pytest.importorskip("picows")

from relay.dialects import OPENAI   # noqa: E402
from relay.dialects.peek import pass_through_test   # noqa: E402
from relay.recording.format import CLIENT_TO_RELAY, RELAY_TO_CLIENT, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY   # noqa: E402
from relay.recording.reader import read_recording   # noqa: E402
from relay.session.pipe import ForwardRule, Pipe   # noqa: E402
from relay.session.transport import FrameQueue   # noqa: E402
from relay.transports import picows_connection   # noqa: E402
from tests.support.clients import TIMEOUT, realtime_client   # noqa: E402
from tests.support.frames import session_created   # noqa: E402
from tests.support.peers import compiled_lane_or_skip   # noqa: E402
from tests.support.relays import bare_upstream, relay_for   # noqa: E402

KINDS = {"upstream": OPENAI.upstream_passthrough, "client": OPENAI.client_passthrough}


def lane_testing(kinds: frozenset[str]) -> tuple[object, object]:
    """The compiled lane over `kinds` (no session behind it: only its test is asked) and the
    Python test it stands for."""
    passes = pass_through_test(kinds)
    rule = ForwardRule(passes, passes.prefixes, passes.after_type)   # type: ignore[attr-defined]
    pipe = Pipe(rule, peer=None, queue=FrameQueue(1 << 20), counts=None, record=None, received="", sent_as="")
    return compiled_lane_or_skip()(pipe), passes


# pieces of frames: the prefixes the tests look for, the characters they look at, and others
PIECES = st.sampled_from(['{"type":"', '{"type": "', "response.output_audio.delta", "input_audio_buffer.append",
                          "response.audio.delta", "response.done", '"', '"type"', '"type":"x"', "\\", "\\\"", ",",
                          ":", "}", "{", " ", "AAAA", "é", "\u20ac", '"delta":"', '"audio":"', "t", "type", "[", "]", "0", "-1",
                          "1.", "e5", "true", "nul", "\x01", "garbage", '"}'])


@settings(max_examples=400, deadline=None)
@given(side=st.sampled_from(sorted(KINDS)), head=st.sampled_from(["", '{"type":"response.output_audio.delta"',
                                                                  '{"type":"input_audio_buffer.append"']),
       pieces=st.lists(PIECES, max_size=14))
def test_the_compiled_test_of_a_frame_is_the_python_one_over_its_bytes(side: str, head: str,
                                                                       pieces: list[str]) -> None:
    """Over ASCII it says what the Python test says of a compact `type`-first frame; it never
    takes a frame the Python test would not (anything else goes to the Python lane); what they
    take parses as JSON."""
    lane, passes = lane_testing(KINDS[side])
    frame = head + "".join(pieces)
    compiled = lane.passes_bytes(frame.encode())   # type: ignore[attr-defined]
    if frame.isascii() and frame.startswith(passes.prefixes):   # type: ignore[attr-defined]
        assert compiled == passes(frame)   # type: ignore[operator]
    else:
        assert compiled is False
    if compiled:
        json.loads(frame, strict=False)


def test_ci_runs_the_transport_on_its_compiled_lane() -> None:
    """CI's install builds the extension (setup.py): the picows pass runs on it."""
    if not os.environ.get("CI"):
        compiled_lane_or_skip()
    assert picows_connection.COMPILED
    assert picows_connection.PicowsTransport.__mro__[1].__name__ == "FastListener"


def test_relay_compiled_0_runs_every_frame_in_python() -> None:
    """RELAY_COMPILED=0 (or an extension that is missing or built against another picows): the
    transport's base is the Python one, and picows calls `_on_frame` for each frame."""
    probe = ("from relay.transports import picows_connection as p; "
             "print(p.COMPILED, p.PicowsTransport.__mro__[1].__name__, p.PicowsTransport.on_ws_frame is p.PicowsTransport._on_frame)")
    env = dict(os.environ, RELAY_COMPILED="0")
    shown = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert shown.stdout.split() == ["False", "PythonListener", "True"]


def test_an_extension_built_against_another_picows_is_not_used(caplog: pytest.LogCaptureFixture) -> None:
    """It calls picows' C methods by their place in picows' method table, which Cython does not
    check at import: built against another release, it is left out, with a warning that says how
    to rebuild it; built against the installed one, it is used."""
    compiled_lane_or_skip()
    from relay.transports._picows_lane import BUILT_WITH_PICOWS
    assert BUILT_WITH_PICOWS == picows_connection.picows_version
    assert picows_connection.compiled_lane()[0].__name__ == "FastListener"
    with caplog.at_level("WARNING", logger="relay.server"):
        assert picows_connection.compiled_lane(installed_picows="2.3.99") == (picows_connection.PythonListener, None)
    assert [record.getMessage() for record in caplog.records] == [
        f"the picows transport's compiled frame path was built against picows {BUILT_WITH_PICOWS}, and picows "
        "2.3.99 is installed: it runs its Python frame path (reinstall realtime-relay to rebuild it)"]


def compact(event: dict[str, object]) -> str:
    return json.dumps(event, separators=(",", ":"))


def lanes_made(lane: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The picows transport on its compiled lane ("compiled"; the list fills with the lanes it
    builds) or on its Python path ("python")."""
    made: list[Any] = []
    if lane == "compiled":
        real = compiled_lane_or_skip()

        def counting(pipe: Pipe) -> Any:
            made.append(real(pipe))
            return made[-1]
        monkeypatch.setattr(picows_connection, "FrameLane", counting)
    else:
        monkeypatch.setattr(picows_connection, "FrameLane", None)
    return made


@pytest.mark.parametrize("lane", ["compiled", "python"])
async def test_a_session_on_picows_forwards_records_and_counts_audio_the_same_on_either_lane(
        lane: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Audio both ways through `relay serve` on picows, in compact JSON as the providers and
    their SDKs send it, each frame answering the other (so that each is alone in its read and
    goes to the socket at once, as paced audio does), with a recording (a recorder chain whose other member sees every frame):
    every delta reaches the client and every append the upstream, in order and unchanged, each
    recorded as received and as sent; on the compiled lane every one of them went by it."""
    made = lanes_made(lane, monkeypatch)
    chunks = 20
    appends = [compact({"type": "input_audio_buffer.append", "audio": f"{index:04d}" * 80}) for index in range(chunks)]
    deltas = [compact({"type": "response.output_audio.delta", "event_id": f"event_{index}", "response_id": "resp_1",
                       "item_id": "item_1", "output_index": 0, "content_index": 0, "delta": f"{index:04d}" * 120})
              for index in range(chunks)]
    got: list[str] = []

    async def upstream(ws: ServerConnection) -> None:
        await ws.send(session_created())
        async for frame in ws:
            if json.loads(frame)["type"] == "input_audio_buffer.append":   # answered by a delta
                got.append(str(frame))
                await ws.send(deltas[len(got) - 1])
                if len(got) == chunks:
                    await ws.send(compact({"type": "response.done", "event_id": "event_done",
                                           "response": {"id": "resp_1", "status": "completed", "output": []}}))

    async with bare_upstream(upstream) as url, relay_for(url, transport="picows", record_dir=tmp_path) as server:
        async with realtime_client(server) as client:
            await client.wait_for(lambda event: event["type"] == "session.created")
            received = []
            for frame in appends:   # one at a time, as paced audio comes: each frame alone in its read
                await client.ws.send(frame)
                received.append(compact(await client.receive()))
            assert (await client.receive())["type"] == "response.done"
        session = next(iter(server.sessions.values()))
        await asyncio.wait_for(session.wait_closed(), TIMEOUT)
    assert got == appends
    assert received == deltas
    [recording] = list(tmp_path.glob("*.jsonl"))
    audio = [(frame.direction, compact(frame.event)) for frame in read_recording(recording).frames
             if compact(frame.event) in {*appends, *deltas}]
    assert [pair for pair in audio if pair[0] in (CLIENT_TO_RELAY, RELAY_TO_UPSTREAM)] == [
        (direction, frame) for frame in appends for direction in (CLIENT_TO_RELAY, RELAY_TO_UPSTREAM)]
    assert [pair for pair in audio if pair[0] in (UPSTREAM_TO_RELAY, RELAY_TO_CLIENT)] == [
        (direction, frame) for frame in deltas for direction in (UPSTREAM_TO_RELAY, RELAY_TO_CLIENT)]
    if lane == "compiled":
        assert sorted(made_lane.forwarded for made_lane in made) == [chunks, chunks]


def server_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """An unmasked frame (what a server sends), FIN set."""
    size = len(payload)
    if size < 126:
        header = bytes((0x80 | opcode, size))
    else:
        header = bytes((0x80 | opcode, 126)) + size.to_bytes(2, "big")
    return header + payload


def client_frame(payload: bytes, key: bytes, opcode: int = 0x1) -> bytes:
    """A masked frame (what a client sends), FIN set."""
    unmasked = server_frame(payload, opcode)
    header = bytes((unmasked[0], unmasked[1] | 0x80)) + unmasked[2:len(unmasked) - len(payload)]
    return header + key + bytes(byte ^ key[index % 4] for index, byte in enumerate(payload))


@pytest.mark.parametrize("lane", ["compiled", "python"])
async def test_frames_that_come_in_one_read_go_on_whole_and_in_order_even_when_a_ping_ends_the_read(
        lane: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each side writes a burst of audio frames and a ping in one socket write (one read at the
    relay): every frame reaches the other side, in order and unchanged (the client's masked by
    the relay anew toward the upstream, a few of them over 125 bytes, some not a multiple of 8),
    without waiting for more traffic. picows answers the ping itself and never shows it to the
    relay, so the compiled lane ends its burst at the frame before it, not at the end of the read;
    nothing is left in a lane's burst afterwards."""
    made = lanes_made(lane, monkeypatch)
    chunks = 12
    appends = [compact({"type": "input_audio_buffer.append", "audio": "QUJD" * (index * 7 + 3)}) for index in range(chunks)]
    deltas = [compact({"type": "response.output_audio.delta", "event_id": f"event_{index}", "response_id": "resp_1",
                       "item_id": "item_1", "output_index": 0, "content_index": 0, "delta": "REVG" * (index * 9 + 1)})
              for index in range(chunks)]
    got: list[str] = []
    all_appends = asyncio.Event()

    async def upstream(ws: ServerConnection) -> None:
        await ws.send(session_created())
        async for frame in ws:
            if json.loads(frame)["type"] == "input_audio_buffer.append":
                got.append(str(frame))
                if len(got) == chunks:
                    all_appends.set()
            elif json.loads(frame)["type"] == "response.create":
                ws.transport.write(b"".join(server_frame(delta.encode()) for delta in deltas)
                                   + server_frame(b"", opcode=0x9))

    async with bare_upstream(upstream) as url, relay_for(url, transport="picows") as server:
        async with realtime_client(server) as client:
            await client.wait_for(lambda event: event["type"] == "session.created")
            keys = [bytes((index, 0x5A, 0xA5, 255 - index)) for index in range(chunks + 1)]
            client.ws.transport.write(b"".join(client_frame(append.encode(), key) for append, key in zip(appends, keys))
                                      + client_frame(b"", keys[-1], opcode=0x9))
            await asyncio.wait_for(all_appends.wait(), TIMEOUT)
            await client.ws.send(compact({"type": "response.create"}))
            received = [compact(await client.receive()) for _ in deltas]
    assert got == appends
    assert received == deltas
    if lane == "compiled":
        assert sorted(made_lane.forwarded for made_lane in made) == [chunks, chunks]
        assert [made_lane.burst_size for made_lane in made] == [0, 0]
        # one socket write each way, read in one or two reads (the read buffer starts at 2 KB and
        # grows): a few writes of several frames each, not a write per frame
        assert all(1 <= made_lane.bursts_written <= chunks // 3 for made_lane in made), [
            made_lane.bursts_written for made_lane in made]


DEEP = 100_000
APPEND = '{"type":"input_audio_buffer.append"'
DELTA = '{"type":"response.output_audio.delta"'
# (side, frame, whether the fast path forwards it unparsed): every frame it takes parses as JSON
# (leniently: raw control characters inside strings are not looked for)
FAST_PATH_CORPUS = {
    "an append": ("client", APPEND + ',"audio":"AAAA"}', True),
    "an append with an event id": ("client", APPEND + ',"event_id":"e1","audio":"AAAA"}', True),
    "a delta as OpenAI sends it": ("upstream", DELTA + ',"event_id":"event_1","response_id":"resp_1","item_id":'
                                   '"item_1","output_index":0,"content_index":0,"delta":"AAAA"}', True),
    "scalars of every kind": ("upstream", DELTA + ',"a":-1.5e+3,"b":0.25,"c":true,"d":false,"e":null,"f":"",'
                              '"delta":"AAAA"}', True),
    "an empty payload": ("client", APPEND + ',"audio":""}', True),
    "a last value that is no string": ("upstream", DELTA + ',"event_id":"e1","at":1764600000000}', True),
    "a last value that is a literal": ("upstream", DELTA + ',"event_id":"e1","last":true}', True),
    "only the type (its last string is the type's: parsed)": ("upstream", DELTA + '}', False),
    "a bad number last": ("upstream", DELTA + ',"event_id":"e1","at":01}', False),
    "a bad literal last": ("upstream", DELTA + ',"event_id":"e1","last":tru}', False),
    "garbage after a number": ("upstream", DELTA + ',"event_id":"e1","at":1}}', False),
    "a second type before a number": ("upstream", DELTA + ',"type":"x","at":1}', False),
    "garbage after the object": ("client", APPEND + ',"audio":"AAAA"}}}garbage', False),
    "a second object after it": ("client", APPEND + ',"audio":"A"}' + APPEND + ',"audio":"B"}', False),
    "whitespace after it": ("client", APPEND + ',"audio":"AAAA"} ', False),
    "arrays nested 100,000 deep": ("client", APPEND + ',"x":' + "[" * DEEP + "]" * DEEP + ',"audio":"AAAA"}', False),
    "an object in the head": ("upstream", DELTA + ',"x":{"y":1},"delta":"AAAA"}', False),
    "an array as the payload": ("client", APPEND + ',"audio":["AAAA"]}', False),
    "a quote in the payload": ("client", APPEND + ',"audio":"AA"AA"}', False),
    "a backslash in the payload": ("client", APPEND + ',"audio":"AA\\"AA"}', False),
    "a second type": ("client", APPEND + ',"type":"session.update","audio":"AAAA"}', False),
    "type as the payload's key": ("client", APPEND + ',"type":"AAAA"}', False),
    "a missing comma": ("client", APPEND + ',"event_id":"e1""audio":"AAAA"}', False),
    "a key without a value": ("client", APPEND + ',"x","audio":"AAAA"}', False),
    "no member but the type": ("client", APPEND + '"AAAA"}', False),
    "a colon for a comma": ("client", APPEND + ':"audio":"AAAA"}', False),
    "a leading zero": ("upstream", DELTA + ',"output_index":01,"delta":"AAAA"}', False),
    "a bare point": ("upstream", DELTA + ',"output_index":1.,"delta":"AAAA"}', False),
    "a plus sign": ("upstream", DELTA + ',"output_index":+1,"delta":"AAAA"}', False),
    "a bare minus": ("upstream", DELTA + ',"output_index":-,"delta":"AAAA"}', False),
    "an empty exponent": ("upstream", DELTA + ',"output_index":1e,"delta":"AAAA"}', False),
    "a word that is not a literal": ("upstream", DELTA + ',"x":truex,"delta":"AAAA"}', False),
    "a truncated literal": ("upstream", DELTA + ',"x":nul,"delta":"AAAA"}', False),
    # JSON read leniently (strict=False) takes a raw control character in a string
    "a control character in a value": ("client", APPEND + ',"event_id":"e\n1","audio":"AA\x01A"}', True),
    "unterminated": ("client", APPEND + ',"audio":"AAAA', False),
}


@pytest.mark.parametrize("side, frame, forwarded", FAST_PATH_CORPUS.values(), ids=FAST_PATH_CORPUS.keys())
def test_both_lanes_forward_unparsed_only_a_flat_json_object_of_the_type_it_claims(
        side: str, frame: str, forwarded: bool) -> None:
    """The audio fast path's test, in Python and compiled, over the same frames: each takes a
    frame only when it is one flat JSON object (whose last string, when it ends with one, holds no
    quote or backslash)."""
    lane, passes = lane_testing(KINDS[side])
    assert passes(frame) is forwarded   # type: ignore[operator]
    assert lane.passes_bytes(frame.encode()) is forwarded   # type: ignore[attr-defined]
    if forwarded:
        assert json.loads(frame, strict=False)["type"] in KINDS[side]
    spaced = frame.replace('{"type":', '{ "type": ', 1)   # the Python test's other branch
    if passes(spaced):   # type: ignore[operator]
        assert json.loads(spaced, strict=False)["type"] in KINDS[side]
