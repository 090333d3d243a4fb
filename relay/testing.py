"""Helpers for users' own tests.

    from relay.testing import replay

    def test_my_tools_still_answer_like_before():
        result = replay("recordings/20260101T000000Z_rs_ab12.jsonl", tools=["my_app/tools.py"])
        assert result.ok, "\\n".join(d.describe() for d in result.divergences)
        assert [c.outcome for c in result.calls] == ["ok", "ok"]

`replay` runs the recorded session against the given tools (decorated functions, ToolSpecs or
`--tools` SPEC strings) and returns the calls (name, arguments, output, status, response ids),
every frame the relay sent, and the divergences from the recording.

Under pytest, the plugin that comes with the package (`relay.offline.pytest_plugin`) does the same without
a loop: `pytest --relay-recordings recordings/ --relay-tools my_app/tools.py` makes each recording
a test item, and the `relay_replay` fixture replays one and fails the test with the report.
"""

from relay.offline.replay import (
    Divergence,
    ReplayCall,
    ReplayResult,
    replay,
    replay_async,
)

__all__ = ["Divergence", "ReplayCall", "ReplayResult", "replay", "replay_async"]
