"""A sidecar session's recording: the header says it is a sidecar and names the call, and a
replay with the same tool rebuilds the session without a divergence."""

from __future__ import annotations

import json
from pathlib import Path

from relay.mock import MockUpstream
from relay.offline.replay import replay_async
from tests.support.frames import said
from tests.support.relays import accepted_call, sidecar_on
from tests.support.tools import WEATHER_SCRIPT, get_weather


async def test_a_recorded_sidecar_session_replays_without_divergence(tmp_path: Path) -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        call_id, session = await accepted_call(mock)
        async with sidecar_on(mock, call_id, [get_weather], record_dir=tmp_path, record_audio="drop") as (sidecar, _):
            await mock.user_turn(session, "What's the weather in Paris?")
            await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "found" in said(e))
    [path] = tmp_path.glob("*.jsonl")
    header = json.loads(path.read_text().splitlines()[0])
    result = await replay_async(path, [get_weather])
    assert (header["mode"], header["call_id"], header["session_id"]) == ("sidecar", call_id, sidecar.id)
    assert (header["id_prefix"], header["declare_tools"], header["record_audio"]) == (sidecar.id, False, "drop")
    assert result.ok, result.divergences
    assert [(call.name, call.output, call.recorded_output) for call in result.calls] == [
        ("get_weather", "sunny in Paris", "sunny in Paris")]
