"""Which backend response is a carried batch's continuation (`relay serve --live-reseed`), as
engine rules on a fake clock. A batch a dropped session left uncontinued is continued in the new
session with one `response.create`; it counts as made once the response that create started
begins, not on any backend `response.created`: a response the caller's own turn started (the
voice model's delegation, announced with its `response_id`), or one another create started, is
not it. A drop before it began continues the batch in the next session, once; after it began,
never again (docs/gpt-live.md)."""

from __future__ import annotations

import json
from typing import Any

from tests.live.driver import (
    LiveDriver,
    MODEL,
    Message,
    backend_response,
    call_item,
    delegation_created,
    envelope,
    started,
    transcript,
)
from tests.live.test_live_engine import get_time, get_weather
from tests.live.test_live_reseed import RESPONSES, follow_ups, reseed


class Logged(LiveDriver):
    """The driver, with every frame both ways in the order it crossed (for "never a create while
    a backend response is open")."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.log: list[tuple[str, Message]] = []

    def upstream(self, *messages: Message | str) -> None:
        for message in messages:
            self.log.append(("down", json.loads(message) if isinstance(message, str) else message))
            super().upstream(message)

    def _act(self, actions: list[Any]) -> None:
        before = len(self.upstream_frames)
        super()._act(actions)
        self.log += [("up", json.loads(frame)) for frame in self.upstream_frames[before:]]


def creates_while_open(driver: Logged) -> list[int]:
    """The relay's creates sent while a backend response of the same session was open (its nested
    `response.created` seen, its end not): a second response at once."""
    open_now: set[str] = set()
    found = []
    for index, (side, event) in enumerate(driver.log):
        if side == "down" and event["type"] == "session.started":
            open_now.clear()   # a new session: the dropped one's responses went with it
        elif side == "down" and event["type"] == "response.event":
            nested = event["event"]
            if nested["type"] == "response.created":
                open_now.add(nested["response"]["id"])
            elif nested["type"] in ("response.completed", "response.failed", "response.incomplete"):
                open_now.discard(nested["response"]["id"])
        elif side == "up" and event["type"] == "response.create" and open_now:
            found.append(index)
    return found


def begun(driver: Logged, delegation_id: str | None, response_id: str, *, echo: str | None = None,
          complete: bool = False) -> None:
    """A backend response begins (`echo`: the `client_event_id` the server names on it)."""
    frame = envelope(delegation_id, {"type": "response.created", "response": backend_response(response_id, "in_progress")})
    if echo is not None:
        frame["client_event_id"] = echo
    driver.upstream(frame)
    if complete:
        driver.complete(delegation_id, response_id)   # type: ignore[arg-type]


def running_at_a_drop(name: str = "get_weather") -> Logged:
    """A Responses session whose one call (c1, of `name`) runs when the connection drops; the new
    session is up."""
    driver = Logged([get_weather, get_time])
    driver.client({"type": "session.start", "session": {"model": MODEL, "delegation": RESPONSES}})
    driver.upstream(started(RESPONSES))
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.batch("item_1", "resp_1", [call_item("c1", name, {"city": "Paris"})])
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_2"))
    return driver


def carried_and_continued() -> Logged:
    """get_weather runs when the connection drops; in the new session its note and that
    session's one `response.create` go up, and that continuation has not begun."""
    driver = running_at_a_drop()
    driver.finish("c1", "sunny in Paris")
    assert [e["type"] for e in driver.sent()[-2:]] == ["session.thinking.append", "response.create"]
    assert follow_ups(driver) == ["c1"]
    return driver


def the_caller_speaks(driver: Logged, n: int = 2) -> None:
    """The caller's new turn: the voice model delegates it, and its backend response begins."""
    driver.upstream(transcript("input", "And the time?", 2600 * n))
    driver.upstream(delegation_created(f"item_{n}", target="responses", response_id=f"resp_{n}"))
    begun(driver, f"item_{n}", f"resp_{n}")


def test_a_response_the_callers_turn_started_is_not_the_carried_continuation() -> None:
    """The caller speaks and its delegation's response begins before the relay's continuation
    did, and the connection drops: the next session continues the batch, once; once that
    continuation began, a third drop does not continue it again. Never two creates in a session,
    never one while a response is open. Before, any `response.created` counted as the
    continuation, and the caller never heard get_weather's result."""
    driver = carried_and_continued()
    the_caller_speaks(driver)
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    assert follow_ups(driver) == ["c1", "c1"], "the batch is continued in the third session"
    assert driver.sent()[-1]["type"] == "response.create"
    begun(driver, None, "resp_c", complete=True)   # the third session's continuation begins
    driver.advance(60)
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_4"))
    driver.advance(60)
    assert follow_ups(driver) == ["c1", "c1"], "continued once it began: never again"
    assert len(driver.sent_of("response.create")) == 2
    assert creates_while_open(driver) == []


def test_a_continuation_that_began_before_the_callers_turn_is_not_made_again() -> None:
    driver = carried_and_continued()
    begun(driver, None, "resp_c")
    the_caller_speaks(driver)
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    driver.advance(60)
    assert follow_ups(driver) == ["c1"] and len(driver.sent_of("response.create")) == 1


def test_the_callers_own_batch_waits_for_the_carried_continuation_and_is_not_it() -> None:
    """The caller's turn makes a call (get_time); the relay answers it, and that batch's create
    waits while the carried create's response is on its way and open (a create then is a second
    response at once: backend_calls.py `_others_under_way`); then it goes, and the response it
    starts (naming get_time's delegation) is that batch's continuation, not the carried one's."""
    driver = carried_and_continued()
    driver.upstream(transcript("input", "And the time?", 5200))
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("c2", "get_time", {"city": "Paris"})])
    driver.finish("c2", "noon")
    assert follow_ups(driver) == ["c1"], "not while the carried create's response is to begin"
    begun(driver, None, "resp_c")
    assert follow_ups(driver) == ["c1"], "not while it is open"
    driver.complete(None, "resp_c")   # type: ignore[arg-type]
    assert follow_ups(driver) == ["c1", "c2"] and creates_while_open(driver) == []
    begun(driver, "item_2", "resp_2b")   # get_time's continuation
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    driver.advance(60)
    assert follow_ups(driver) == ["c1", "c2"], "both continuations began: neither is continued again"


def test_when_the_server_names_the_create_its_response_answers_that_decides() -> None:
    """With `client_event_id` on the envelope (the SDK's `ResponseEvent`: the event id of the
    client command associated with it): a response naming another command is not the carried
    continuation, whatever its delegation; one naming the relay's create is, whatever its
    delegation."""
    driver = carried_and_continued()
    create = driver.sent_of("response.create")[-1]["event_id"]
    begun(driver, None, "resp_x", echo="event_someone_else")
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    assert follow_ups(driver) == ["c1", "c1"]
    create = driver.sent_of("response.create")[-1]["event_id"]
    begun(driver, "item_9", "resp_9", echo=create)
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_4"))
    driver.advance(60)
    assert follow_ups(driver) == ["c1", "c1"]


def test_a_clients_own_create_that_went_up_first_starts_the_first_response() -> None:
    """The client's own `response.create` (typed input) went up in the new session before the
    relay's: the first uncorrelated response begun is the client's (a session's creates start
    their responses in the order they went up), the second the carried continuation."""
    driver = running_at_a_drop()
    driver.client({"type": "response.item.create", "event_id": "client_item",
                   "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}},
                  {"type": "response.create", "event_id": "client_create"})
    driver.finish("c1", "sunny in Paris")
    assert [e["type"] for e in driver.sent()[-2:]] == ["session.thinking.append", "response.create"]
    begun(driver, None, "resp_client", complete=True)
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    assert follow_ups(driver) == ["c1", "c1"], "the client's response was not the continuation"
    begun(driver, None, "resp_c")
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_4"))
    driver.advance(60)
    assert follow_ups(driver) == ["c1", "c1"]


def test_a_delegation_announced_without_its_response_id_is_known_by_its_id() -> None:
    driver = carried_and_continued()
    driver.upstream(transcript("input", "And the time?", 5200))
    driver.upstream(delegation_created("item_2", target="responses"))
    begun(driver, "item_2", "resp_2")
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    assert follow_ups(driver) == ["c1", "c1"]


def test_the_carried_continuation_waits_for_backend_work_under_way() -> None:
    """get_time runs at the drop; in the new session the caller's turn makes a get_weather call
    before get_time finishes. Its create then would meet a batch waiting for an output (a partial
    batch, which the server refuses: its calls never continued, the caller never hearing them):
    it goes up once that batch is continued and its continuation over, never while a response is
    open."""
    driver = running_at_a_drop("get_time")
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("c2", "get_weather", {"city": "Rome"})])
    driver.finish("c1", "noon")
    assert driver.sent()[-1]["type"] == "session.thinking.append" and follow_ups(driver) == []
    driver.finish("c2", "sunny in Rome")
    assert follow_ups(driver) == ["c2"], "get_weather's batch first"
    begun(driver, "item_2", "resp_2b")
    assert follow_ups(driver) == ["c2"], "not while its continuation runs"
    driver.complete("item_2", "resp_2b")
    assert follow_ups(driver) == ["c2", "c1"] and driver.sent()[-1]["type"] == "response.create"
    assert creates_while_open(driver) == []
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 2


def in_progress_only(driver: Logged, delegation_id: str | None, response_id: str) -> None:
    """A backend response that begins with `response.in_progress` and no `response.created`, as
    Azure's continuations may (GPT-LIVE.md 1, inferred), then completes."""
    driver.upstream(envelope(delegation_id, {"type": "response.in_progress",
                                             "response": backend_response(response_id, "in_progress")}))
    driver.complete(delegation_id, response_id)   # type: ignore[arg-type]


def test_a_continuation_that_begins_with_in_progress_alone_is_not_made_again() -> None:
    """The carried batch's continuation begins with `response.in_progress` only: it began, and a
    later drop does not continue the batch a second time."""
    driver = carried_and_continued()
    in_progress_only(driver, None, "resp_c")
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    driver.advance(60)
    assert follow_ups(driver) == ["c1"] and len(driver.sent_of("response.create")) == 1


def test_a_response_created_then_in_progress_begins_once() -> None:
    """The usual order, `response.created` then `response.in_progress`: one beginning. The
    caller's turn's response (both events) is still not taken for the carried continuation."""
    driver = carried_and_continued()
    the_caller_speaks(driver)
    driver.upstream(envelope("item_2", {"type": "response.in_progress",
                                        "response": backend_response("resp_2", "in_progress")}))
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    assert follow_ups(driver) == ["c1", "c1"], "the carried batch is continued in the third session"
    assert creates_while_open(driver) == []
