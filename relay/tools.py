"""Tools the relay runs: the `@tool` decorator, the registry, and how outcomes become output text.

Everything here is pure: no I/O, no event loop, no clock. The engine asks a `ToolSpec` to parse a
call's arguments, the runner calls the handler, and the engine turns whatever came back (a value,
a `ToolResult`, an exception, a timeout) into the `output` string of a `function_call_output` item
with the `render_*` functions.

Realtime APIs take a flat, self-contained JSON Schema per tool, so the schema built from a
handler's type hints has every `$ref` inlined and pydantic's `title` keys removed.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
import hashlib
import importlib
import importlib.util
import inspect
import json
import math
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeVar, overload

import pydantic
from pydantic import BaseModel, ConfigDict, TypeAdapter

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "MIN_OUTPUT_LIMIT",
    "MISSING",
    "ArgumentsError",
    "HandlerKind",
    "Interruption",
    "RenderedOutput",
    "Scheduling",
    "ToolDefinitionError",
    "ToolLoadError",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "TOOL_NAME_PATTERN",
    "build_spec",
    "exception_text",
    "flat_schema",
    "handler_kind",
    "load_tools",
    "spec_of",
    "to_jsonable",
    "render_error",
    "render_exception",
    "render_value",
    "tool",
    "truncate",
]


# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------


class Scheduling(str, enum.Enum):
    """What a tool's answer does to the conversation (Gemini's `FunctionResponse.scheduling`)."""

    WHEN_IDLE = "when_idle"
    """The follow-up response waits until no response is active."""
    INTERRUPT = "interrupt"
    """Cancel the active response, then follow up."""
    SILENT = "silent"
    """Inject the output and send no `response.create`."""


class Interruption(str, enum.Enum):
    """What happens to a running handler when the user barges in."""

    CANCEL = "cancel"
    FINISH_SILENTLY = "finish_silently"
    FINISH_AND_SPEAK = "finish_and_speak"


class HandlerKind(str, enum.Enum):
    """How the runner calls a handler. STREAM handlers are async generator functions: each
    yield is an interim result and the last one is the result."""

    SYNC = "sync"
    ASYNC = "async"
    STREAM = "stream"


class _Missing(enum.Enum):
    """Type of the `MISSING` sentinel: `None` is a legitimate tool result, so "not given" needs
    its own value."""

    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing.MISSING


class ArgumentsError(ValueError):
    """The model's arguments for a call do not fit the tool; the message is written for the
    model, so it can correct itself and call again."""


class ToolDefinitionError(ValueError):
    """A tool cannot be defined as written: bad name, unsupported parameter, duplicate name..."""


class ToolLoadError(Exception):
    """Tools could not be loaded from a file or module given on the command line."""


_EnumT = TypeVar("_EnumT", bound=enum.Enum)


def _coerce_choice(
    enum_type: type[_EnumT], value: Any, what: str, error: type[Exception] = ValueError
) -> _EnumT:
    """Accept an enum member or its string value; anything else names the valid choices."""
    if isinstance(value, enum_type):
        return value
    try:
        return enum_type(value)
    except ValueError:
        choices = ", ".join(repr(member.value) for member in enum_type)
        raise error(f"unknown {what} {value!r}: choose one of {choices}") from None


def _dumps(value: Any) -> str:
    """The one JSON encoding used in outputs: compact, non-ASCII kept, NaN/inf refused."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# ToolResult
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    """A handler's answer with more to say than a bare return value.

    Exactly one of `result` and `error` is given (`result=None` counts as given). `message` is
    what the assistant should say about it; `scheduling` overrides the tool's scheduling for this
    one answer.
    """

    result: Any = MISSING
    error: Any = MISSING
    message: str | None = None
    scheduling: Scheduling | None = None

    def __post_init__(self) -> None:
        has_result = self.result is not MISSING
        has_error = self.error is not MISSING
        if has_result == has_error:
            given = "both" if has_result else "neither"
            raise ValueError(f"ToolResult needs exactly one of result= or error=, got {given}")
        if self.message is not None and not isinstance(self.message, str):
            raise ValueError(f"ToolResult message must be a string, got {type(self.message).__name__}")
        if self.scheduling is not None:
            scheduling = _coerce_choice(Scheduling, self.scheduling, "scheduling")
            object.__setattr__(self, "scheduling", scheduling)

    @property
    def is_error(self) -> bool:
        return self.error is not MISSING


# ---------------------------------------------------------------------------------------------
# Schemas and argument models from signatures
# ---------------------------------------------------------------------------------------------

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class _Arguments(BaseModel):
    """Base of every generated arguments model. Unknown fields are ignored because models
    sometimes add fields a tool does not declare; refusing the call for that helps nobody."""

    model_config = ConfigDict(extra="ignore", protected_namespaces=())


def handler_kind(handler: Callable[..., Any]) -> HandlerKind:
    """The kind of a handler, looking through callable objects to their `__call__`."""
    candidates = [handler, getattr(handler, "__call__", None)]
    if any(inspect.isasyncgenfunction(candidate) for candidate in candidates):
        return HandlerKind.STREAM
    if any(inspect.iscoroutinefunction(candidate) for candidate in candidates):
        return HandlerKind.ASYNC
    if any(inspect.isgeneratorfunction(candidate) for candidate in candidates):
        raise ToolDefinitionError(
            f"{_describe(handler)} is a generator function, which cannot stream results without "
            "blocking the event loop: make it an async generator (`async def` with `yield`)"
        )
    return HandlerKind.SYNC


def _describe(handler: Callable[..., Any]) -> str:
    return getattr(handler, "__qualname__", None) or repr(handler)


def arguments_model(handler: Callable[..., Any], tool_name: str) -> type[BaseModel]:
    """A pydantic model with one field per parameter of `handler`.

    Every parameter needs a type annotation (the model needs a schema to fill it in) and must be
    passable by keyword, since the runner calls `handler(**arguments)`.
    """
    try:
        signature = inspect.signature(handler, eval_str=True)
    except NameError as exc:
        raise ToolDefinitionError(f"tool {tool_name}: cannot resolve a type hint: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {tool_name}: cannot read the signature: {exc}") from exc

    fields: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        where = f"tool {tool_name}: parameter {parameter.name!r}"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{where}: *args and **kwargs are not supported; declare each argument"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(f"{where} is positional-only; tools are called with keywords")
        if parameter.name.startswith("_"):
            raise ToolDefinitionError(f"{where}: names starting with an underscore are not supported")
        if parameter.annotation is parameter.empty:
            raise ToolDefinitionError(
                f"{where} has no type annotation; the model needs one to know what to send"
            )
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (parameter.annotation, default)

    try:
        with warnings.catch_warnings():
            # Parameters named like BaseModel methods (`json`, `schema`, `copy`) are harmless:
            # arguments are read back with dict(instance), never by attribute.
            warnings.filterwarnings("ignore", message=r"Field name .* shadows", category=UserWarning)
            return pydantic.create_model(f"{tool_name}_arguments", __base__=_Arguments, **fields)
    except (pydantic.PydanticUserError, TypeError) as exc:
        annotations = {name: annotation for name, (annotation, _default) in fields.items()}
        raise ToolDefinitionError(_unsupported_parameter_message(tool_name, annotations, exc)) from exc


def _unsupported_parameter_message(tool_name: str, annotations: dict[str, Any], exc: Exception) -> str:
    """Name the parameter whose type pydantic cannot validate or describe, so the author knows
    what to change."""
    for name, annotation in annotations.items():
        try:
            TypeAdapter(annotation).json_schema()
        except (pydantic.PydanticUserError, TypeError):
            return f"tool {tool_name}: parameter {name!r} has an unsupported type {annotation!r}"
    return f"tool {tool_name}: unsupported parameters: {exc}"


# JSON Schema keywords whose values are schemas, by shape. Other keywords hold data (`enum`,
# `default`, `examples`, ...) and are copied as they are.
_SCHEMA_MAP_KEYWORDS = frozenset({"properties", "patternProperties", "dependentSchemas"})
_SCHEMA_LIST_KEYWORDS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMA_KEYWORDS = frozenset(
    {
        "items", "additionalProperties", "not", "if", "then", "else", "contains",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties",
    }
)


def flat_schema(model: type[BaseModel], tool_name: str) -> dict[str, Any]:
    """The model's JSON Schema, self-contained: `$ref`s inlined, `title`s dropped, single
    `const`s written as one-value `enum`s, and OpenAPI's `discriminator` (whose mapping points
    at `$defs` that no longer exist) removed."""
    try:
        raw = model.model_json_schema()
    except pydantic.PydanticUserError as exc:  # validates, but has no JSON Schema (a Callable)
        annotations = {name: info.annotation for name, info in model.model_fields.items()}
        raise ToolDefinitionError(_unsupported_parameter_message(tool_name, annotations, exc)) from exc
    definitions = raw.get("$defs", {})

    def resolve(reference: str, seen: tuple[str, ...]) -> dict[str, Any]:
        if reference in seen:
            raise ToolDefinitionError(
                f"tool {tool_name}: {reference.rsplit('/', 1)[-1]} is recursive; realtime tool "
                "schemas must be self-contained, so recursive types are not supported"
            )
        return walk(definitions[reference.rsplit("/", 1)[-1]], (*seen, reference))

    def walk(schema: Any, seen: tuple[str, ...]) -> Any:
        if not isinstance(schema, dict):
            return schema
        flat: dict[str, Any] = {}
        if "$ref" in schema:
            flat.update(resolve(schema["$ref"], seen))
        for key, value in schema.items():
            if key in ("$ref", "$defs", "title", "discriminator"):
                continue
            if key in _SCHEMA_MAP_KEYWORDS:
                flat[key] = {name: walk(sub, seen) for name, sub in value.items()}
            elif key in _SCHEMA_LIST_KEYWORDS and isinstance(value, list):
                flat[key] = [walk(sub, seen) for sub in value]
            elif key in _SCHEMA_KEYWORDS:
                flat[key] = walk(value, seen)
            else:
                flat[key] = value
        if "const" in flat and "enum" not in flat:
            flat["enum"] = [flat.pop("const")]
        # Older pydantic wraps a described $ref as allOf[ref]; fold it into the parent, whose
        # own keywords (the field's description, default) win.
        wrapped = flat.get("allOf")
        if isinstance(wrapped, list) and len(wrapped) == 1 and isinstance(wrapped[0], dict):
            del flat["allOf"]
            flat = {**wrapped[0], **flat}
        return flat

    body = walk(raw, ())
    top: dict[str, Any] = {"type": "object", "properties": body.get("properties", {})}
    if body.get("required"):
        top["required"] = body["required"]
    return top


def _error_location(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


_MAX_REPORTED_ERRORS = 10


def _arguments_error(tool_name: str, exc: pydantic.ValidationError) -> ArgumentsError:
    problems = [
        f"{_error_location(error['loc'])!r}: {error['msg']}" if error["loc"] else error["msg"]
        for error in exc.errors(include_url=False)
    ]
    shown = "; ".join(problems[:_MAX_REPORTED_ERRORS])
    if len(problems) > _MAX_REPORTED_ERRORS:
        shown += f"; and {len(problems) - _MAX_REPORTED_ERRORS} more"
    return ArgumentsError(f"invalid arguments for {tool_name}: {shown}")


_JSON_TYPE_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# ---------------------------------------------------------------------------------------------
# ToolSpec and the decorator
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ToolSpec:
    """Everything the relay knows about one tool. Built by `@tool`; may also be built directly,
    in which case `arguments_model` is derived from the handler's signature when not given.

    Specs compare and hash by identity: each one is a registration, not a value.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[..., Any]
    kind: HandlerKind
    timeout: float = 30.0
    scheduling: Scheduling = Scheduling.WHEN_IDLE
    interruption: Interruption = Interruption.FINISH_SILENTLY
    on_start: str | None = None
    on_complete: str | None = None
    on_failure: str | None = None
    on_delay: tuple[float, str] | None = None
    """(milliseconds, text): say `text` if the handler is still running after that long."""
    arguments_model: type[BaseModel] | None = field(default=None, repr=False)
    """The pydantic model `parse_arguments` validates with."""

    def __post_init__(self) -> None:
        def set_field(name: str, value: Any) -> None:  # normalising a frozen instance's fields
            object.__setattr__(self, name, value)

        _check_name(self.name)
        if not isinstance(self.description, str):
            raise ToolDefinitionError(f"tool {self.name}: description must be a string")
        if not isinstance(self.parameters, dict):
            raise ToolDefinitionError(f"tool {self.name}: parameters must be a JSON Schema object")
        if not callable(self.handler):
            raise ToolDefinitionError(f"tool {self.name}: handler is not callable")
        for choice_field, choices in (
            ("kind", HandlerKind),
            ("scheduling", Scheduling),
            ("interruption", Interruption),
        ):
            value = getattr(self, choice_field)
            set_field(choice_field, _coerce_choice(choices, value, choice_field, ToolDefinitionError))
        set_field("timeout", _checked_timeout(self.name, self.timeout))
        for message_field in ("on_start", "on_complete", "on_failure"):
            text = getattr(self, message_field)
            if text is not None and (not isinstance(text, str) or not text.strip()):
                raise ToolDefinitionError(
                    f"tool {self.name}: {message_field} must be a non-empty string or None"
                )
        if self.on_delay is not None:
            set_field("on_delay", _checked_delay(self.name, self.on_delay))
        if self.arguments_model is None:
            set_field("arguments_model", arguments_model(self.handler, self.name))

    @property
    def non_blocking(self) -> bool:
        """Whether the conversation goes on while the tool runs (Gemini's NON_BLOCKING)."""
        return self.scheduling is not Scheduling.WHEN_IDLE or self.kind is HandlerKind.STREAM

    def definition(self) -> dict[str, Any]:
        """The tool as a realtime session lists it (flat, no `function` wrapper). A copy: the
        caller may change it freely."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(self.parameters),
        }

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        """The model's JSON arguments as keyword arguments for the handler, validated.

        An empty or blank string means no arguments (what models send for no-parameter tools).
        Nested models arrive as model instances and enums as members; defaults are filled in.
        Fields the tool does not declare are ignored, because models sometimes add some.
        Raises ArgumentsError with a message the model can act on.
        """
        if not arguments.strip():
            return self.validate_arguments({})
        try:
            data = json.loads(arguments, parse_constant=_reject_constant)
        except ValueError as exc:
            detail = (
                f"{exc.msg} (line {exc.lineno} column {exc.colno})"
                if isinstance(exc, json.JSONDecodeError)
                else str(exc)
            )
            raise ArgumentsError(f"arguments for {self.name} are not valid JSON: {detail}") from None
        except RecursionError:
            raise ArgumentsError(f"arguments for {self.name} are nested too deeply") from None
        return self.validate_arguments(data)

    def validate_arguments(self, data: Any) -> dict[str, Any]:
        """Like `parse_arguments`, for arguments that arrive already decoded (Gemini's `args`)."""
        if not isinstance(data, dict):
            got = "null" if data is None else _JSON_TYPE_NAMES.get(type(data), type(data).__name__)
            raise ArgumentsError(f"arguments for {self.name} must be a JSON object, got {got}")
        assert self.arguments_model is not None  # set in __post_init__
        try:
            instance = self.arguments_model.model_validate(data)
        except pydantic.ValidationError as exc:
            raise _arguments_error(self.name, exc) from None
        return dict(instance)


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
        raise ToolDefinitionError(
            f"invalid tool name {name!r}: use 1 to 64 characters from a-z, A-Z, 0-9, _ and -"
        )


def _checked_timeout(tool_name: str, timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ToolDefinitionError(f"tool {tool_name}: timeout must be a number of seconds")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ToolDefinitionError(f"tool {tool_name}: timeout must be a positive number of seconds")
    return float(timeout)


def _checked_delay(tool_name: str, on_delay: Any) -> tuple[float, str]:
    problem = f"tool {tool_name}: on_delay must be (milliseconds > 0, non-empty text), got {on_delay!r}"
    if not isinstance(on_delay, (tuple, list)) or len(on_delay) != 2:
        raise ToolDefinitionError(problem)
    milliseconds, text = on_delay
    if isinstance(milliseconds, bool) or not isinstance(milliseconds, (int, float)):
        raise ToolDefinitionError(problem)
    if not (milliseconds > 0 and math.isfinite(milliseconds)):
        raise ToolDefinitionError(problem)
    if not isinstance(text, str) or not text.strip():
        raise ToolDefinitionError(problem)
    return (float(milliseconds), text)


_F = TypeVar("_F", bound=Callable[..., Any])


_TOOL_SETTINGS = frozenset(
    {"timeout", "scheduling", "interruption", "on_start", "on_complete", "on_failure", "on_delay"}
)


def build_spec(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    **settings: Any,
) -> ToolSpec:
    """The `ToolSpec` for `fn`, without touching `fn` (what `@tool` attaches to it).

    `settings` are the remaining `ToolSpec` fields (timeout, scheduling, ...); None means the
    field's default."""
    if name is None:
        name = getattr(fn, "__name__", None)
        if name is None:
            raise ToolDefinitionError(f"{fn!r} has no __name__: pass name= to tool()")
    _check_name(name)
    unknown = sorted(set(settings) - _TOOL_SETTINGS)
    if unknown:
        raise ToolDefinitionError(f"tool {name}: unknown option {', '.join(unknown)}")
    if description is None:
        docstring = getattr(fn, "__doc__", None)
        description = inspect.cleandoc(docstring) if isinstance(docstring, str) else ""
    model = arguments_model(fn, name)
    return ToolSpec(
        name=name,
        description=description,
        parameters=flat_schema(model, name),
        handler=fn,
        kind=handler_kind(fn),
        arguments_model=model,
        **{setting: value for setting, value in settings.items() if value is not None},
    )


@overload
def tool(fn: _F, /) -> _F: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = 30.0,
    scheduling: Scheduling | str | None = None,
    interruption: Interruption | str | None = None,
    on_start: str | None = None,
    on_complete: str | None = None,
    on_failure: str | None = None,
    on_delay: tuple[float, str] | None = None,
) -> Callable[[_F], _F]: ...


def tool(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Mark a function as a tool the relay runs: `@tool` or `@tool(name=..., timeout=...)`.

    The function comes back unchanged and still directly callable; its `ToolSpec` is attached
    as `__relay_tool__`. Definition errors surface here, at decoration time, not mid-call.
    Sync functions, async functions and async generator functions (streaming) are supported.
    """

    def decorate(function: _F) -> _F:
        function.__relay_tool__ = build_spec(function, **options)  # type: ignore[attr-defined]
        return function

    if fn is None:
        return decorate
    if not callable(fn):
        raise ToolDefinitionError(
            f"tool() got {fn!r} instead of a function: pass a name as tool(name=...)"
        )
    return decorate(fn)


def spec_of(candidate: Any) -> ToolSpec | None:
    """The spec a decorated function carries, or None."""
    spec = getattr(candidate, "__relay_tool__", None)
    return spec if isinstance(spec, ToolSpec) else None


# ---------------------------------------------------------------------------------------------
# Registry and loading
# ---------------------------------------------------------------------------------------------


class ToolRegistry:
    """The tools of one relay, by name, in registration order. Read-only once sessions start:
    sessions share it and keep their own state elsewhere."""

    def __init__(self, tools: Iterable[ToolSpec | Callable[..., Any]] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        for item in tools:
            self.add(item)

    def add(self, tool: ToolSpec | Callable[..., Any]) -> ToolSpec:
        """Register a spec, a decorated function, or a plain function (decorated with defaults,
        without modifying it)."""
        if isinstance(tool, ToolSpec):
            spec = tool
        elif (attached := spec_of(tool)) is not None:
            spec = attached
        elif callable(tool):
            spec = build_spec(tool)
        else:
            raise ToolDefinitionError(f"cannot register {tool!r}: not a function or ToolSpec")
        existing = self._specs.get(spec.name)
        if existing is not None:
            raise ToolDefinitionError(
                f"duplicate tool name {spec.name!r}: {_origin(spec.handler)} and "
                f"{_origin(existing.handler)} both use it"
            )
        self._specs[spec.name] = spec
        return spec

    def get(self, name: object) -> ToolSpec | None:
        return self._specs.get(name) if isinstance(name, str) else None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names!r})"

    @property
    def names(self) -> list[str]:
        return list(self._specs)

    def definitions(self) -> list[dict[str, Any]]:
        return [spec.definition() for spec in self._specs.values()]

    @classmethod
    def load(cls, specs: Iterable[str]) -> ToolRegistry:
        """A registry of every tool in the given files or modules (see `load_tools`)."""
        return cls(spec for source in specs for spec in load_tools(source))


def _origin(handler: Callable[..., Any]) -> str:
    module = getattr(handler, "__module__", None)
    return f"{module}.{_describe(handler)}" if module else _describe(handler)


_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def load_tools(spec: str) -> list[ToolSpec]:
    """The tools defined in a `.py` file (absolute or relative to the working directory) or an
    importable module (dotted name): every module-level attribute carrying a spec, in
    definition order, each once even when aliased. Tools the module imports count too, so one
    module can gather tools from several others.

    Files are imported under a name derived from their full path, so two files with the same
    basename do not replace each other in `sys.modules`.
    """
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        module = _import_file(spec)
    elif _MODULE_NAME.fullmatch(spec):
        module = _import_module(spec)
    else:
        raise ToolLoadError(f"cannot load tools from {spec!r}: not a .py file path or a module name")
    found: dict[int, ToolSpec] = {}
    for value in list(vars(module).values()):
        attached = spec_of(value)
        if attached is not None:
            found.setdefault(id(attached), attached)
    if not found:
        raise ToolLoadError(f"no tools found in {spec!r}: mark functions with @tool")
    return list(found.values())


def _import_file(spec: str) -> ModuleType:
    path = Path(spec).expanduser().resolve()
    if not path.is_file():
        raise ToolLoadError(f"cannot load tools from {spec!r}: no such file ({path})")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    stem = re.sub(r"\W", "_", path.stem)
    module_name = f"relay_tools_{stem}_{digest}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ToolLoadError(f"cannot load tools from {spec!r}: not importable as a Python file")
    module = importlib.util.module_from_spec(module_spec)
    # Registered before running, as a normal import does: dataclasses and pydantic models in
    # the file look their module up in sys.modules while it executes.
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        raise ToolLoadError(_import_failure(spec, exc)) from exc
    return module


def _import_module(spec: str) -> ModuleType:
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (spec == exc.name or spec.startswith(exc.name + ".")):
            raise ToolLoadError(
                f"cannot load tools from {spec!r}: no module named {exc.name!r} "
                "(to load a file, give its path ending in .py)"
            ) from exc
        raise ToolLoadError(_import_failure(spec, exc)) from exc
    except (Exception, SystemExit) as exc:
        raise ToolLoadError(_import_failure(spec, exc)) from exc


def _import_failure(spec: str, exc: BaseException) -> str:
    """A traceback summary limited to the user's code: importlib's and this module's frames
    say nothing about what went wrong."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<frozen ") and frame.filename != __file__
    ]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    return f"importing {spec!r} failed:\n" + "".join(lines).rstrip()


# ---------------------------------------------------------------------------------------------
# Outcome -> output text
# ---------------------------------------------------------------------------------------------

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
    cut = truncate(output, limit)
    return RenderedOutput(
        output=cut,
        status=status,
        is_error=is_error,
        message=message,
        scheduling=scheduling,
        truncated=len(output) > limit,
        verbatim=verbatim,
    )


def render_error(
    text: str,
    *,
    status: Literal["completed", "incomplete"] = "completed",
    limit: int = DEFAULT_OUTPUT_LIMIT,
) -> RenderedOutput:
    """`{"error": text}`: for what the engine reports itself (timeouts, cancellations, bad
    arguments, unknown tools)."""
    return _rendered(_dumps({"error": text}), limit=limit, is_error=True, status=status)


def _safe_str(value: Any) -> str:
    """str(value), or "" when its __str__ is broken: reporting must not fail in turn."""
    try:
        return str(value)
    except Exception:
        return ""


def exception_text(exc: BaseException) -> str:
    """`Type: message`, or just the type name when the message is empty."""
    detail = _safe_str(exc)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def render_exception(exc: BaseException, *, limit: int = DEFAULT_OUTPUT_LIMIT) -> RenderedOutput:
    return render_error(exception_text(exc), limit=limit)


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
    if isinstance(value, BaseModel):
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
    except ValueError:
        raise ValueError("tool returned NaN or infinity, which JSON cannot represent") from None
    except RecursionError:
        raise ValueError("tool returned a value nested too deeply for JSON") from None


def _error_json(error: Any) -> str:
    """`{"error": ...}` for a `ToolResult.error`: exceptions as `Type: message`, JSON-able
    details as they are, anything else by its text."""
    if isinstance(error, BaseException):
        error = exception_text(error)
    try:
        return _dumps({"error": to_jsonable(error)})
    except Exception:  # a detail without JSON form is still worth its text
        return _dumps({"error": _safe_str(error)})


def _value_text(value: Any) -> tuple[str, bool]:
    """(output, is_error) for a returned value: strings verbatim, the rest as JSON."""
    if isinstance(value, str):
        return value, False
    try:
        return _json_text(value), False
    except Exception as exc:  # also a model's own serializer failing: the call still needs an output
        return _dumps({"error": exception_text(exc)}), True


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
