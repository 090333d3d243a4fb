"""Engine behaviour seen from the sidecar, fixed in the engine: kept as regression tests."""

from __future__ import annotations

from relay.mock import Faults, MockUpstream
from tests.support.relays import accepted_call, sidecar_on
from tests.support.tools import WEATHER_SCRIPT, Gate


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
