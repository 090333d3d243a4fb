"""The engine's deadline is always ahead after a tick. The edge's timer waits for
`next_deadline` and calls `tick` once it passes; a deadline that a tick left in the past would
have it call `tick` again at once, in a loop that never yields, and every session of the process
would freeze. Two states once did that: a closed engine with a client's create still waiting for
its response, and a sidecar whose upstream was away while a create waited for its acknowledgement.
"""

from __future__ import annotations

import json

from relay.engine import EngineConfig
from tests.support.engine import EngineDriver
from tests.support.local_mock import model_call
from tests.support.tools import get_weather, get_weather_data


def deadline_ahead(h: EngineDriver) -> bool:
    deadline = h.engine.next_deadline()
    return deadline is None or deadline > h.now


def test_a_closed_engine_has_no_deadline_though_a_client_create_still_waited() -> None:
    h = EngineDriver([get_weather], config=EngineConfig(mode="proxy", strict=True), deliver=False)
    h.connect()
    h.client({"type": "response.create", "event_id": "c1"})   # its response never comes
    assert h.engine.next_deadline() is not None
    h.engine.close(h.now)
    assert h.engine.next_deadline() is None
    h.advance(60)
    assert h.engine.next_deadline() is None


def test_while_the_upstream_is_away_the_waits_for_it_are_not_due() -> None:
    h = EngineDriver([get_weather], config=EngineConfig(mode="proxy", strict=True), deliver=False)
    h.connect()
    h.client({"type": "response.create", "event_id": "c1"})
    h.disconnect()
    h.advance(30)   # past the time the relay gives a client's create
    assert deadline_ahead(h)
    h.reconnect()   # looked at again, and done with: nothing is due any more
    h.advance(0.001)
    assert deadline_ahead(h)


def test_a_create_in_flight_while_the_upstream_is_away_is_neither_due_nor_sent_again() -> None:
    h = EngineDriver([get_weather_data], config=EngineConfig(mode="sidecar", declare_tools=False, strict=True))
    h.connect()
    h.upstream(h.mock.user_turn("what's the weather?"))
    h.respond([model_call("get_weather", json.dumps({"city": "Paris"}))])
    h.deliver = False
    h.run_all()
    [create] = h.creates
    output_frame, _create_frame = h.undelivered
    h.undelivered.clear()
    h.deliver = True
    h.upstream(h.mock.receive(output_frame))   # the output landed; the create's fate is unknown
    h.disconnect()
    for _ in range(4):
        h.advance(10)   # past every acknowledgement timeout, while away
        assert deadline_ahead(h)
    h.reconnect()
    h.advance(30)
    assert h.creates == [create], "the edge resends what its old socket never took; the engine does not"
    assert deadline_ahead(h)
