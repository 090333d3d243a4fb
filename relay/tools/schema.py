"""A handler's signature as the model sees it and as the relay checks it: a pydantic model with
one field per parameter, its flat JSON Schema, and the model's arguments decoded and validated
against it (`ArgumentsError` messages are written for the model, which reads them and retries).

Realtime APIs take a flat, self-contained JSON Schema per tool, so the schema built from a
handler's type hints has every `$ref` inlined and pydantic's `title` keys removed.
"""

from __future__ import annotations

import inspect
import json
import warnings
from collections.abc import Callable
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, TypeAdapter

from relay.tools.errors import ArgumentsError, ToolDefinitionError
from relay.tools.result import IdempotencyKey


class _Arguments(BaseModel):
    """Base of every generated arguments model. Unknown fields are ignored because models
    sometimes add fields a tool does not declare; refusing the call for that helps nobody."""

    model_config = ConfigDict(extra="ignore", protected_namespaces=())


class OpenArguments(BaseModel):
    """Arguments passed on whole (an MCP tool's): any JSON object, checked by whoever runs the
    tool."""

    model_config = ConfigDict(extra="allow")


def key_parameter_of(parameter: inspect.Parameter) -> bool:
    """Whether `parameter` asks for the call's idempotency key (annotated `IdempotencyKey`)."""
    return parameter.annotation is IdempotencyKey


def key_parameter(handler: Callable[..., Any]) -> str | None:
    """The name of the handler's parameter annotated `IdempotencyKey`, if it has one."""
    try:
        signature = inspect.signature(handler, eval_str=True)
    except (NameError, TypeError, ValueError):
        return None   # arguments_model says what is wrong with it
    return next((p.name for p in signature.parameters.values() if key_parameter_of(p)), None)


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
        if key_parameter_of(parameter):
            continue   # the relay gives it (the call's idempotency key), the model never sees it
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
    """The model's JSON Schema, self-contained (see `self_contained`): a recursive type is a
    ToolDefinitionError."""
    try:
        raw = model.model_json_schema()
    except pydantic.PydanticUserError as exc:  # validates, but has no JSON Schema (a Callable)
        annotations = {name: info.annotation for name, info in model.model_fields.items()}
        raise ToolDefinitionError(_unsupported_parameter_message(tool_name, annotations, exc)) from exc

    def recursive(reference: str) -> Any:
        raise ToolDefinitionError(
            f"tool {tool_name}: {reference.rsplit('/', 1)[-1]} is recursive; realtime tool "
            "schemas must be self-contained, so recursive types are not supported"
        )

    return self_contained(raw, on_recursion=recursive)


_DROPPED_KEYWORDS = frozenset({"$ref", "$defs", "definitions", "title", "discriminator", "$schema", "$id",
                               "$comment", "$anchor"})


def self_contained(schema: Any, *, on_recursion: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """A tool's parameters as realtime APIs take them: a flat, self-contained JSON Schema object.
    Local `$ref`s are inlined (a reference back into itself becomes `on_recursion(ref)`, by
    default an open object), `$defs`, `$schema`, `$id` and `title`s dropped, single `const`s
    written as one-value `enum`s, OpenAPI's `discriminator` (whose mapping points at `$defs` that
    no longer exist) removed, and the top is `{"type": "object", "properties": ...}` with its
    `required`. What `@tool` builds from type hints, and what an MCP server's `inputSchema` becomes."""
    root = schema if isinstance(schema, dict) else {}

    def resolve(reference: str, seen: tuple[str, ...]) -> Any:
        if reference in seen:
            return on_recursion(reference) if on_recursion is not None else {"type": "object"}
        target: Any = root
        for part in reference.removeprefix("#").strip("/").split("/") if reference.startswith("#") else [None]:
            if part is None or not isinstance(target, dict):
                return {}   # not a local reference: nothing known about it
            if part:
                target = target.get(part.replace("~1", "/").replace("~0", "~"))
        return walk(target, (*seen, reference)) if isinstance(target, dict) else {}

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        if not isinstance(node, dict):
            return node
        flat: dict[str, Any] = {}
        if isinstance(node.get("$ref"), str):
            flat.update(resolve(node["$ref"], seen))
        for key, value in node.items():
            if key in _DROPPED_KEYWORDS:
                continue
            if key in _SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
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

    body = walk(root, ())
    properties = body.get("properties")
    top: dict[str, Any] = {"type": "object", "properties": properties if isinstance(properties, dict) else {}}
    if body.get("required"):
        top["required"] = body["required"]
    return top


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode_arguments(tool_name: str, arguments: str) -> Any:
    """The model's JSON arguments decoded; an empty or blank string is no arguments (what models
    send for no-parameter tools). NaN and infinity are refused: they are not JSON."""
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments, parse_constant=_reject_constant)
    except ValueError as exc:
        detail = (
            f"{exc.msg} (line {exc.lineno} column {exc.colno})"
            if isinstance(exc, json.JSONDecodeError)
            else str(exc)
        )
        raise ArgumentsError(f"arguments for {tool_name} are not valid JSON: {detail}") from None
    except RecursionError:
        raise ArgumentsError(f"arguments for {tool_name} are nested too deeply") from None


_JSON_TYPE_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def validated_arguments(model: type[BaseModel], tool_name: str, data: Any) -> dict[str, Any]:
    """Decoded arguments checked against the tool's arguments model, as keyword arguments."""
    if not isinstance(data, dict):
        got = "null" if data is None else _JSON_TYPE_NAMES.get(type(data), type(data).__name__)
        raise ArgumentsError(f"arguments for {tool_name} must be a JSON object, got {got}")
    try:
        instance = model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise _arguments_error(tool_name, exc) from None
    return dict(instance)


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


def _error_location(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path
