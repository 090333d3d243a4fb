"""Tests for relay.tools: schemas from type hints, argument parsing, the registry, loading tool
files, and rendering outcomes into function_call_output text."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import re
import sys
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.realtime.realtime_function_tool import RealtimeFunctionTool
from pydantic import BaseModel, Field, field_serializer

from relay.tools import (
    Interruption,
    Scheduling,
    ToolDefinitionError,
    ToolLoadError,
    ToolRegistry,
    ToolResult,
    tool,
)
from relay.tools.errors import ArgumentsError
from relay.tools.loading import load_tools
from relay.tools.render import (
    DEFAULT_OUTPUT_LIMIT,
    MIN_OUTPUT_LIMIT,
    RenderedOutput,
    render_error,
    render_exception,
    render_value,
    truncate,
)
from relay.tools.result import MISSING
from relay.tools.schema import flat_schema
from relay.tools.spec import HandlerKind, ToolSpec, build_spec

FIXTURES = Path(__file__).resolve().parent / "fixtures"


# --- types used by the tools under test (module level, so string annotations resolve) --------


class Unit(enum.Enum):
    """Temperature unit."""

    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Coordinates(BaseModel):
    """A point on Earth."""

    lat: float
    lon: float = Field(description="Degrees east")


class Place(BaseModel):
    name: str
    where: Coordinates


class TreeNode(BaseModel):
    label: str
    children: list[TreeNode] = []


class Opaque:
    """A type pydantic cannot describe."""


def spec(fn: Any) -> ToolSpec:
    attached = fn.__relay_tool__
    assert isinstance(attached, ToolSpec)
    return attached


@tool
def forecast(
    city: Annotated[str, Field(description="City name")],
    place: Place,
    unit: Unit = Unit.CELSIUS,
    detail: Literal["brief", "full"] = "brief",
    days: int = Field(3, description="Days ahead"),
    around: Optional[Coordinates] = None,
    tags: list[str] = [],
    weights: dict[str, float] = {},
    exact: bool = False,
    ratio: float | None = None,
    mode: Literal["fast"] = "fast",
    title: str = "",
) -> str:
    """Weather forecast.

    Indented continuation."""
    return city


# --- schemas ----------------------------------------------------------------------------------


def test_schema_covers_every_parameter_type_inlined_and_without_titles() -> None:
    coordinates = {
        "description": "A point on Earth.",
        "properties": {
            "lat": {"type": "number"},
            "lon": {"description": "Degrees east", "type": "number"},
        },
        "required": ["lat", "lon"],
        "type": "object",
    }
    assert spec(forecast).parameters == {
        "type": "object",
        "properties": {
            "city": {"description": "City name", "type": "string"},
            "place": {
                "properties": {"name": {"type": "string"}, "where": coordinates},
                "required": ["name", "where"],
                "type": "object",
            },
            "unit": {
                "description": "Temperature unit.",
                "enum": ["celsius", "fahrenheit"],
                "type": "string",
                "default": "celsius",
            },
            "detail": {"default": "brief", "enum": ["brief", "full"], "type": "string"},
            "days": {"default": 3, "description": "Days ahead", "type": "integer"},
            "around": {"anyOf": [coordinates, {"type": "null"}], "default": None},
            "tags": {"default": [], "items": {"type": "string"}, "type": "array"},
            "weights": {"additionalProperties": {"type": "number"}, "default": {}, "type": "object"},
            "exact": {"default": False, "type": "boolean"},
            "ratio": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None},
            "mode": {"default": "fast", "enum": ["fast"], "type": "string"},
            "title": {"default": "", "type": "string"},
        },
        "required": ["city", "place"],
    }


def test_schema_is_self_contained() -> None:
    text = json.dumps(spec(forecast).parameters)
    assert "$ref" not in text and "$defs" not in text and '"const"' not in text


class OlderPydanticShape(BaseModel):
    """Stands in for a model whose schema uses the shapes older pydantic releases emit."""

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {
            "$defs": {
                "Cat": {"properties": {"kind": {"const": "cat", "title": "Kind"}}, "title": "Cat"},
                "Dog": {"properties": {"kind": {"const": "dog", "title": "Kind"}}, "title": "Dog"},
                "Coordinates": {"description": "A point.", "properties": {}, "title": "Coordinates"},
            },
            "properties": {
                "pet": {
                    "discriminator": {
                        "mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"},
                        "propertyName": "kind",
                    },
                    "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                    "title": "Pet",
                },
                "home": {"allOf": [{"$ref": "#/$defs/Coordinates"}], "description": "Where the pet lives"},
            },
            "required": ["pet"],
            "title": "args",
            "type": "object",
        }


def test_flat_schema_folds_allof_and_drops_discriminator() -> None:
    assert flat_schema(OlderPydanticShape, "pets") == {
        "type": "object",
        "properties": {
            "pet": {
                "oneOf": [
                    {"properties": {"kind": {"enum": ["cat"]}}},
                    {"properties": {"kind": {"enum": ["dog"]}}},
                ]
            },
            "home": {"description": "Where the pet lives", "properties": {}},
        },
        "required": ["pet"],
    }


def test_spec_defaults_from_function() -> None:
    forecast_spec = spec(forecast)
    assert forecast_spec.name == "forecast"
    assert forecast_spec.description == "Weather forecast.\n\nIndented continuation."
    assert forecast_spec.kind is HandlerKind.SYNC
    assert forecast_spec.timeout == 30.0
    assert forecast_spec.scheduling is Scheduling.WHEN_IDLE
    assert forecast_spec.interruption is Interruption.FINISH_SILENTLY
    assert forecast_spec.on_delay is None and forecast_spec.on_start is None
    assert forecast_spec.non_blocking is False


def test_decorator_returns_original_function_still_callable() -> None:
    def greet(name: str) -> str:
        return f"hello {name}"

    decorated = tool(greet)
    assert decorated is greet
    assert greet("ada") == "hello ada"
    assert spec(greet).handler is greet


def test_no_parameters_gives_empty_object_without_required() -> None:
    @tool
    def ping() -> str:
        return "pong"

    assert spec(ping).parameters == {"type": "object", "properties": {}}
    assert spec(ping).description == ""


def test_decorator_options_and_string_choices() -> None:
    @tool(
        name="lookup-v2",
        description="Look it up.",
        timeout=2,
        scheduling="interrupt",
        interruption="finish_and_speak",
        on_start="Let me check.",
        on_complete="Done.",
        on_failure="That failed.",
        on_delay=(1500, "Still working on it."),
    )
    def lookup(query: str) -> str:
        """Ignored because description= wins."""
        return query

    lookup_spec = spec(lookup)
    assert lookup_spec.name == "lookup-v2"
    assert lookup_spec.description == "Look it up."
    assert lookup_spec.timeout == 2.0
    assert lookup_spec.scheduling is Scheduling.INTERRUPT
    assert lookup_spec.interruption is Interruption.FINISH_AND_SPEAK
    assert (lookup_spec.on_start, lookup_spec.on_complete, lookup_spec.on_failure) == (
        "Let me check.",
        "Done.",
        "That failed.",
    )
    assert lookup_spec.on_delay == (1500.0, "Still working on it.")
    assert lookup_spec.non_blocking is True


def test_parameter_named_like_a_basemodel_method_works_quietly() -> None:
    def export(json: str, model_name: str = "x") -> str:
        return json

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tool(export)

    assert set(spec(export).parameters["properties"]) == {"json", "model_name"}
    assert spec(export).parse_arguments('{"json": "a"}') == {"json": "a", "model_name": "x"}


def test_methods_and_callable_objects_are_supported() -> None:
    class Counter:
        def __init__(self) -> None:
            self.total = 0

        def add(self, amount: int) -> int:
            self.total += amount
            return self.total

        async def __call__(self, text: str) -> str:
            return text

    counter = Counter()
    registry = ToolRegistry([counter.add, build_spec(counter, name="echo")])
    assert registry.get("add").parameters["properties"] == {"amount": {"type": "integer"}}
    assert registry.get("echo").kind is HandlerKind.ASYNC


# --- handler kinds ------------------------------------------------------------------------


def test_kinds_are_inferred() -> None:
    @tool
    def sync_tool() -> int:
        return 1

    @tool
    async def async_tool() -> int:
        return 1

    @tool
    async def stream_tool() -> AsyncIterator[int]:
        yield 1

    assert spec(sync_tool).kind is HandlerKind.SYNC
    assert spec(async_tool).kind is HandlerKind.ASYNC
    assert spec(stream_tool).kind is HandlerKind.STREAM
    assert spec(stream_tool).non_blocking is True
    assert spec(async_tool).non_blocking is False


def test_sync_generator_is_rejected_with_a_hint() -> None:
    def numbers() -> Iterator[int]:
        yield 1

    with pytest.raises(ToolDefinitionError, match="async generator"):
        tool(numbers)


@pytest.mark.parametrize("scheduling", ["silent", Scheduling.INTERRUPT])
def test_non_blocking_when_scheduling_is_not_when_idle(scheduling: Any) -> None:
    @tool(scheduling=scheduling)
    def notify() -> None:
        return None

    assert spec(notify).non_blocking is True


# --- definition errors ------------------------------------------------------------------------


def _noop() -> None:
    return None


@pytest.mark.parametrize("bad_name", ["", "x" * 65, "get weather", "météo", "a.b", "tool/1", "name\n"])
def test_bad_names_are_rejected_and_named(bad_name: str) -> None:
    with pytest.raises(ToolDefinitionError, match="invalid tool name") as caught:
        tool(name=bad_name)(_noop)
    assert repr(bad_name) in str(caught.value)


@pytest.mark.parametrize("good_name", ["x" * 64, "a", "get_weather-2", "A9"])
def test_boundary_names_are_accepted(good_name: str) -> None:
    assert spec(tool(name=good_name)(lambda: None)).name == good_name


def test_missing_annotation_names_the_parameter() -> None:
    def untyped(city, days: int) -> None:  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(ToolDefinitionError, match="'city' has no type annotation"):
        tool(untyped)


@pytest.mark.parametrize(
    "handler",
    [
        pytest.param(lambda *values: None, id="args"),
        pytest.param(lambda **values: None, id="kwargs"),
    ],
)
def test_variadic_parameters_are_rejected(handler: Any) -> None:
    with pytest.raises(ToolDefinitionError, match=r"\*args and \*\*kwargs"):
        tool(name="variadic")(handler)


def test_positional_only_and_underscore_parameters_are_rejected() -> None:
    def positional(value: int, /) -> None:
        return None

    def private(_value: int) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="positional-only"):
        tool(positional)
    with pytest.raises(ToolDefinitionError, match="'_value'.*underscore"):
        tool(private)


def test_unsupported_type_names_the_parameter() -> None:
    def takes_object(city: str, handle: Opaque) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="'handle' has an unsupported type"):
        tool(takes_object)


def test_type_without_json_schema_names_the_parameter() -> None:
    def takes_callback(callback: Callable[[], None]) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="'callback' has an unsupported type"):
        tool(takes_callback)


def test_unresolvable_annotation_is_a_definition_error() -> None:
    def dangling(value: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(ToolDefinitionError, match="NotDefinedAnywhere"):
        tool(dangling)


def test_recursive_model_is_rejected() -> None:
    def plant(tree: TreeNode) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="TreeNode is recursive"):
        tool(plant)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout must be a positive"),
        ({"timeout": -1.5}, "timeout must be a positive"),
        ({"timeout": math.inf}, "timeout must be a positive"),
        ({"timeout": "5"}, "timeout must be a number"),
        ({"timeout": True}, "timeout must be a number"),
        ({"on_delay": (0, "wait")}, "on_delay must be"),
        ({"on_delay": (-5, "wait")}, "on_delay must be"),
        ({"on_delay": (500, "")}, "on_delay must be"),
        ({"on_delay": (500, "   ")}, "on_delay must be"),
        ({"on_delay": (500,)}, "on_delay must be"),
        ({"on_delay": ("500", "wait")}, "on_delay must be"),
        ({"on_delay": 500}, "on_delay must be"),
        ({"on_start": ""}, "on_start must be a non-empty string"),
        ({"on_failure": 3}, "on_failure must be a non-empty string"),
        ({"scheduling": "later"}, "unknown scheduling 'later': choose one of 'when_idle', 'interrupt', 'silent'"),
        ({"interruption": "ignore"}, "unknown interruption 'ignore'"),
        ({"name": 5}, "invalid tool name 5"),
        ({"timout": 5}, "tool _noop: unknown option timout"),
    ],
)
def test_option_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(**options)(_noop)


def test_positional_name_is_a_clear_error() -> None:
    with pytest.raises(ToolDefinitionError, match=re.escape("pass a name as tool(name=...)")):
        tool("get_weather")  # type: ignore[call-overload]


def test_nameless_callable_needs_a_name() -> None:
    import functools

    def scale(value: int, factor: int) -> int:
        return value * factor

    double = functools.partial(scale, factor=2)
    registry = ToolRegistry()
    with pytest.raises(ToolDefinitionError, match="pass name="):
        registry.add(double)
    assert build_spec(double, name="double").parse_arguments('{"value": 4}') == {
        "value": 4,
        "factor": 2,
    }


def test_direct_spec_construction_is_validated_and_builds_its_model() -> None:
    def handler(count: int) -> int:
        return count

    direct = ToolSpec(
        name="direct",
        description="",
        parameters={"type": "object", "properties": {"count": {"type": "integer"}}},
        handler=handler,
        kind="sync",  # type: ignore[arg-type]
        scheduling="silent",  # type: ignore[arg-type]
    )
    assert direct.kind is HandlerKind.SYNC and direct.scheduling is Scheduling.SILENT
    assert direct.parse_arguments('{"count": "7"}') == {"count": 7}
    with pytest.raises(ToolDefinitionError, match="invalid tool name"):
        ToolSpec(name="no spaces", description="", parameters={}, handler=handler, kind=HandlerKind.SYNC)


# --- parse_arguments ---------------------------------------------------------------------------


def test_parse_arguments_builds_models_enums_and_defaults() -> None:
    arguments = spec(forecast).parse_arguments(
        json.dumps(
            {
                "city": "Oslo",
                "place": {"name": "home", "where": {"lat": 59.9, "lon": 10.7}},
                "unit": "fahrenheit",
                "around": {"lat": 1, "lon": 2},
                "invented_by_the_model": True,
            }
        )
    )
    assert arguments == {
        "city": "Oslo",
        "place": Place(name="home", where=Coordinates(lat=59.9, lon=10.7)),
        "unit": Unit.FAHRENHEIT,
        "detail": "brief",
        "days": 3,
        "around": Coordinates(lat=1, lon=2),
        "tags": [],
        "weights": {},
        "exact": False,
        "ratio": None,
        "mode": "fast",
        "title": "",
    }
    assert isinstance(arguments["place"], Place) and isinstance(arguments["unit"], Unit)
    assert forecast(**arguments) == "Oslo"


def test_mutable_defaults_are_not_shared_between_calls() -> None:
    first = spec(forecast).parse_arguments('{"city": "a", "place": {"name": "n", "where": {"lat": 0, "lon": 0}}}')
    first["tags"].append("changed")
    second = spec(forecast).parse_arguments('{"city": "a", "place": {"name": "n", "where": {"lat": 0, "lon": 0}}}')
    assert second["tags"] == []


@pytest.mark.parametrize("blank", ["", "   ", "\n"])
def test_blank_arguments_mean_no_arguments(blank: str) -> None:
    @tool
    def ping(loud: bool = False) -> str:
        return "pong"

    assert spec(ping).parse_arguments(blank) == {"loud": False}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            "{",
            "arguments for forecast are not valid JSON: "
            "Expecting property name enclosed in double quotes (line 1 column 2)",
        ),
        ("nope", "arguments for forecast are not valid JSON: Expecting value (line 1 column 1)"),
        ('{"city": NaN}', "arguments for forecast are not valid JSON: NaN is not valid JSON"),
        ("[1, 2]", "arguments for forecast must be a JSON object, got array"),
        ('"Oslo"', "arguments for forecast must be a JSON object, got string"),
        ("null", "arguments for forecast must be a JSON object, got null"),
        ("3", "arguments for forecast must be a JSON object, got number"),
        (
            '{"place": {"name": "n", "where": {"lat": 1, "lon": 2}}}',
            "invalid arguments for forecast: 'city': Field required",
        ),
        (
            '{"city": "Oslo", "place": {"name": "n", "where": {"lat": 1, "lon": 2}}, "days": "many"}',
            "invalid arguments for forecast: "
            "'days': Input should be a valid integer, unable to parse string as an integer",
        ),
        (
            '{"place": {"name": "n", "where": {"lat": "north"}}, "unit": "kelvin"}',
            "invalid arguments for forecast: 'city': Field required; "
            "'place.where.lat': Input should be a valid number, unable to parse string as a number; "
            "'place.where.lon': Field required; "
            "'unit': Input should be 'celsius' or 'fahrenheit'",
        ),
        (
            '{"city": "c", "place": {"name": "n", "where": {"lat": 1, "lon": 2}}, "tags": ["a", 5]}',
            "invalid arguments for forecast: 'tags[1]': Input should be a valid string",
        ),
    ],
)
def test_argument_error_messages(arguments: str, message: str) -> None:
    with pytest.raises(ArgumentsError) as caught:
        spec(forecast).parse_arguments(arguments)
    assert str(caught.value) == message


def test_many_argument_errors_are_summarised() -> None:
    @tool
    def wide(a: int, b: int, c: int, d: int, e: int, f: int, g: int, h: int, i: int, j: int, k: int, m: int) -> None:
        return None

    with pytest.raises(ArgumentsError, match=r"'j': Field required; and 2 more$"):
        spec(wide).parse_arguments("{}")


def test_deeply_nested_json_is_an_arguments_error() -> None:
    with pytest.raises(ArgumentsError, match="nested too deeply"):
        spec(forecast).parse_arguments("[" * 100_000 + "]" * 100_000)


def test_validate_arguments_takes_decoded_objects() -> None:
    @tool
    def add(a: int, b: int = 1) -> int:
        return a + b

    assert spec(add).validate_arguments({"a": 2}) == {"a": 2, "b": 1}
    with pytest.raises(ArgumentsError, match="must be a JSON object, got array"):
        spec(add).validate_arguments([1])


@given(st.text(max_size=200))
def test_parse_arguments_only_ever_raises_arguments_error(arguments: str) -> None:
    try:
        result = spec(forecast).parse_arguments(arguments)
    except ArgumentsError:
        return
    assert "city" in result


# --- ToolResult ----------------------------------------------------------------------------------


def test_tool_result_requires_exactly_one_of_result_and_error() -> None:
    with pytest.raises(ValueError, match="exactly one of result= or error=, got neither"):
        ToolResult()
    with pytest.raises(ValueError, match="got both"):
        ToolResult(result=1, error="x")
    assert ToolResult(result=None).is_error is False
    assert ToolResult(error=None).is_error is True
    assert ToolResult(result=0).error is MISSING
    assert repr(MISSING) == "MISSING"


def test_tool_result_scheduling_is_normalised_and_checked() -> None:
    assert ToolResult(result=1, scheduling="silent").scheduling is Scheduling.SILENT
    assert ToolResult(result=1, scheduling=Scheduling.INTERRUPT).scheduling is Scheduling.INTERRUPT
    assert ToolResult(result=1).scheduling is None
    choices = "choose one of 'when_idle', 'interrupt', 'silent'"
    with pytest.raises(ValueError, match=f"unknown scheduling 'soon': {choices}"):
        ToolResult(result=1, scheduling="soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="message must be a string"):
        ToolResult(result=1, message=5)  # type: ignore[arg-type]


# --- registry -------------------------------------------------------------------------------------


def test_registry_orders_looks_up_and_defines() -> None:
    @tool
    def alpha(x: int) -> int:
        return x

    def beta(word: str) -> str:
        """Undecorated."""
        return word

    registry = ToolRegistry([alpha])
    added = registry.add(beta)
    assert added.name == "beta" and added.description == "Undecorated."
    assert not hasattr(beta, "__relay_tool__")
    gamma = registry.add(build_spec(lambda: None, name="gamma"))
    assert registry.names == ["alpha", "beta", "gamma"]
    assert [each.name for each in registry] == registry.names
    assert len(registry) == 3
    assert "alpha" in registry and "delta" not in registry
    assert registry.get("gamma") is gamma and registry.get("delta") is None
    assert [definition["name"] for definition in registry.definitions()] == registry.names


def test_registry_rejects_duplicates_and_non_callables() -> None:
    @tool(name="same")
    def one() -> None:
        return None

    @tool(name="same")
    def two() -> None:
        return None

    registry = ToolRegistry([one])
    with pytest.raises(ToolDefinitionError, match="duplicate tool name 'same'"):
        registry.add(two)
    with pytest.raises(ToolDefinitionError, match="not a function or ToolSpec"):
        registry.add(42)  # type: ignore[arg-type]
    assert registry.names == ["same"]


def test_definitions_match_the_openai_ga_tool_type() -> None:
    registry = ToolRegistry([forecast])
    for definition in registry.definitions():
        parsed = RealtimeFunctionTool.model_validate(definition)
        assert parsed.model_dump(exclude_none=True) == definition
        assert parsed.type == "function"
        assert set(definition) == {"type", "name", "description", "parameters"}


def test_definition_is_a_copy() -> None:
    definition = spec(forecast).definition()
    definition["parameters"]["properties"].clear()
    assert spec(forecast).parameters["properties"]


# --- load_tools --------------------------------------------------------------------------------


@pytest.fixture
def fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(FIXTURES))
    yield
    for name in [name for name in sys.modules if name.split(".")[0] == "toolpkg"]:
        del sys.modules[name]


def test_load_tools_from_a_file_path() -> None:
    specs = load_tools(str(FIXTURES / "basic_tools.py"))
    assert [each.name for each in specs] == ["read_thermometer", "count-down", "fetch_station"]
    assert [each.kind for each in specs] == [HandlerKind.SYNC, HandlerKind.STREAM, HandlerKind.ASYNC]
    assert specs[0].handler(station="x").celsius == 21.5


def test_load_tools_from_a_relative_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES.parent)
    assert [each.name for each in load_tools("fixtures/first/same_name.py")] == ["first_origin"]


def test_load_tools_from_a_module_name(fixtures_on_path: None) -> None:
    specs = load_tools("toolpkg.clock")
    assert [(each.name, each.description) for each in specs] == [
        ("current_hour", "The hour on the relay's test clock.")
    ]


def test_same_named_files_do_not_clash() -> None:
    registry = ToolRegistry.load(
        [str(FIXTURES / "first" / "same_name.py"), str(FIXTURES / "second" / "same_name.py")]
    )
    assert registry.names == ["first_origin", "second_origin"]
    assert registry.get("first_origin").handler() == "first"
    assert registry.get("second_origin").handler() == "second"


def test_loading_the_same_file_twice_into_one_registry_is_a_duplicate() -> None:
    path = str(FIXTURES / "basic_tools.py")
    with pytest.raises(ToolDefinitionError, match="duplicate tool name 'read_thermometer'"):
        ToolRegistry.load([path, path])


def test_file_without_tools() -> None:
    with pytest.raises(ToolLoadError, match=r"no tools found in '.*no_tools\.py'"):
        load_tools(str(FIXTURES / "no_tools.py"))


def test_file_raising_at_import_names_the_error_and_the_users_line() -> None:
    path = str(FIXTURES / "broken_tools.py")
    with pytest.raises(ToolLoadError) as caught:
        load_tools(path)
    message = str(caught.value)
    assert message.startswith(f"importing {path!r} failed: ZeroDivisionError: division by zero at ")
    assert "in compute_table" in message and "1 / 0" in message
    assert "\n" not in message and "importlib" not in message
    assert isinstance(caught.value.__cause__, ZeroDivisionError)   # the whole traceback is there
    assert not any("broken_tools" in name for name in sys.modules)


def test_syntax_error_and_exit_at_import(tmp_path: Path) -> None:
    bad_syntax = tmp_path / "bad_syntax.py"
    bad_syntax.write_text("def broken(:\n    pass\n")
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(ToolLoadError, match="SyntaxError"):
        load_tools(str(bad_syntax))
    with pytest.raises(ToolLoadError, match="SystemExit: 3"):
        load_tools(str(exits))


def test_definition_error_in_a_file_is_a_load_error(tmp_path: Path) -> None:
    bad_tool = tmp_path / "bad_tool.py"
    bad_tool.write_text("from relay.tools import tool\n\n@tool(name='has space')\ndef f() -> None: ...\n")
    with pytest.raises(ToolLoadError, match="ToolDefinitionError: invalid tool name 'has space'"):
        load_tools(str(bad_tool))


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("missing_file.py", r"no such file"),
        ("relay_no_such_module_anywhere", r"no module named 'relay_no_such_module_anywhere'"),
        ("toolpkg.absent", r"no module named 'toolpkg.absent'"),
        ("not a module", r"not a \.py file path or a module name"),
    ],
)
def test_load_errors_name_the_source(fixtures_on_path: None, source: str, message: str) -> None:
    with pytest.raises(ToolLoadError, match=message) as caught:
        load_tools(source)
    assert repr(source) in str(caught.value)


def test_module_with_a_missing_dependency_blames_the_dependency(fixtures_on_path: None) -> None:
    with pytest.raises(ToolLoadError) as caught:
        load_tools("toolpkg.needs_missing")
    message = str(caught.value)
    assert "importing 'toolpkg.needs_missing' failed" in message
    assert "No module named 'relay_fixture_dependency_that_does_not_exist'" in message


# --- rendering -------------------------------------------------------------------------------


@dataclasses.dataclass
class Booking:
    reference: str
    when: datetime.datetime
    seats: tuple[int, ...]
    unit: Unit


@pytest.mark.parametrize(
    ("value", "output"),
    [
        ("plain text, verbatim: {not json}", "plain text, verbatim: {not json}"),
        ("", ""),
        ({"b": 1, "a": [1.5, None, True]}, '{"b":1,"a":[1.5,null,true]}'),
        ([1, "two"], '[1,"two"]'),
        (7, "7"),
        (2.5, "2.5"),
        (False, "false"),
        (None, "null"),
        ((1, 2), "[1,2]"),
        ({"ünïcode": "日本"}, '{"ünïcode":"日本"}'),
        (Unit.CELSIUS, '"celsius"'),
        ({Unit.CELSIUS: 1, 2: "x"}, '{"celsius":1,"2":"x"}'),
        (datetime.date(2024, 5, 1), '"2024-05-01"'),
        (datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.timezone.utc), '"2024-05-01T12:30:00+00:00"'),
        (datetime.time(8, 15), '"08:15:00"'),
        (Coordinates(lat=1.5, lon=-2), '{"lat":1.5,"lon":-2.0}'),
        (
            Booking("AB1", datetime.datetime(2024, 1, 2, 3, 4), (1, 2), Unit.FAHRENHEIT),
            '{"reference":"AB1","when":"2024-01-02T03:04:00","seats":[1,2],"unit":"fahrenheit"}',
        ),
        ({"nested": [Booking("x", datetime.datetime(2024, 1, 1), (), Unit.CELSIUS)]},
         '{"nested":[{"reference":"x","when":"2024-01-01T00:00:00","seats":[],"unit":"celsius"}]}'),
        (ToolResult(result={"ok": True}), '{"ok":true}'),
        (ToolResult(result="said as is"), "said as is"),
        (ToolResult(result=None), "null"),
    ],
)
def test_render_value_kinds(value: Any, output: str) -> None:
    assert render_value(value) == RenderedOutput(output=output, status="completed", is_error=False)


@pytest.mark.parametrize(
    ("error", "output"),
    [
        ("city not found", '{"error":"city not found"}'),
        ({"code": 404, "reason": "gone"}, '{"error":{"code":404,"reason":"gone"}}'),
        (KeyError("city"), '{"error":"KeyError: \'city\'"}'),
        ({1}, '{"error":"{1}"}'),
    ],
)
def test_render_tool_result_errors(error: Any, output: str) -> None:
    rendered = render_value(ToolResult(error=error, message="Sorry.", scheduling="interrupt"))
    assert rendered == RenderedOutput(
        output=output, status="completed", is_error=True, message="Sorry.", scheduling=Scheduling.INTERRUPT
    )


def test_tool_result_message_and_scheduling_travel_with_a_result() -> None:
    rendered = render_value(ToolResult(result=[1], message="Here it is.", scheduling="silent"))
    assert (rendered.output, rendered.is_error, rendered.message, rendered.scheduling) == (
        "[1]",
        False,
        "Here it is.",
        Scheduling.SILENT,
    )


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (object(), "TypeError: tool returned a value of type object, which is not JSON-serialisable"),
        ({1, 2}, "TypeError: tool returned a value of type set, which is not JSON-serialisable"),
        (b"raw", "TypeError: tool returned a value of type bytes, which is not JSON-serialisable"),
        (
            {"rows": [1, {"blob": b"x"}]},
            "TypeError: tool returned a value of type dict containing a value of type bytes at "
            "'rows[1].blob', which is not JSON-serialisable",
        ),
        (
            {(1, 2): "tuple key"},
            "TypeError: tool returned a value of type dict containing a key of type tuple, "
            "which is not JSON-serialisable",
        ),
        (float("nan"), "ValueError: tool returned NaN or infinity, which JSON cannot represent"),
        ({"x": [math.inf]}, "ValueError: tool returned NaN or infinity, which JSON cannot represent"),
        ({"n": 10 ** 5000}, f"ValueError: tool returned an integer of more than {sys.get_int_max_str_digits()} "
                            "digits, which Python will not write as text"),
    ],
)
def test_unserialisable_values_become_error_outputs(value: Any, error: str) -> None:
    rendered = render_value(value)
    assert rendered == RenderedOutput(
        output=json.dumps({"error": error}, separators=(",", ":")), status="completed", is_error=True
    )


def test_reference_cycle_is_an_error_output() -> None:
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    rendered = render_value(cyclic)
    assert rendered.is_error
    assert "value of type list at '[1]'" in rendered.output


def test_deeply_nested_value_is_an_error_output() -> None:
    nested: list[Any] = []
    for _ in range(100_000):
        nested = [nested]
    rendered = render_value(nested)
    assert rendered.output == '{"error":"ValueError: tool returned a value nested too deeply for JSON"}'
    assert rendered.is_error


class StrictlyPrivate(BaseModel):
    secret: str

    @field_serializer("secret")
    def refuse(self, secret: str) -> str:
        raise RuntimeError("secret cannot leave")


def test_failing_model_serializer_is_an_error_output() -> None:
    rendered = render_value(StrictlyPrivate(secret="x"))
    assert rendered.is_error and "secret cannot leave" in rendered.output
    assert json.loads(rendered.output)["error"].startswith("PydanticSerializationError")


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text either")


def test_error_detail_without_json_or_text_still_renders() -> None:
    assert render_value(ToolResult(error=Unprintable())).output == '{"error":""}'


def test_shared_but_acyclic_values_are_fine() -> None:
    shared = {"k": 1}
    assert render_value([shared, shared]).output == '[{"k":1},{"k":1}]'


def test_render_exception() -> None:
    assert render_exception(ValueError("bad city")) == RenderedOutput(
        output='{"error":"ValueError: bad city"}', status="completed", is_error=True
    )
    assert render_exception(TimeoutError()).output == '{"error":"TimeoutError"}'

    class BrokenStr(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert render_exception(BrokenStr()).output == '{"error":"BrokenStr"}'


def test_render_error_statuses() -> None:
    assert render_error("timed out after 30 s") == RenderedOutput(
        output='{"error":"timed out after 30 s"}', status="completed", is_error=True
    )
    cancelled = render_error("cancelled: the user interrupted", status="incomplete")
    assert (cancelled.status, cancelled.output) == ("incomplete", '{"error":"cancelled: the user interrupted"}')


def test_outputs_are_truncated_to_the_limit() -> None:
    rendered = render_value("y" * 500, limit=100)
    assert len(rendered.output) == 100 and rendered.truncated
    assert rendered.output.endswith("…[truncated 427 characters]")
    assert len(render_value({"a": "z" * DEFAULT_OUTPUT_LIMIT}).output) == DEFAULT_OUTPUT_LIMIT
    assert len(render_error("e" * 1000, limit=MIN_OUTPUT_LIMIT).output) == MIN_OUTPUT_LIMIT
    assert len(render_exception(ValueError("e" * 1000), limit=80).output) == 80


# --- truncate -----------------------------------------------------------------------------------


def test_truncate_exactly_at_the_limit_is_untouched() -> None:
    text = "a" * 100
    assert truncate(text, 100) is text


def test_truncate_one_over_the_limit() -> None:
    cut = truncate("a" * 101, 100)
    marker = "…[truncated 27 characters]"
    assert cut == "a" * (100 - len(marker)) + marker
    assert len(cut) == 100


def test_truncate_uses_the_room_left_when_the_count_is_shorter() -> None:
    # 1000 characters need a 3-digit count, not 4: the text keeps one more character.
    cut = truncate("b" * 1000, 100)
    assert cut == "b" * 73 + "…[truncated 927 characters]"


def test_truncate_rejects_limits_too_small_for_the_marker() -> None:
    with pytest.raises(ValueError, match=f"at least {MIN_OUTPUT_LIMIT}"):
        truncate("short", MIN_OUTPUT_LIMIT - 1)


@given(st.text(max_size=2000), st.integers(min_value=MIN_OUTPUT_LIMIT, max_value=1500))
def test_truncate_never_exceeds_the_limit_and_marks_cuts(text: str, limit: int) -> None:
    cut = truncate(text, limit)
    assert len(cut) <= limit
    if len(text) <= limit:
        assert cut == text
    else:
        kept, marker = cut.rsplit("…[truncated ", 1)
        assert text.startswith(kept)
        assert marker == f"{len(text) - len(kept)} characters]"
        assert len(cut) == limit  # as much text kept as the marker leaves room for


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


@given(_json_values.filter(lambda value: not isinstance(value, str)))
def test_json_values_round_trip(value: Any) -> None:
    rendered = render_value(value, limit=10**9)
    assert not rendered.is_error
    assert json.loads(rendered.output) == value
    assert rendered.output == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
