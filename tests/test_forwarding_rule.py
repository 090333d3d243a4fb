"""The forwarding rule (relay/session/transport.py `ForwardRule` and `Pipe`): what a reader
forwards without the engine is declared once, and both lanes that carry it out read that
declaration and nothing private. The Python lane is a closure over the rule and the pipe
(relay/session/loop.py `express_lane`); the compiled one (relay/transports/_picows_lane.pyx) is
read here as source, so that the check holds whether or not the extension is built."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from relay.engine import EngineConfig, OpenAIEngine
from relay.recording.format import CLIENT_TO_RELAY
from relay.session.loop import SessionLoop, express_lane
from relay.session.policy import EventBudget
from tests.support.peers import MemoryPeer

LANE = Path(__file__).resolve().parents[1] / "relay" / "transports" / "_picows_lane.pyx"
# receivers whose underscored members the compiled lane may use: its own objects (`self`, and
# `listener`, a FastListener, the module's own class), and picows' WSTransport (`ws`), whose C
# methods `_get_header_size`, `_prepare_header` and `_fast_write` relay/transports/picows.py
# lists among what it touches beyond picows' documented API
OWN = {"self", "listener", "ws"}


def code_of(source: str) -> str:
    """The source without its comments and string literals (docstrings among them): what runs.
    Cython's own syntax (`cdef`, `<char*>`) tokenizes as Python does, near enough for names."""
    kept: list[str] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.COMMENT, tokenize.STRING):
            kept.append(token.string)
    return " ".join(kept)


def test_the_compiled_lane_reads_no_private_attribute_and_never_the_session() -> None:
    code = code_of(LANE.read_text())
    # a module's path (`from relay.dialects._peek cimport ...`: the framing scans) is no attribute
    read = re.sub(r"\bfrom\s+relay(?:\s*\.\s*\w+)+", "", code)
    private = sorted({f"{receiver}.{name}" for receiver, name in re.findall(r"\b(\w+)\s*\.\s*(_\w+)", read)
                      if receiver not in OWN})
    assert private == []
    assert not re.search(r"(?<!\. )\bsession\b", code)   # the pipe and its rule, not the session (a module path aside)
    assert re.search(r"\bpipe\s*\.\s*rule\b", code) and re.search(r"\brule\s*\.\s*cut_off\b", code)


def test_the_check_sees_a_private_read() -> None:
    """The check above is not blind: a private read outside a comment or a string is found."""
    source = 'x = 1  # session._client_cut_off\n"""queue._waiter"""\ny = session._client_cut_off\n'
    code = code_of(source)
    assert re.findall(r"\b(\w+)\s*\.\s*(_\w+)", code) == [("session", "_client_cut_off")]


async def test_a_client_cut_off_is_the_rule_s_and_both_paths_read_it() -> None:
    """Over its budget, the client is cut off on its reader's rule: the lane forwards nothing more
    of it (it leaves the frame to `deliver`, which drops it); the rule is the one its pipe holds."""
    engine = OpenAIEngine([], config=EngineConfig(mode="proxy", strict=True, declare_tools=False))
    upstream, client = MemoryPeer(), MemoryPeer()
    loop = SessionLoop(engine, upstream=upstream, client=client)
    express = express_lane(loop, CLIENT_TO_RELAY, "upstream", engine.forwards_client,
                           EventBudget(1000.0, clock=lambda: 0.0))
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
