"""The `session` of a new GPT-Live session that carries on one whose upstream connection dropped
(`relay serve --live-reseed`).

GPT-Live has no resume: a new connection is a new session. What can be carried over is what a
client would carry: the first session's configuration (the `session.start` that went up, the
relay's tools in it) and the conversation so far as the new session's `input`, which is text only,
at most 128 messages and 8,192 tokens, a developer, user or assistant message with one text part
each. GPT-Live's guide asks a client to check for actions that already ran before redoing work: the
relay adds, as developer messages, what its tools already answered, so that the model knows. The
tokens are counted as bytes of UTF-8 (GPT-Live's tokenizers are byte-level BPE: a token stands for
at least one byte, as for appends, relay/engine/appends.py), so the seeded history fits whatever
the text.

What comes in: the first session's own `input` (kept first and whole when it fits, as it came),
then the relay's notes, then the most recent turns of the transcript that still fit (older turns
are dropped first; a turn too long for what is left keeps its end).
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from relay.dialects.jsontext import utf8_size
from relay.tools.delegation import Turn

MAX_INPUT_MESSAGES = 128
MAX_INPUT_TOKENS = 8192
_ROLE_OF = {"user": "user", "assistant": "assistant"}


def message(role: str, text: str) -> dict[str, Any]:
    """One message of a session's `input` (the assistant's as `output_text`)."""
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def _size(item: Any) -> int:
    content = item.get("content") if isinstance(item, dict) else None
    part = content[0] if isinstance(content, list) and content and isinstance(content[0], dict) else {}
    text = part.get("text")
    return utf8_size(text) if isinstance(text, str) else 0


def _tail(text: str, limit: int) -> str:
    """The end of `text` in at most `limit` bytes of UTF-8 (never half a character)."""
    data = text.encode("utf-8", "surrogatepass")[-limit:] if limit > 0 else b""
    return data.decode(errors="ignore").lstrip()


def seeded_session(session: dict[str, Any], turns: Sequence[Turn], notes: Sequence[str], *,
                   max_messages: int = MAX_INPUT_MESSAGES, max_tokens: int = MAX_INPUT_TOKENS) -> dict[str, Any]:
    """`session` (the first session's, as it went up: not changed) with its `input` the first
    session's own, then `notes` (developer messages), then the most recent `turns` that fit."""
    own = [item for item in session.get("input") or [] if isinstance(item, dict)]
    room_messages, room_bytes = max_messages, max_tokens
    kept: list[dict[str, Any]] = []
    for item in own:
        if room_messages and _size(item) <= room_bytes:
            kept.append(copy.deepcopy(item))
            room_messages, room_bytes = room_messages - 1, room_bytes - _size(item)
    noted: list[dict[str, Any]] = []
    for note in reversed(notes):   # the latest first, should room run out
        if room_messages and 0 < utf8_size(note) <= room_bytes:
            noted.insert(0, message("developer", note))
            room_messages, room_bytes = room_messages - 1, room_bytes - utf8_size(note)
    said: list[dict[str, Any]] = []
    for turn in reversed(turns):   # the most recent first
        role = _ROLE_OF.get(turn.speaker)
        if role is None or not turn.text:
            continue
        if not room_messages or room_bytes <= 0:
            break
        text = turn.text if utf8_size(turn.text) <= room_bytes else _tail(turn.text, room_bytes)
        if not text:
            break
        said.insert(0, message(role, text))
        room_messages, room_bytes = room_messages - 1, room_bytes - utf8_size(text)
    return {**session, "input": [*kept, *noted, *said]}


def seeded_note(item: Any) -> str | None:
    """The text of a developer message of a session's `input` (None for any other item)."""
    if not isinstance(item, dict) or item.get("role") != "developer":
        return None
    content = item.get("content")
    part = content[0] if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) else {}
    return part.get("text") if isinstance(part.get("text"), str) else None


def done_note(name: str, arguments: str | None, output: str) -> str:
    """What a developer message says of a relay call already answered in the dropped session."""
    asked = f"{name}({arguments})" if arguments else f"{name}()"
    return (f"Before the connection was re-established, the application already ran {asked}; it returned: "
            f"{output}. Do not ask for it again.")


def result_to_say(name: str, output: str) -> str:
    """What a commentary append asks the model to say of a relay call's result, when no backend
    continuation will say it."""
    return f"Tell the caller what {name} returned: {output}"


__all__ = ["MAX_INPUT_MESSAGES", "MAX_INPUT_TOKENS", "done_note", "message", "result_to_say", "seeded_note",
           "seeded_session"]
