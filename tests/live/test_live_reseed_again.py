"""A second drop while a new GPT-Live session opens (before its `session.started`), and a new
connection that cannot be made (`relay serve --live-reseed`), as engine rules on a fake clock: the
steps relay/edges/reseed.py's loop takes. What went up on a connection that dropped before its
session started is lost with it, so the next session is told it again; a failed reconnect ends the
session with every call accounted for (answered, or abandoned and said so), nothing left owed."""

from __future__ import annotations

from relay.engine.calls import CallState
from tests.live.driver import started
from tests.live.test_live_reseed import RESPONSES, dropped_mid_conversation, follow_ups, reseed, texts


def test_a_second_drop_before_the_new_session_started_tells_the_next_one_everything() -> None:
    """get_time runs at the drop; it finishes while the new session opens, and its note goes up on
    that connection, which drops before `session.started`: the next session's `input` tells its
    result, and once that session is up its batch is continued, once."""
    driver = dropped_mid_conversation()
    reseed(driver)
    driver.finish("c2", "noon")
    assert driver.sent()[-1]["type"] == "session.thinking.append", "told on the opening connection"
    assert len(driver.sent_of("response.create")) == 1, "not before the session is up"
    start = reseed(driver)
    assert start is not None
    assert any("get_time" in text and "noon" in text for _, text in texts(start["session"]))
    driver.upstream(started(RESPONSES, session_id="live_3"))
    assert driver.sent()[-1]["type"] == "response.create" and follow_ups(driver) == ["c1", "c2"]
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 2, "c1's in the first session, c2's in the third"


def test_a_second_drop_before_the_new_session_started_with_the_call_still_running() -> None:
    driver = dropped_mid_conversation()
    reseed(driver)
    start = reseed(driver)
    assert start is not None and not any("get_time" in text for _, text in texts(start["session"]))
    driver.upstream(started(RESPONSES, session_id="live_3"))
    driver.finish("c2", "noon")
    assert [e["type"] for e in driver.sent()[-2:]] == ["session.thinking.append", "response.create"]
    assert follow_ups(driver) == ["c1", "c2"]
    assert {entry.call_id: entry.state for entry in driver.engine.calls} == {
        "c1": CallState.ANSWERED, "c2": CallState.ANSWERED}


def test_a_failed_reconnect_ends_the_session_with_nothing_owed() -> None:
    """The loop cannot open a new connection and ends the session (`finish`): the call still
    running is cancelled and recorded abandoned, said in a notice; nothing goes up after."""
    driver = dropped_mid_conversation()
    assert reseed(driver) is not None
    sent = len(driver.upstream_frames)
    driver.close()
    assert [cancel.call_id for cancel in driver.cancelled] == ["c2"]
    assert {entry.call_id: entry.state for entry in driver.engine.calls} == {
        "c1": CallState.ANSWERED, "c2": CallState.ABANDONED}
    abandoned = [n for n in driver.notices if n.kind == "tool_call" and n.fields.get("outcome") == "abandoned"]
    assert [n.fields["call_id"] for n in abandoned] == ["c2"]
    driver.finish("c2", "noon")   # a late report changes nothing
    assert len(driver.upstream_frames) == sent and driver.engine.next_deadline() is None
