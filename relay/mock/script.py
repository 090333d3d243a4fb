"""What the mock model says and which tools it calls: scripts, as Python objects or a JSON file.

A script is a list of rules plus three fallbacks, and optionally `turns`. For each response the
mock picks one reply:

1. The response's `instructions` contain `Say exactly: <text>` (how the relay asks for a spoken
   tool message): the mock says that text (up to the end of the instructions, surrounding quotes
   stripped) and nothing else.
2. The next of the script's `turns` not yet used: turns are replies given in order, one per
   response (other than the `Say exactly:` ones), whatever the conversation holds; their `say` is
   filled like `after_outputs`' when the conversation ends in outputs. When they run out, the
   rules below apply. (The test harness, `relay.testing`, scripts its model this way.)
3. The conversation ends in one or more `function_call_output` items (nothing else since them):
   the `after_outputs` reply, whose `say` is a `str.format` template with the fields
   `output` (the last output), `outputs` (all trailing outputs, in order), `joined` (them all,
   separated by "; "), `by_name` (output by
   the called function's name: `{by_name[get_weather]}`) and `user` (the latest user text).
4. The first rule whose `match` is found in the latest user message text (input text parts and
   audio transcripts): a case-insensitive substring, or with `regex: true` a case-insensitive
   `re.search`.
5. The `default` reply.

A reply has `say` (spoken as audio with a transcript, or written as text, per the response's output
modalities), `calls` (function calls made after `say`, which is then a spoken preamble; several
calls give parallel calls in one response), `hold` (the response stops after its first delta and
stays in progress until `MockUpstream.release()` or a cancel: a deterministic way to test what
happens while a response is active) and `hold_before_done` (the response streams all its output,
then stays in progress before its `response.done` until released or cancelled: the window in which
every call is complete but the response is not). A call's `arguments` is an object (sent as JSON)
or a string (sent as is, to test invalid JSON); its `call_id` is drawn at random unless the call
names one, for a test that refers to it.

With `options.strict_tools` (the default) the mock behaves like a model that can only call what it
was given: a scripted call to a function not among the session's (or the response's) tools, or
excluded by `tool_choice`, is dropped; a reply left with nothing to say or call falls back to the
default reply's text. The first such call to a name the session does not have at all (a
misnamed tool, most likely) is a warning in the log, once per name and session.

The JSON file has the same shape as `MockScript`:

    {"rules": [{"match": "weather", "say": "Let me check.",
                "calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}],
     "after_outputs": {"say": "The weather in Paris is {output}"},
     "default": {"say": "Hello!"},
     "transcripts": ["What is the weather in Paris?"],
     "options": {"text_chunk_chars": 16, "argument_deltas": 3, "audio_chunk_bytes": 4800,
                 "audio_chunks": 5, "pace_audio": false, "strict_tools": true,
                 "hold_before_done": false}}

`transcripts` are handed out in order, one per committed user audio turn, as that item's
transcript (`conversation.item.input_audio_transcription.completed`); when they run out, turns have
no transcript.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from relay.dialects.openai import FUNCTION_CALL_OUTPUT, MESSAGE

log = logging.getLogger("relay.mock")

_SAY_EXACTLY = re.compile(r"say exactly:\s*(.*)\Z", re.IGNORECASE | re.DOTALL)
_QUOTES = "\"'\u201c\u201d\u2018\u2019"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCall(_Config):
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    call_id: str | None = Field(None, min_length=1, max_length=64, description="the call's id; random when unset")
    hold_after: bool = Field(False, description="the response waits after this call's item is done, until released "
                                                "(a client answering its call mid-response)")

    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


class McpCall(_Config):
    """A call of the provider's own MCP tool (relay/mock/mcp.py): its `output`, or its `error`
    (a tool execution error); with `approval`, the model asks first."""

    server_label: str
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    output: str | None = None
    error: str | None = None
    approval: bool = False

    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


class Reply(_Config):
    say: str | None = None
    calls: tuple[ToolCall, ...] = ()
    mcp_calls: tuple[McpCall, ...] = Field((), description="the provider's own MCP calls, before `say` "
                                                         "(which may name their outputs as {mcp_output})")
    hold: bool = False
    hold_before_done: bool = False


class Rule(Reply):
    match: str
    regex: bool = False

    @model_validator(mode="after")
    def _compile(self) -> Rule:
        if self.regex:
            try:
                re.compile(self.match)
            except re.error as exc:
                raise ValueError(f"invalid regex {self.match!r}: {exc}") from exc
        return self

    def matches(self, text: str) -> bool:
        if self.regex:
            return re.search(self.match, text, re.IGNORECASE) is not None
        return self.match.lower() in text.lower()


class StreamOptions(_Config):
    """How replies are streamed."""

    text_chunk_chars: int = Field(16, ge=1, description="characters per text/transcript delta")
    argument_deltas: int = Field(3, ge=1, description="function_call_arguments.delta events per call")
    audio_chunk_bytes: int = Field(4800, ge=2, description="bytes of audio per audio delta (4800 = 100 ms PCM16)")
    audio_chunks: int = Field(5, ge=0, description="audio deltas per spoken message")
    pace_audio: bool = Field(False, description="send audio no faster than real time")
    strict_tools: bool = Field(True, description="drop scripted calls to tools the session does not have")
    hold_before_done: bool = Field(False, description="every response waits before its response.done until released")


class Pick(NamedTuple):
    """The reply chosen for a response, and which step of the script chose it: `say_exactly`,
    `turn`, `after_outputs`, `rule` or `default`."""

    reply: Reply
    source: str


class MockScript(_Config):
    rules: tuple[Rule, ...] = ()
    turns: tuple[Reply, ...] = ()
    after_outputs: Reply = Reply(say="Here is what I found: {output}")
    default: Reply = Reply(say="Hello! This is the mock realtime model speaking.")
    transcripts: tuple[str, ...] = ()
    options: StreamOptions = StreamOptions()
    mcp_tools: dict[str, tuple[dict[str, Any], ...]] = Field(
        default_factory=dict, description="the tools each provider-side MCP server label lists (mcp_list_tools)")

    @classmethod
    def load(cls, path: str | Path) -> MockScript:
        """Read a JSON script file; raises ValueError (pydantic.ValidationError) on a bad one."""
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))

    def reply_for(
        self, items: Sequence[Mapping[str, Any]], instructions: str | None, call_names: Mapping[str, str]
    ) -> Reply:
        """The reply for a response over `items` (the conversation, or a response's `input`);
        `call_names` maps call ids to function names for the `by_name` template field. The
        script's `turns` are not used: `pick` tells which one is next."""
        return self.pick(items, instructions, call_names).reply

    def pick(self, items: Sequence[Mapping[str, Any]], instructions: str | None, call_names: Mapping[str, str],
             turn: int | None = None) -> Pick:
        """The reply for a response and where it came from; `turn` is the index of the next
        unused turn (None: turns are not used). A session counts the picks whose source is `turn`."""
        said = _say_exactly(instructions)
        if said is not None:
            return Pick(Reply(say=said), "say_exactly")
        user = latest_user_text(items)
        outputs = _trailing_outputs(items)
        if turn is not None and turn < len(self.turns):
            scripted = self.turns[turn]
            if outputs:
                scripted = scripted.model_copy(update={"say": _fill(scripted.say, outputs, call_names, user)})
            return Pick(scripted, "turn")
        if outputs:
            return Pick(self.after_outputs.model_copy(
                update={"say": _fill(self.after_outputs.say, outputs, call_names, user)}), "after_outputs")
        if user is not None:
            for rule in self.rules:
                if rule.matches(user):
                    return Pick(Reply(say=rule.say, calls=rule.calls, mcp_calls=rule.mcp_calls, hold=rule.hold,
                                      hold_before_done=rule.hold_before_done), "rule")
        return Pick(self.default, "default")


def _say_exactly(instructions: str | None) -> str | None:
    if not instructions:
        return None
    found = _SAY_EXACTLY.search(instructions)
    if found is None:
        return None
    text = found.group(1).strip()
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    return text


def latest_user_text(items: Sequence[Mapping[str, Any]]) -> str | None:
    """Text of the latest user message: its text parts and audio transcripts joined."""
    for item in reversed(items):
        if item.get("type") == MESSAGE and item.get("role") == "user":
            texts = [part.get("text") or part.get("transcript") or "" for part in item.get("content") or []]
            return " ".join(t for t in texts if t)
    return None


def _trailing_outputs(items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    trailing: list[Mapping[str, Any]] = []
    for item in reversed(items):
        if item.get("type") != FUNCTION_CALL_OUTPUT:
            break
        trailing.append(item)
    return trailing[::-1]


def _fill(
    template: str | None, outputs: list[Mapping[str, Any]], call_names: Mapping[str, str], user: str | None
) -> str | None:
    if template is None:
        return None
    texts = [str(o.get("output", "")) for o in outputs]
    by_name = {call_names.get(o.get("call_id", ""), o.get("name", "")): str(o.get("output", "")) for o in outputs}
    try:
        return template.format(output=texts[-1], outputs=texts, joined="; ".join(texts), by_name=by_name,
                               user=user or "")
    except (KeyError, IndexError, ValueError, AttributeError):
        # A template naming a function that was not called: say it unformatted rather than fail.
        return template


def warn_not_offered(warned: set[str], name: str, offered: Collection[str], session_id: str) -> None:
    """A scripted call to `name`, a function the session does not have, is dropped (strict
    tools): say so in the log once per name (`warned` holds the names said), since a misnamed
    tool in a script would otherwise only show as a model that never calls it."""
    if name in warned:
        return
    warned.add(name)
    log.warning("mock: the script calls %r, which is not among the session's tools (%s): the call "
                "is dropped (options.strict_tools)", name, ", ".join(sorted(offered)) or "none",
                extra={"session_id": session_id, "tool": name})
