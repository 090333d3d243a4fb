"""A history limit (`--history-items`, `EngineConfig.history_limit`) bounds what the engine keeps
of a long session; it never changes what the relay does. A conversation (the demo's; the
example voice tools'; two calls in one turn) is played on the explorer's harness (virtual time, in
process, no sockets) under a schedule that makes the engine forget at a bad moment, once with a
small limit and once with none: the client is sent the same frames, every relay call is answered
once, each handler runs once and every invariant of the explorer holds.

Each schedule broke one of these before its fix (found by playing the explorer's schedules with a
limit of 1 and 2):
- `done_first`: the late `response.output_item.done` of a call answered at its response's end,
  the call already forgotten with its batch's end, ran the tool again and answered it twice;
- `reconnect`: a call learnt back after the reconnect was not hidden (`conversation.item.retrieve`),
  and the items of the response that ended were forgotten before its `response.done` was
  rewritten for the client, which was sent the relay's two calls in it;
- `hangs`: the output of a call that timed out after its item was forgotten went in at the end of
  the conversation, not after its batch, and the model spoke of the calls in another order;
- Gemini's second delivery of a call a barge-in cut short, after its turn was forgotten, ran the
  tool again: a forgotten call is now remembered by its id (`CallLedger.get`);
- three drops on xAI: a relay call whose `conversation.item.added` a drop lost was never placed,
  and forgotten; the model's next item named it, and the client was told that hidden item's id
  as the one before (with no limit: none, as if first in the conversation). Both now name the
  newest item the client saw;
- two drops on xAI: a message the relay learnt back after the second sat, in the relay's order,
  right before an item already forgotten, and was put last; the model's next item followed a
  hidden one, and the client was told it followed that message, not the one it did follow. An
  item learnt back before a forgotten one now goes first (it is older than every item kept).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Callable

import pytest

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.engine.core import EngineConfig
from relay.offline.explore_checks import broken
from relay.offline.explore_quirks import PerturbedSession
from relay.offline.explore_session import Conversation, Perturbation
from relay.recording.format import RELAY_TO_CLIENT, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY
from relay.tools.sources import tool_registry
from tests.test_explore_shapes import two_at_once, voice_tools

_RELAY_IDS = re.compile(r"relay_[ei]\d+")
_USAGE = re.compile(r'"usage":\{.*?\}\}')


def demo(dialect: str) -> Conversation:
    return Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect(dialect)


def played(dialect: str, schedule: tuple[Perturbation, ...], limit: int | None,
           conversation: Conversation | None = None) -> dict[str, Any]:
    options = {} if limit is None else {"config": EngineConfig(history_limit=limit)}
    session = PerturbedSession(conversation or demo(dialect), schedule, **options)
    try:
        session.play()
        broke = broken(session, {})
        # the relay's own ids are counters, and the mock counts tokens over the text they are in:
        # what is compared is what the frames say
        client = [_USAGE.sub("", _RELAY_IDS.sub("relay_id", frame.raw)) for frame in session.frames
                  if frame.direction == RELAY_TO_CLIENT and frame.raw is not None]
        outputs = Counter(json.loads(frame.raw)["item"]["call_id"] for frame in session.frames
                          if frame.direction == RELAY_TO_UPSTREAM and frame.raw is not None
                          and '"function_call_output"' in frame.raw)
        return {"client": client, "outputs": outputs, "starts": dict(session.observed.starts),
                "calls": list(session.observed.calls), "broken": broke}
    finally:
        session.close()


CASES = [
    pytest.param("openai", (Perturbation("done_first", 5),), 1, demo, id="late-item-of-a-forgotten-call"),
    pytest.param("azure", (Perturbation("done_first", 5),), 1, demo, id="late-item-azure"),
    pytest.param("openai", (Perturbation("done_first", 5), Perturbation("reconnect", 1, "announced", step=6)), 1, demo,
                 id="late-items-after-a-reconnect"),
    pytest.param("openai", (Perturbation("reconnect", 1),), 2, demo, id="call-learnt-back-after-a-reconnect"),
    pytest.param("xai", (Perturbation("reconnect", 1),), 2, demo, id="call-learnt-back-xai"),
    pytest.param("openai", (Perturbation("hangs", 5),), 2, demo, id="output-of-a-call-that-timed-out"),
    pytest.param("openai", (Perturbation("hangs", 2),), 1, demo, id="output-of-a-call-that-timed-out-limit-1"),
    pytest.param("gemini", (Perturbation("duplicate", 2),), 1, demo, id="gemini-duplicate"),
    pytest.param("gemini", (Perturbation("barge_in", 1), Perturbation("duplicate", 1)), 1, two_at_once,
                 id="gemini-duplicate-of-a-forgotten-call"),
    pytest.param("xai", (Perturbation("reconnect", 4, "answered", step=1), Perturbation("reconnect", 1, "announced", step=6),
                         Perturbation("reconnect", 3, "answered", step=6)), 1, voice_tools,
                 id="call-never-placed-then-forgotten"),
    pytest.param("xai", (Perturbation("reconnect", 3, "announced", step=1), Perturbation("hangs", 2),
                         Perturbation("reconnect", 4, "follow_up", step=1)), 1, voice_tools,
                 id="item-learnt-back-before-a-forgotten-one"),
]


@pytest.mark.parametrize(("dialect", "schedule", "limit", "build"), CASES)
def test_a_history_limit_never_changes_what_the_relay_does(dialect: str, schedule: tuple[Perturbation, ...],
                                                            limit: int, build: Callable[[str], Conversation]) -> None:
    conversation = build(dialect).with_dialect(dialect)
    unlimited, limited = played(dialect, schedule, None, conversation), played(dialect, schedule, limit, conversation)
    assert limited["calls"], "the conversation made no relay call"
    assert limited["broken"] == unlimited["broken"] == []   # every invariant of the explorer's
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


def test_an_item_after_a_relay_call_a_drop_left_unplaced_follows_the_newest_item_the_client_saw() -> None:
    """The relay saw a call's `response.output_item.added`, and the drop took its
    `conversation.item.added`: the call's item is hidden and was never placed. The model's next
    item names it as the one before; the client is told the newest item it saw instead, with or
    without a history limit (before: none at all, as if first in the conversation, or, once the
    call was forgotten, the hidden item's own id)."""
    schedule = (Perturbation("reconnect", 4, "answered", step=1), Perturbation("reconnect", 1, "announced", step=6),
                Perturbation("reconnect", 3, "answered", step=6))
    for limit in (None, 1):
        session = PerturbedSession(voice_tools("xai").with_dialect("xai"), schedule,
                                   **({} if limit is None else {"config": EngineConfig(history_limit=limit)}))
        try:
            session.play()
            unplaced = {json.loads(frame.raw)["item"]["id"] for frame in session.frames
                        if frame.direction == UPSTREAM_TO_RELAY and frame.raw
                        and '"response.output_item.added"' in frame.raw and '"function_call"' in frame.raw}
            seen: list[str] = []
            for frame in session.frames:
                if frame.direction != RELAY_TO_CLIENT or not frame.raw or '"conversation.item.added"' not in frame.raw:
                    continue
                event = json.loads(frame.raw)
                previous = event.get("previous_item_id")
                assert previous not in unplaced, f"the client was pointed at a relay call's item (frame {frame.line_no})"
                assert previous is not None or not seen, f"an item placed first after {len(seen)} (frame {frame.line_no})"
                seen.append(event["item"]["id"])
        finally:
            session.close()
