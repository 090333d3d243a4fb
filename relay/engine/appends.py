"""How an answer to a GPT-Live client delegation becomes appends: what is spoken and what stays
silent, the honest failure, and the split at the wire's 500-token limit.

A delegate answers with a `ToolResult` (relay/tools/delegation.py). Its `result` is silent
context for the model (a thinking append), its `message` is what the model is to say (a
commentary append, paraphrased aloud); an error, a raised exception or a timeout is spoken as a
failure, honestly, never as a result. `answer_appends` turns a decided answer into that list of
`Append`s, in the order they go up: facts first, so the model has them when it speaks.

Every append is at most `APPEND_TOKEN_LIMIT` tokens, counted conservatively without a tokenizer:
the Live models' tokenizers are byte-level BPE, in which every token stands for at least one
byte of UTF-8, so a text of at most 500 UTF-8 bytes is at most 500 tokens, whatever its script.
A longer text is cut at the last whitespace (else the last character) that fits, never inside a
character, into as many appends as it needs, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from relay.dialects.jsontext import utf8_size
from relay.tools.render import error_in_output

APPEND_TOKEN_LIMIT = 500
"""The most tokens GPT-Live takes in one append (`invalid_value` above it)."""
APPEND_BYTE_LIMIT = APPEND_TOKEN_LIMIT
"""The bytes of UTF-8 an append holds at most: one token is at least one byte (see above)."""


NOTHING_TO_ADD = "The delegated work is done; it has nothing to add."
"""The answer of a delegate whose result is empty: the delegation is still answered, once."""


class Channel(StrEnum):
    """Where an append goes: `thinking` (silent context), `commentary` (spoken, paraphrased)."""

    THINKING = "thinking"
    COMMENTARY = "commentary"


@dataclass(frozen=True, slots=True)
class Append:
    """One append of an answer: its channel and its text (within the limit)."""

    channel: Channel
    content: str


def split_text(text: str, limit: int = APPEND_BYTE_LIMIT) -> list[str]:
    """`text` in pieces of at most `limit` UTF-8 bytes, cut at whitespace where there is some
    in the second half of a piece, never inside a character; blank pieces are left out."""
    pieces: list[str] = []
    rest = text.strip()
    while rest:
        if utf8_size(rest) <= limit:
            pieces.append(rest)
            break
        cut = _fitting_chars(rest, limit)
        space = rest.rfind(" ", 0, cut + 1)
        newline = rest.rfind("\n", 0, cut + 1)
        at = max(space, newline)
        if at > cut // 2:
            cut = at
        piece, rest = rest[:cut].rstrip(), rest[cut:].lstrip()
        if piece:
            pieces.append(piece)
    return pieces


def _fitting_chars(text: str, limit: int) -> int:
    """How many of `text`'s first characters fit in `limit` bytes of UTF-8 (at least one)."""
    used = 0
    for index, char in enumerate(text):
        used += len(char.encode("utf-8", "surrogatepass"))
        if used > limit:
            return max(index, 1)
    return len(text)


def failure_text(error: str, on_failure: str | None) -> str:
    """What the model is to say when the work failed: the delegate's own words if it has some,
    else the failure as it is, to be told to the caller as a failure."""
    if on_failure:
        return on_failure
    return f"That did not work ({error}). Tell the caller honestly that it failed; do not guess a result."


def answer_appends(output: str, *, is_error: bool, message: str | None, speak: bool,
                   on_failure: str | None = None) -> list[Append]:
    """The appends of one decided answer: `output` (the rendered result or error, as a call's
    output) and `message` (what to say). A result goes silent, then its message spoken when
    `speak`; an error is spoken as a failure when `speak` (silent otherwise: the caller moved on
    and the answer is only kept as context)."""
    appends: list[Append] = []
    if is_error:
        found, error = error_in_output(output)
        text = failure_text(str(error) if found else output, message or on_failure)
        channel = Channel.COMMENTARY if speak else Channel.THINKING
        appends.extend(Append(channel, piece) for piece in split_text(text))
        return appends
    appends.extend(Append(Channel.THINKING, piece) for piece in split_text(output))
    if message and speak:
        appends.extend(Append(Channel.COMMENTARY, piece) for piece in split_text(message))
    elif message:
        appends.extend(Append(Channel.THINKING, piece) for piece in split_text(message))
    return appends or [Append(Channel.THINKING, NOTHING_TO_ADD)]


__all__ = ["APPEND_BYTE_LIMIT", "APPEND_TOKEN_LIMIT", "Append", "Channel", "answer_appends", "failure_text",
           "split_text"]
