"""`@delegate` as a tool author writes it, the registry that keeps it beside the tools, and the
split of an answer into appends within GPT-Live's 500-token limit."""

from __future__ import annotations

import pytest

from relay.engine.appends import APPEND_BYTE_LIMIT, Channel, answer_appends, split_text
from relay.tools import Delegation, ToolDefinitionError, ToolRegistry, ToolResult, delegate, tool
from relay.tools.delegation import Turn


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return city


@delegate(timeout=5, on_failure="I could not do that.")
def answer(delegation: Delegation) -> ToolResult:
    return ToolResult(result=delegation.last_user_text())


def test_the_delegate_is_kept_beside_the_tools_and_never_listed_as_one() -> None:
    registry = ToolRegistry([get_weather, answer])
    assert registry.names == ["get_weather"] and len(registry) == 1 and "answer" not in registry
    assert registry.delegate is not None and registry.get("answer") is registry.delegate
    assert registry.delegate.timeout == 5 and registry.delegate.on_failure == "I could not do that."
    assert [spec.name for spec in registry] == ["get_weather"]
    assert answer(Delegation("d", 0, (Turn("user", "hi"),))).result == "hi", "the function stays callable"


def test_one_delegate_per_registry_and_one_parameter() -> None:
    @delegate
    def other(delegation: Delegation) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match="two delegates"):
        ToolRegistry([answer, other])
    with pytest.raises(ToolDefinitionError, match="exactly one parameter"):
        delegate(lambda a, b: None)
    with pytest.raises(ToolDefinitionError, match="annotate"):
        delegate(lambda delegation: None)


def test_a_delegation_reads_its_transcript() -> None:
    given = Delegation("d", 10, (Turn("user", "Book a table"), Turn("assistant", "For when?"), Turn("user", "Eight.")))
    assert given.last_user_text() == "Eight."
    assert given.text() == "user: Book a table\nassistant: For when?\nuser: Eight."


@pytest.mark.parametrize("text", ["word " * 400, "日本語" * 300, "a" * 1200, "🙂" * 300, "x"])
def test_split_keeps_every_piece_within_the_limit_and_loses_nothing(text: str) -> None:
    pieces = split_text(text)
    assert all(0 < len(piece.encode("utf-8")) <= APPEND_BYTE_LIMIT for piece in pieces)
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")


def test_an_answer_is_facts_then_speech_and_a_failure_is_spoken() -> None:
    assert [a.channel for a in answer_appends("r", is_error=False, message="m", speak=True)] == [
        Channel.THINKING, Channel.COMMENTARY]
    assert [a.channel for a in answer_appends("r", is_error=False, message="m", speak=False)] == [
        Channel.THINKING, Channel.THINKING]
    (failure,) = answer_appends('{"error":"no route"}', is_error=True, message=None, speak=True)
    assert failure.channel is Channel.COMMENTARY and "no route" in failure.content
    (empty,) = answer_appends("", is_error=False, message=None, speak=True)
    assert empty.channel is Channel.THINKING, "an empty result still answers the delegation, once"
