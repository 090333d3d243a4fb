"""docs/tools.md: its example tools file (docs/examples/tools/my_tools.py, which the page includes)
loads as `--tools` loads it and does what the page says, through the relay's real engine on a
scripted conversation."""

from __future__ import annotations

from typing import Any

import pytest

from relay.testing import Script, Turn, call
from relay.tools.loading import load_tools
from relay.tools.spec import ToolSpec
from tests.support.paths import REPO
from tests.support.snippets import check_page_includes_its_examples

EXAMPLES = REPO / "docs" / "examples" / "tools"


def test_the_page_includes_the_example() -> None:
    check_page_includes_its_examples(REPO / "docs" / "tools.md", EXAMPLES)


def loaded() -> dict[str, ToolSpec]:
    return {spec.name: spec for spec in load_tools(str(EXAMPLES / "my_tools.py"))}


def test_the_example_tools_load_with_the_schema_their_hints_say() -> None:
    tools = loaded()
    assert sorted(tools) == ["book_table", "get_weather"]
    properties = tools["get_weather"].parameters["properties"]
    assert properties["city"]["description"] == "City name"
    assert properties["unit"]["enum"] == ["celsius", "fahrenheit"]


@pytest.mark.parametrize(("name", "arguments", "answer", "spoken"), [
    # no message: the model answers on its own (the script's second turn)
    ("get_weather", {"city": "Paris"}, {"equals": '{"city":"Paris","temp_c":21}', "error": False}, "Done."),
    # ToolResult(message=...), and on_failure when the handler raises: the relay's follow-up says it
    ("book_table", {"restaurant": "Luigi", "people": 2}, {"contains": "booked", "error": False},
     "Your table is booked."),
    ("book_table", {"restaurant": "Luigi", "people": 20}, {"contains": "groups over 12", "error": True},
     "Sorry, the booking system is down."),
])
def test_each_example_tool_answers_its_call_once_and_is_spoken_about_as_the_page_says(
        name: str, arguments: dict[str, Any], answer: dict[str, Any], spoken: str) -> None:
    turns = [Turn(calls=[call(name, **arguments)])] + ([Turn(say=spoken)] if name == "get_weather" else [])
    with Script(*turns).start(list(loaded().values()), dialect="openai") as session:
        session.user("Please")
        session.advance(2)
    session.expect().next_call(name, arguments=arguments).output(**answer).spoken(spoken).no_more_events()
    session.check_invariants()
