"""Engine behaviour seen from the sidecar that should change (the engine is the lead's)."""

from __future__ import annotations

import pytest

from relay.mock import Faults, MockUpstream
from tests.sidecar.helpers import SCRIPT, Gate, accepted_call, sidecar_on


@pytest.mark.xfail(strict=True, reason=(
    "Sequencer.reset_connection() turns the in-flight follow-up into a retry on every reconnect, "
    "so a response.create the upstream already received (and answered, while the sideband was "
    "down) is sent again and the model answers the same output twice. The edge knows which "
    "frames it wrote before the drop; the engine has no way to be told."))
async def test_a_follow_up_that_reached_the_upstream_before_the_drop_is_not_sent_again() -> None:
    gate = Gate()
    async with MockUpstream(script=SCRIPT) as mock:
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
