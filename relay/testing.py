"""Helpers for users' own tests.

    from relay.testing import replay

    def test_my_tools_still_answer_like_before():
        result = replay("recordings/20260101T000000Z_rs_ab12.jsonl", tools=["my_app/tools.py"])
        assert result.ok, "\\n".join(d.describe() for d in result.divergences)
        assert [c.outcome for c in result.calls] == ["ok", "ok"]

`replay` runs the recorded session against the given tools (decorated functions, ToolSpecs or
`--tools` SPEC strings) and returns the calls (name, arguments, output, status, response ids),
every frame the relay sent, and the divergences from the recording.
"""

from relay.replay import Divergence, ReplayCall, ReplayResult, replay, replay_async

__all__ = ["Divergence", "ReplayCall", "ReplayResult", "replay", "replay_async"]
