"""How a `relay` command ends: the exit statuses every command shares, and the one line that
input it cannot use earns instead of a traceback.

| status | meaning |
|---|---|
| 0 | done, nothing found |
| 1 | a finding: a replay divergence, an attached call that ended badly |
| 2 | unusable input or usage: a missing, empty or foreign file, a tools file that does not import, a port in use, a bad option |
| 70 | a bug in relay (one line too; `RELAY_TRACEBACK=1` shows the traceback) |
| 130 | interrupted (Ctrl-C) |
| 141 | its output's reader went away (a pipe into `head` closed early): nothing more is said |

Commands raise; `relay.cli.main` is the one place that turns what they raise into the line and
the status (`refusal`), so that no command words the same error its own way and CI can tell a
broken input (2) from a regression (1).
"""

from __future__ import annotations

import json

from relay.errors import UnusableInput

OK = 0
FINDING = 1
UNUSABLE = 2
INTERNAL_ERROR = 70   # EX_SOFTWARE (sysexits.h)
INTERRUPTED = 130
OUTPUT_CLOSED = 141   # 128 + SIGPIPE, as a command killed by the broken pipe ends

TRACEBACK_ENV = "RELAY_TRACEBACK"


def one_line(text: str) -> str:
    """`text` on one line: line breaks (and the indentation after them) become single spaces."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def refusal(exc: BaseException) -> str | None:
    """The one line for an error that means a command's input cannot be used, or None when the
    error is not one of those (a bug). Every input error the relay raises derives from
    `UnusableInput` (`relay.errors`); besides those, a pydantic ValidationError (a file that does
    not fit its model) and an OSError naming a file. Exception groups of one such error count as
    that error."""
    from pydantic import (
        ValidationError,  # here: only a failing command pays for importing it
    )

    if isinstance(exc, BaseExceptionGroup):
        lines = [refusal(inner) for inner in exc.exceptions]
        return lines[0] if len(lines) == 1 else None
    if isinstance(exc, UnusableInput):
        return one_line(str(exc))
    if isinstance(exc, ValidationError):
        return validation_line(exc)
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return None


def validation_line(exc: object) -> str:
    """A pydantic ValidationError as one line: where the first problem is and what it is."""
    errors = exc.errors(include_url=False) if hasattr(exc, "errors") else []
    if not errors:
        return one_line(str(exc))
    first = errors[0]
    message = str(first.get("msg", "invalid"))
    if first.get("type") == "json_invalid":
        return "not valid JSON: " + message.removeprefix("Invalid JSON: ")
    where = ".".join(str(part) for part in first.get("loc", ())) or "the document"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    given = first.get("input")
    shown = ""
    if first.get("type") not in ("missing", "json_invalid") and isinstance(given, (str, int, float, bool)):
        shown = f" (got {json.dumps(given)[:60]})"
    return f"{where}: {message}{shown}{more}"
