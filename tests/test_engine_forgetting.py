"""A history limit (`--history-items`, `EngineConfig.history_limit`) bounds what the engine keeps
of a long session; it never changes what the relay does. The demo's conversation is played on the
explorer's harness (virtual time, in process, no sockets) under a schedule that makes the engine
forget at a bad moment, once with a small limit and once with none: the client is sent the same
frames, every relay call is answered once and each handler runs once.

Each schedule broke one of these before its fix (found by playing the explorer's schedules with a
limit of 1 and 2):
- `done_first`: the late `response.output_item.done` of a call answered at its response's end,
  the call already forgotten with its batch's end, ran the tool again and answered it twice;
- `reconnect`: a call learnt back after the reconnect was not hidden (`conversation.item.retrieve`),
  and the items of the response that ended were forgotten before its `response.done` was
  rewritten for the client, which was sent the relay's two calls in it;
- `hangs`: the output of a call that timed out after its item was forgotten went in at the end of
  the conversation, not after its batch, and the model spoke of the calls in another order.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.engine.core import EngineConfig
from relay.offline.explore_quirks import PerturbedSession
from relay.offline.explore_session import Conversation, Perturbation
from relay.recording.format import RELAY_TO_CLIENT, RELAY_TO_UPSTREAM
from relay.tools.sources import tool_registry

_RELAY_IDS = re.compile(r"relay_[ei]\d+")
_USAGE = re.compile(r'"usage":\{.*?\}\}')


def played(dialect: str, schedule: tuple[Perturbation, ...], limit: int | None) -> dict[str, Any]:
    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect(dialect)
    options = {} if limit is None else {"config": EngineConfig(history_limit=limit)}
    session = PerturbedSession(conversation, schedule, **options)
    try:
        session.play()
        # the relay's own ids are counters, and the mock counts tokens over the text they are in:
        # what is compared is what the frames say
        client = [_USAGE.sub("", _RELAY_IDS.sub("relay_id", frame.raw)) for frame in session.frames
                  if frame.direction == RELAY_TO_CLIENT and frame.raw is not None]
        outputs = Counter(json.loads(frame.raw)["item"]["call_id"] for frame in session.frames
                          if frame.direction == RELAY_TO_UPSTREAM and frame.raw is not None
                          and '"function_call_output"' in frame.raw)
        return {"client": client, "outputs": outputs, "starts": dict(session.observed.starts),
                "calls": list(session.observed.calls)}
    finally:
        session.close()


CASES = [
    pytest.param("openai", (Perturbation("done_first", 5),), 1, id="late-item-of-a-forgotten-call"),
    pytest.param("azure", (Perturbation("done_first", 5),), 1, id="late-item-azure"),
    pytest.param("openai", (Perturbation("done_first", 5), Perturbation("reconnect", 1, "announced", step=6)), 1,
                 id="late-items-after-a-reconnect"),
    pytest.param("openai", (Perturbation("reconnect", 1),), 2, id="call-learnt-back-after-a-reconnect"),
    pytest.param("xai", (Perturbation("reconnect", 1),), 2, id="call-learnt-back-xai"),
    pytest.param("openai", (Perturbation("hangs", 5),), 2, id="output-of-a-call-that-timed-out"),
    pytest.param("openai", (Perturbation("hangs", 2),), 1, id="output-of-a-call-that-timed-out-limit-1"),
    pytest.param("gemini", (Perturbation("duplicate", 2),), 1, id="gemini-duplicate"),
]


@pytest.mark.parametrize(("dialect", "schedule", "limit"), CASES)
def test_a_history_limit_never_changes_what_the_relay_does(dialect: str, schedule: tuple[Perturbation, ...],
                                                            limit: int) -> None:
    unlimited, limited = played(dialect, schedule, None), played(dialect, schedule, limit)
    assert limited["calls"], "the conversation made no relay call"
    assert [c for c, n in limited["outputs"].items() if n > 1] == []   # answered once each
    assert [c for c, n in limited["starts"].items() if n > 1] == []    # each handler ran once
    assert limited["outputs"] == unlimited["outputs"]
    first = next((i for i, (a, b) in enumerate(zip(unlimited["client"], limited["client"])) if a != b), None)
    assert first is None, f"the client was sent\n{limited['client'][first][:400]}\ninstead of\n{unlimited['client'][first][:400]}"
    assert len(limited["client"]) == len(unlimited["client"])


def test_the_relay_calls_a_reconnect_left_it_to_learn_back_are_hidden_from_the_client() -> None:
    """The relay's tools' calls never reach the client, whatever the limit: here the two of a
    response whose end came while the relay forgot (limit 2) and one it asked for by its id."""
    limited = played("openai", (Perturbation("reconnect", 1),), 2)
    relay_calls = set(limited["outputs"])
    leaked = [call_id for frame in limited["client"] for call_id in relay_calls if call_id in frame]
    assert len(relay_calls) >= 5 and leaked == []
