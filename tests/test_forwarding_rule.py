"""The forwarding pipe (relay/session/pipe.py `ForwardRule`, `Pipe`, `express_lane`): what a
reader forwards without the engine is declared once, per reader, as a rule and a pipe the session
builds (`relay.session.loop.forwarding`), and both lanes that carry it out, the Python one and
picows' compiled one (relay/transports/_picows_lane.pyx), read that declaration and nothing of the
session: they are built from a rule and a pipe alone, and run against a session that refuses
every read once it built them. The compiled lane's source is read here too, so that its check
holds whether or not the extension is built. Through a live session on loopback, audio goes by
the pipe: neither the session loop's `deliver` nor the engine sees an audio frame."""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from relay.engine import EngineConfig, OpenAIEngine
from relay.mock import MockScript, MockUpstream, Reply
from relay.recording.format import CLIENT_TO_RELAY, RELAY_TO_CLIENT, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY
from relay.recording.redact import Redactor
from relay.recording.taps import Taps
from relay.session.loop import SessionLoop, forwarding
from relay.session.pipe import ForwardRule, Pipe, express_lane
from relay.session.policy import EventBudget
from relay.session.transport import FrameQueue
from tests.support.clients import TIMEOUT
from tests.support.frames import ListRecorder
from tests.support.keys import RELAY_TOKEN
from tests.support.peers import MemoryPeer, compiled_lane_or_skip
from tests.support.relays import relay_for

ROOT = Path(__file__).resolve().parents[1]
LANE = ROOT / "relay" / "transports" / "_picows_lane.pyx"
PIPE = ROOT / "relay" / "session" / "pipe.py"
# receivers whose underscored members the compiled lane may use: its own objects (`self`, and
# `listener`, a FastListener, the module's own class), and picows' WSTransport (`ws`), whose C
# methods `_get_header_size`, `_prepare_header` and `_fast_write` relay/transports/picows.py
# lists among what it touches beyond picows' documented API
OWN = {"self", "listener", "ws"}
SECRET = "sk-piped-secret"


def code_of(source: str) -> str:
    """The source without its comments and string literals (docstrings among them): what runs.
    Cython's own syntax (`cdef`, `<char*>`) tokenizes as Python does, near enough for names."""
    kept: list[str] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.COMMENT, tokenize.STRING):
            kept.append(token.string)
    return " ".join(kept)


def names_the_session(code: str) -> bool:
    """`session` named in code, a module's path (`relay.session.transport`) aside."""
    return bool(re.search(r"(?<!\. )\bsession\b", code))


def test_the_compiled_lane_reads_no_private_attribute_and_never_the_session() -> None:
    code = code_of(LANE.read_text())
    # a module's path (`from relay.dialects._peek cimport ...`: the framing scans) is no attribute
    read = re.sub(r"\bfrom\s+relay(?:\s*\.\s*\w+)+", "", code)
    private = sorted({f"{receiver}.{name}" for receiver, name in re.findall(r"\b(\w+)\s*\.\s*(_\w+)", read)
                      if receiver not in OWN})
    assert private == []
    assert not names_the_session(code)   # the pipe and its rule, not the session
    assert re.search(r"\bpipe\s*\.\s*rule\b", code) and re.search(r"\brule\s*\.\s*cut_off\b", code)


def test_the_python_lane_s_module_never_names_the_session() -> None:
    code = code_of(PIPE.read_text())
    assert not names_the_session(code) and not re.search(r"\bSessionLoop\b|\bengine\b", code)
    assert re.search(r"\bdef express_lane\s*\(\s*pipe\s*:\s*Pipe\s*\)", code)


def test_the_check_sees_a_private_read_and_the_session() -> None:
    """The checks above are not blind: a private read, or the session, outside a comment or a
    string is found; a module's path is not."""
    source = 'x = 1  # session._client_cut_off\n"""queue._waiter"""\ny = session._client_cut_off\n'
    code = code_of(source)
    assert re.findall(r"\b(\w+)\s*\.\s*(_\w+)", code) == [("session", "_client_cut_off")]
    assert names_the_session(code) and not names_the_session(code_of("from relay.session.transport import X\n"))


def audio_delta(text: str = "AAAA") -> str:
    return json.dumps({"type": "response.output_audio.delta", "response_id": "r1", "delta": text},
                      separators=(",", ":"))


def audio_append(text: str = "AAAA") -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": text}, separators=(",", ":"))


ALONE = """
import json, sys
from relay.dialects import OPENAI
from relay.dialects.peek import pass_through_test
from relay.recording.format import RELAY_TO_CLIENT, UPSTREAM_TO_RELAY
from relay.session.pipe import ForwardRule, Pipe, express_lane
from relay.session.transport import FrameQueue

class Peer:
    def write(self, queue, frame=None, soon=False):
        return frame is None

passes = pass_through_test(OPENAI.upstream_passthrough)
rule = ForwardRule(passes, passes.prefixes, passes.after_type)
queue = FrameQueue(1 << 20)
peer = Peer()
recorded = []
pipe = Pipe(rule, peer, queue, None, lambda *frames: recorded.append(frames), UPSTREAM_TO_RELAY,
            RELAY_TO_CLIENT)
express = express_lane(pipe)
frame = json.dumps({"type": "response.output_audio.delta", "delta": "AAAA"}, separators=(",", ":"))
taken = [express(frame, True), express('{"type":"response.done"}', False)]
queued = list(queue.frames)
compiled = None
if sys.argv[1] == "compiled":
    from relay.transports._picows_lane import FrameLane
    raw = Pipe(rule, peer, queue, None, None, UPSTREAM_TO_RELAY, RELAY_TO_CLIENT)
    compiled = FrameLane(raw).offer_bytes(frame.encode(), False)
loaded = sorted(name for name in ("relay.session.loop", "relay.engine", "relay.session.driver", "anyio")
                if name in sys.modules)
print(json.dumps({"taken": taken, "queued": queued, "recorded": recorded, "compiled": compiled,
                  "queued_after": list(queue.frames), "loaded": loaded}))
"""


@pytest.mark.parametrize("lane", ["python", "compiled"])
def test_a_lane_is_built_from_a_rule_and_a_pipe_alone(lane: str) -> None:
    """In a clean interpreter, with no session loop, no engine and no anyio loaded: a rule (the
    dialect's pass-through test) and a pipe (a peer, a queue, a recorder's call) make a lane that
    forwards audio and leaves the rest to `deliver`; the compiled lane is built from the same."""
    if lane == "compiled":
        compiled_lane_or_skip()
    shown = subprocess.run([sys.executable, "-c", ALONE, lane], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout)
    frame = audio_delta().replace(',"response_id":"r1"', "")
    assert result["taken"] == [True, False] and result["queued"] == [frame]
    assert result["recorded"] == [[UPSTREAM_TO_RELAY, frame, RELAY_TO_CLIENT, frame]]
    assert result["loaded"] == []
    if lane == "compiled":
        assert result["compiled"] == 1 and result["queued_after"] == [frame, frame]


class RefusingSession:
    """A session stand-in: the parts `relay.session.loop.forwarding` builds a pipe from, then,
    once `refuse()` is called, any read of any of its attributes fails the test."""

    def __init__(self, **parts: Any) -> None:
        self.refusing = False
        for name, value in parts.items():
            setattr(self, name, value)

    def refuse(self) -> None:
        self.refusing = True

    def __getattribute__(self, name: str) -> Any:
        if object.__getattribute__(self, "refusing"):
            raise AssertionError(f"a forwarding lane read the session's {name!r}")
        return object.__getattribute__(self, name)


def refusing_session(*, client: bool = True) -> tuple[RefusingSession, OpenAIEngine, ListRecorder]:
    engine = OpenAIEngine([], config=EngineConfig(mode="proxy", strict=True, declare_tools=False))
    recorder = ListRecorder()
    session = RefusingSession(client=MemoryPeer() if client else None, upstream=MemoryPeer(),
                              to_client=FrameQueue(1 << 20), to_upstream=FrameQueue(1 << 20),
                              recorder=Taps(recorder), redactor=Redactor([SECRET]), engine=engine)
    return session, engine, recorder


def test_the_stand_in_refuses_a_lane_that_reads_the_session() -> None:
    """The check below is not blind: a lane that reads the session as it forwards fails."""
    session, engine, _ = refusing_session()

    def reading(frame: str, more: bool) -> bool:
        session.to_client.put(frame)
        return True

    session.refuse()
    with pytest.raises(AssertionError, match="to_client"):
        reading(audio_delta(), False)


@pytest.mark.parametrize("lane", ["python", "compiled"])
def test_both_lanes_forward_with_nothing_of_the_session_after_it_built_their_pipes(lane: str) -> None:
    """The session builds each reader's pipe (`relay.session.loop.forwarding`, over a stand-in),
    then refuses every read: both lanes still forward audio each way, redact it for the client,
    record it, keep to the client's budget and its cut-off, and follow a replaced peer."""
    session, engine, recorder = refusing_session()
    budget = EventBudget(1.5, clock=lambda: 0.0)   # bursts of three, and time stands still
    to_client = forwarding(session, UPSTREAM_TO_RELAY, engine.forwards_upstream)   # type: ignore[arg-type]
    to_upstream = forwarding(session, CLIENT_TO_RELAY, engine.forwards_client,   # type: ignore[arg-type]
                                         budget)
    client_queue, upstream_queue = session.to_client, session.to_upstream
    down, up = to_client.pipe, to_upstream.pipe   # type: ignore[attr-defined]
    session.refuse()
    if lane == "compiled":
        lane_class = compiled_lane_or_skip()
        down_lane, up_lane = lane_class(down), lane_class(up)

        def forward(pipe: Pipe, frame: str, more: bool) -> bool:
            taken = (down_lane if pipe is down else up_lane).offer_bytes(frame.encode(), more)
            if taken == 0:   # the compiled lane hands it to the Python one
                return bool((to_client if pipe is down else to_upstream)(frame, more))
            return bool(taken > 0)
    else:
        def forward(pipe: Pipe, frame: str, more: bool) -> bool:
            return bool((to_client if pipe is down else to_upstream)(frame, more))

    assert forward(down, audio_delta(), True) and forward(down, audio_delta(f"{SECRET}AAAA"), True)
    assert not forward(down, '{"type":"response.done","response":{}}', True)   # the engine's
    assert list(client_queue.frames) == [audio_delta(), audio_delta("[redacted]AAAA")]
    assert forward(up, audio_append(), True) and forward(up, audio_append("BBBB"), True)
    assert not forward(up, '{"type":"session.update","session":{}}', True)
    assert list(upstream_queue.frames) == [audio_append(), audio_append("BBBB")]
    assert recorder.frames == [(UPSTREAM_TO_RELAY, audio_delta()), (RELAY_TO_CLIENT, audio_delta()),
                               (UPSTREAM_TO_RELAY, audio_delta(f"{SECRET}AAAA")),
                               (RELAY_TO_CLIENT, audio_delta("[redacted]AAAA")),
                               (CLIENT_TO_RELAY, audio_append()), (RELAY_TO_UPSTREAM, audio_append()),
                               (CLIENT_TO_RELAY, audio_append("BBBB")), (RELAY_TO_UPSTREAM, audio_append("BBBB"))]
    up.rule.cut_off = True   # what the session's `deliver` sets once the client is over its budget
    assert not forward(up, audio_append("CCCC"), True)
    up.rule.cut_off = False
    assert forward(up, audio_append("DDDD"), True)   # the third of the burst of three
    assert not forward(up, audio_append("EEEE"), True)   # over the budget: `deliver`'s to close
    replacement = MemoryPeer()
    down.peer = replacement   # the sidecar's reconnect replaces a pipe's peer (`replace_upstream`)
    assert forward(down, audio_delta("FFFF"), True) and len(client_queue) == 3


def test_a_sidecar_s_pipe_has_no_peer_and_only_records() -> None:
    session, engine, recorder = refusing_session(client=False)
    express = forwarding(session, UPSTREAM_TO_RELAY, engine.forwards_upstream)   # type: ignore[arg-type]
    session.refuse()
    assert express(audio_delta(), False)
    pipe = express.pipe   # type: ignore[attr-defined]
    assert pipe.peer is None
    assert recorder.frames == [(UPSTREAM_TO_RELAY, audio_delta())] and not pipe.queue.frames


async def test_a_client_cut_off_is_the_rule_s_and_both_paths_read_it() -> None:
    """Over its budget, the client is cut off on its reader's rule: the lane forwards nothing more
    of it (it leaves the frame to `deliver`, which drops it); the rule is the one its pipe holds."""
    engine = OpenAIEngine([], config=EngineConfig(mode="proxy", strict=True, declare_tools=False))
    upstream, client = MemoryPeer(), MemoryPeer()
    loop = SessionLoop(engine, upstream=upstream, client=client)
    express = forwarding(loop, CLIENT_TO_RELAY, engine.forwards_client, EventBudget(1000.0, clock=lambda: 0.0))
    pipe = express.pipe   # type: ignore[attr-defined]
    frame = '{"type":"input_audio_buffer.append","audio":"AAAA"}'
    assert pipe.peer is upstream and pipe.queue is loop.to_upstream and pipe.rule.budget is not None
    assert express(frame, True) and len(loop.to_upstream) == 1
    pipe.rule.cut_off = True
    assert not express(frame, True) and len(loop.to_upstream) == 1
    replacement = MemoryPeer()
    pipe.rule.cut_off = False
    pipe.peer = replacement   # the sidecar's reconnect replaces the pipe's peer (`replace_upstream`)
    assert express(frame, True) and len(loop.to_upstream) == 2


def test_a_rule_built_by_hand_runs_in_the_python_lane() -> None:
    """`express_lane` takes any pipe: a rule of the caller's own (every text frame) and a pipe
    with no recorder."""
    queue = FrameQueue(1 << 10)
    express = express_lane(Pipe(ForwardRule(lambda frame: True, None, 0), MemoryPeer(), queue, None, None, "", ""))
    assert express("anything", True) and list(queue.frames) == ["anything"]


AUDIO_KINDS = ("input_audio_buffer.append", "response.output_audio.delta")


@pytest.mark.parametrize("transport", ["websockets", "picows"])
async def test_audio_through_a_live_session_never_reaches_deliver_nor_the_engine(
        transport: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`relay serve` over loopback, the official SDK as the client, the mock as the model: the
    caller's audio goes up and the model's comes down, and every audio frame went by the pipe:
    the session loop's `deliver` and the engine saw the other frames, none of the audio."""
    if transport == "picows":
        pytest.importorskip("picows")
    delivered: list[str] = []
    engine_saw: list[str] = []

    def kind(frame: str | bytes) -> str:
        return str(json.loads(frame).get("type"))

    def spying(reader: Any) -> Any:
        def wrapped(self: SessionLoop) -> Any:
            deliver, express = reader(self)

            def spied(frame: str | bytes, more: bool) -> None:
                delivered.append(kind(frame))
                deliver(frame, more)
            return spied, express
        return wrapped

    for name in ("_upstream_reader", "_client_reader"):
        monkeypatch.setattr(SessionLoop, name, spying(getattr(SessionLoop, name)))
    for name in ("receive_upstream", "receive_client"):
        real = getattr(OpenAIEngine, name)

        def seen(self: OpenAIEngine, frame: str | bytes, now: float, real: Any = real) -> Any:
            engine_saw.append(kind(frame))
            return real(self, frame, now)
        monkeypatch.setattr(OpenAIEngine, name, seen)

    script = MockScript(default=Reply(say="Hello there."))
    async with MockUpstream(script=script) as mock, relay_for(mock, transport=transport) as server:
        sdk = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1", max_retries=0)
        async with sdk.realtime.connect(model="gpt-realtime") as connection:
            for _ in range(5):
                await connection.input_audio_buffer.append(audio="AAAA" * 1600)   # 100 ms of PCM16 at 24 kHz
            await connection.input_audio_buffer.commit()   # the mock refuses an empty buffer
            seen = [await asyncio.wait_for(connection.recv(), TIMEOUT)]
            while seen[-1].type not in ("input_audio_buffer.committed", "error"):
                seen.append(await asyncio.wait_for(connection.recv(), TIMEOUT))
            await connection.response.create()
            while seen[-1].type != "response.done":
                seen.append(await asyncio.wait_for(connection.recv(), TIMEOUT))
    kinds = [event.type for event in seen]
    assert "input_audio_buffer.committed" in kinds and "response.output_audio.delta" in kinds   # audio went both ways
    assert {"response.create", "response.done"} <= set(delivered)   # `deliver` sees the rest...
    assert {"response.create", "response.done"} <= set(engine_saw)   # ... and so does the engine
    assert not set(AUDIO_KINDS) & set(delivered), delivered
    assert not set(AUDIO_KINDS) & set(engine_saw), engine_saw
