"""How a call's outcome becomes the `output` text of its `function_call_output` item.

The engine hands over whatever came back (a value, a `ToolResult`, an exception, a timeout) and
gets a `RenderedOutput`: the text, cut to the output limit with a visible marker, and how to
follow up. Rendering never raises for a bad value: every call needs an output, so a value with
no JSON form becomes an error output that says why.

An error output is a JSON object whose only key is `error` (`error_output`); whatever reads an
output back asks `error_in_output` whether it is one. The convention is the relay's, for every
wire: Gemini Live's answers carry the same `error` member (`relay.dialects.gemini`).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from relay.tools.result import Scheduling, ToolResult

_SURROGATE = re.compile("[\ud800-\udfff]")

DEFAULT_OUTPUT_LIMIT = 32_768
MIN_OUTPUT_LIMIT = 64
"""Smallest accepted limit: room for the truncation marker with a 20-digit count, plus text."""


@dataclass(frozen=True)
class RenderedOutput:
    """What to put in a `function_call_output` item, and how the engine should follow up."""

    output: str
    status: Literal["completed", "incomplete"]
    is_error: bool
    message: str | None = None
    scheduling: Scheduling | None = None
    truncated: bool = False
    # the handler's own text rather than JSON the relay wrote (Gemini answers text as text); two
    # renderings with the same output are equal whichever way they came about
    verbatim: bool = field(default=False, compare=False)


def render_value(value: Any, *, limit: int = DEFAULT_OUTPUT_LIMIT) -> RenderedOutput:
    """The output for whatever a handler returned: strings verbatim, `ToolResult`s by their
    parts, anything else as compact JSON. A value with no JSON form becomes an error output;
    this function never raises for a bad value."""
    if not isinstance(value, ToolResult):
        text, is_error = _value_text(value)
        return _rendered(text, limit=limit, is_error=is_error, verbatim=isinstance(value, str))
    if value.is_error:
        text, is_error = _error_json(value.error), True
    else:
        text, is_error = _value_text(value.result)
    return _rendered(
        text, limit=limit, is_error=is_error, message=value.message, scheduling=value.scheduling,
        verbatim=not value.is_error and isinstance(value.result, str),
    )


def render_error(
    text: str,
    *,
    status: Literal["completed", "incomplete"] = "completed",
    limit: int = DEFAULT_OUTPUT_LIMIT,
) -> RenderedOutput:
    """`{"error": text}`: for what the engine reports itself (timeouts, cancellations, bad
    arguments, unknown tools)."""
    return _rendered(error_output(text), limit=limit, is_error=True, status=status)


def error_output(error: Any) -> str:
    """The output text of an error: `{"error": <error>}`, compact (`error` must be JSON-able)."""
    return _dumps({"error": error})


def error_in_output(output: str) -> tuple[bool, Any]:
    """An output read back: (True, its error) for an error output, (False, None) for any other."""
    try:
        value = json.loads(output)
    except (ValueError, RecursionError):
        return False, None
    if isinstance(value, dict) and len(value) == 1 and "error" in value:
        return True, value["error"]
    return False, None


def render_exception(exc: BaseException, *, limit: int = DEFAULT_OUTPUT_LIMIT) -> RenderedOutput:
    return render_error(exception_text(exc), limit=limit)


def exception_text(exc: BaseException) -> str:
    """`Type: message`, or just the type name when the message is empty."""
    detail = _safe_str(exc)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters; a cut text ends with a marker saying how many
    characters were removed, so the model knows the output is partial."""
    if limit < MIN_OUTPUT_LIMIT:
        raise ValueError(f"output limit must be at least {MIN_OUTPUT_LIMIT} characters, got {limit}")
    if len(text) <= limit:
        return text
    total = len(text)
    kept = limit - len(_truncation_marker(total))
    # The count may have fewer digits than `total`, leaving room for a few more characters.
    while kept + 1 + len(_truncation_marker(total - kept - 1)) <= limit:
        kept += 1
    return text[:kept] + _truncation_marker(total - kept)


def holds_surrogate(text: str) -> bool:
    """Whether `text` holds a surrogate code point, which UTF-8 cannot encode (one flag test for
    ASCII, one scan otherwise): what `valid_unicode` and `relay.dialects.jsontext` look for."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def valid_unicode(text: str) -> str:
    """`text` as valid Unicode: a surrogate pair joined into its character, a lone surrogate
    replaced by U+FFFD. A handler's text may hold one (a file name decoded with `surrogateescape`,
    a service's JSON that cut an emoji in half), and JSON can carry it (`"\\ud800"`), but the
    parsers of today refuse the event that does (pydantic's, as the official SDKs' models read
    JSON; serde's): the output would be refused and the call left unanswered."""
    if not holds_surrogate(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _truncation_marker(removed: int) -> str:
    return f"…[truncated {removed} characters]"


def _rendered(
    output: str,
    *,
    limit: int,
    is_error: bool,
    status: Literal["completed", "incomplete"] = "completed",
    message: str | None = None,
    scheduling: Scheduling | None = None,
    verbatim: bool = False,
) -> RenderedOutput:
    output = valid_unicode(output)
    cut = truncate(output, limit)
    return RenderedOutput(
        output=cut,
        status=status,
        is_error=is_error,
        message=None if message is None else valid_unicode(message),
        scheduling=scheduling,
        truncated=len(output) > limit,
        verbatim=verbatim,
    )


def _dumps(value: Any) -> str:
    """The one JSON encoding used in outputs: compact, non-ASCII kept, NaN/inf refused."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _safe_str(value: Any) -> str:
    """str(value), or "" when its __str__ is broken: reporting must not fail in turn."""
    try:
        return str(value)
    except Exception:
        return ""


def _value_text(value: Any) -> tuple[str, bool]:
    """(output, is_error) for a returned value: strings verbatim, the rest as JSON."""
    if isinstance(value, str):
        return value, False
    try:
        return _json_text(value), False
    except Exception as exc:  # also a model's own serializer failing: the call still needs an output
        return error_output(exception_text(exc)), True


def _error_json(error: Any) -> str:
    """`{"error": ...}` for a `ToolResult.error`: exceptions as `Type: message`, JSON-able
    details as they are, anything else by its text."""
    if isinstance(error, BaseException):
        error = exception_text(error)
    try:
        return error_output(to_jsonable(error))
    except Exception:  # a detail without JSON form is still worth its text
        return error_output(_safe_str(error))


def _json_text(value: Any) -> str:
    """Compact JSON for a tool's value; raises TypeError or ValueError with a message meant for
    the model when the value has no JSON form."""
    try:
        data = to_jsonable(value)
    except _NotJSONable as exc:
        culprit = f"value of type {exc.type_name}"
        if exc.path or exc.is_key:
            culprit = f"value of type {type(value).__name__} containing a {exc}"
        raise TypeError(f"tool returned a {culprit}, which is not JSON-serialisable") from None
    except RecursionError:
        raise ValueError("tool returned a value nested too deeply for JSON") from None
    try:
        return _dumps(data)
    except ValueError as exc:
        if "integer string conversion" in str(exc):   # sys.get_int_max_str_digits()
            raise ValueError(f"tool returned an integer of more than {sys.get_int_max_str_digits()} digits, "
                             "which Python will not write as text") from None
        raise ValueError("tool returned NaN or infinity, which JSON cannot represent") from None
    except RecursionError:
        raise ValueError("tool returned a value nested too deeply for JSON") from None


class _NotJSONable(TypeError):
    """Raised inside `to_jsonable`; `path` locates the culprit for the error message."""

    def __init__(self, value: Any, path: str, *, is_key: bool = False) -> None:
        self.type_name = type(value).__name__
        self.path = path
        self.is_key = is_key
        nested = f" at {path!r}" if path else ""
        super().__init__(f"{'key' if is_key else 'value'} of type {self.type_name}{nested}")


def to_jsonable(value: Any) -> Any:
    """`value` as plain JSON data (dict, list, str, int, float, bool, None).

    Handles pydantic models, dataclass instances, enums, dates and tuples at any depth. Raises
    TypeError naming the type (and where it sits) when something has no JSON form.
    """
    return _jsonable(value, "", set())


def _jsonable(value: Any, path: str, active: set[int]) -> Any:
    """`active` holds the containers being converted around `value`: meeting one again is a
    reference cycle, which has no JSON form."""
    if value is None or isinstance(value, (str, int, float)):  # bool is an int
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, path, active)
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    pydantic = sys.modules.get("pydantic")   # none is a model before pydantic is loaded
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple, Mapping)) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        if id(value) in active:
            raise _NotJSONable(value, path)
        active.add(id(value))
        converted = _container_jsonable(value, path, active)
        active.discard(id(value))
        return converted
    raise _NotJSONable(value, path)


def _container_jsonable(value: Any, path: str, active: set[int]) -> list[Any] | dict[Any, Any]:
    if isinstance(value, (list, tuple)):
        return [_jsonable(item, f"{path}[{index}]", active) for index, item in enumerate(value)]
    if isinstance(value, Mapping):
        members = value.items()
    else:
        members = ((each.name, getattr(value, each.name)) for each in dataclasses.fields(value))
    converted: dict[Any, Any] = {}
    for key, item in members:
        if isinstance(key, enum.Enum):
            key = key.value
        if not (key is None or isinstance(key, (str, int, float))):  # what json.dumps accepts
            raise _NotJSONable(key, path, is_key=True)
        converted[key] = _jsonable(item, f"{path}.{key}" if path else str(key), active)
    return converted


def json_copy(value: Any) -> Any:
    """A copy of JSON-shaped data (dicts, lists and tuples of strings, numbers, booleans and None)
    that shares nothing with it, as `copy.deepcopy` makes, several times faster (no memo: a value
    the data holds twice is copied twice). Anything else in it is deep-copied."""
    kind = type(value)
    if kind is dict:
        return {key: json_copy(item) for key, item in value.items()}
    if kind is list:
        return [json_copy(item) for item in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is tuple:
        return tuple(json_copy(item) for item in value)
    return copy.deepcopy(value)
