"""The MCP pieces without servers: configuration (specs, files, headers from the environment,
refusals in one line), schemas as each wire takes them, and results as outputs."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from relay.dialects import GEMINI, OPENAI
from relay.errors import ConfigError
from relay.tools.mcp_config import (
    ApprovalPolicy,
    McpServerConfig,
    read_config_file,
    server_from_spec,
    settings_from_options,
)
from relay.tools.mcp_tools import call_result, content_text, relay_name
from relay.tools.result import Interruption, Scheduling
from relay.tools.schema import self_contained
from tests.support.paths import REPO


def test_a_spec_names_an_http_server_or_a_stdio_command() -> None:
    assert server_from_spec("https://docs.example.com/mcp") == McpServerConfig(name="docs", url="https://docs.example.com/mcp")
    assert server_from_spec("python tools/weather_server.py --fast").name == "weather_server"
    named = server_from_spec("cal=uvx calendar-mcp 'a b'")
    assert named.name == "cal" and named.command == ("uvx", "calendar-mcp", "a b") and named.transport == "stdio"


def test_headers_come_from_the_environment_and_are_secrets() -> None:
    settings = settings_from_options(specs=["docs=https://docs.example.com/mcp"],
                                     headers=["docs:Authorization=Bearer ${DOCS_TOKEN}", "docs:X-Tenant=acme"])
    server = settings.servers[0]
    assert server.resolved_headers({"DOCS_TOKEN": "t0k"}) == {"Authorization": "Bearer t0k", "X-Tenant": "acme"}
    assert settings.secrets({"DOCS_TOKEN": "t0k"}) == ["t0k"]
    assert "t0k" not in server.describe() and "Bearer" not in repr(server.describe())
    with pytest.raises(ConfigError, match=r"header Authorization names \$\{DOCS_TOKEN\}, which is not set"):
        server.resolved_headers({})


def test_what_in_a_url_may_be_a_credential_is_a_secret_too() -> None:
    server = server_from_spec("docs=https://bot:pass-word-1@docs.example.com/mcp?v=2&format=json"
                              "&api_key=k3y-0123456789&sig=a%2Bb%20cdefgh#frag")
    assert server.url_secrets() == ["pass-word-1", "k3y-0123456789", "a%2Bb%20cdefgh", "a+b cdefgh"]
    settings = settings_from_options(specs=[server.url or ""], headers=["docs:Authorization=Bearer ${DOCS_TOKEN}"])
    assert settings.secrets({"DOCS_TOKEN": "t0k"}) == [*server.url_secrets(), "t0k"]
    assert "k3y" not in server.describe() and "pass-word" not in server.describe()
    assert server_from_spec("https://docs.example.com/mcp").url_secrets() == []
    # a spelling the redactor would refuse (a quote once decoded) is left out, not an error
    assert server_from_spec("x=https://h/mcp?token=abc%22defghij").url_secrets() == ["abc%22defghij"]


def test_a_failure_line_leaves_out_the_servers_secrets() -> None:
    from relay.mcp.connection import _failure_text

    failure = ExceptionGroup("transport", [ConnectionError("for url 'https://h/mcp?api_key=k3y-0123456789'")])
    assert _failure_text(failure, ["k3y-0123456789"]) == "ConnectionError: for url 'https://h/mcp?api_key=[redacted]'"


@pytest.mark.parametrize(("options", "message"), [
    ({"specs": ["a=python x.py", "a=python y.py"]}, "MCP server name 'a' is used twice"),
    ({"headers": ["nope:X=1"]}, "no MCP server named 'nope'"),
    ({"headers": ["just-a-value"]}, "write SERVER:NAME=VALUE"),
    ({"specs": ["x=python s.py"], "headers": ["x:A=1"]}, "headers go to HTTP servers"),
    ({"specs": ["x="]}, "give a URL or a command"),
    ({"specs": ["docs=https://h/mcp"], "approve": [":tool"]}, "write SERVER_LABEL or SERVER_LABEL:TOOL"),
])
def test_refusals_say_what_to_change(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_from_options(**options)


def test_a_config_file_sets_servers_tool_settings_and_approvals(tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text('''
[servers.weather]
command = "python weather_server.py"
env = { WEATHER_KEY = "${WEATHER_KEY}" }
prefix = "wx_"
timeout = 8
on_delay = [1500, "Still checking."]
exclude = ["debug_*"]

[servers.weather.tools.forecast]
timeout = 4
scheduling = "interrupt"

[servers.docs]
url = "https://docs.example.com/mcp"
headers = { Authorization = "Bearer ${DOCS_TOKEN}" }
interruption = "cancel"

[approvals]
allow = ["deepwiki"]
deny = ["gcal:delete_*"]
''')
    settings = read_config_file(str(path))
    weather, docs = settings.servers
    assert weather.command == ("python", "weather_server.py") and weather.prefix == "wx_"
    forecast = weather.settings_for("forecast")
    assert forecast.timeout == 4 and forecast.scheduling is Scheduling.INTERRUPT
    assert forecast.on_delay == (1500.0, "Still checking.")
    assert weather.settings_for("other").timeout == 8
    assert not weather.offers("debug_dump") and weather.offers("forecast")
    assert docs.settings.interruption is Interruption.CANCEL
    assert settings.approvals.decide("deepwiki", "ask") is True
    assert settings.approvals.decide("gcal", "delete_event") is False
    assert settings.approvals.decide("gcal", "list_events") is None


@pytest.mark.parametrize(("text", "message"), [
    ('[servers.x]\ncommand = "a"\ntimeout = -1', "timeout must be a positive number"),
    ('[servers.x]\ncommand = "a"\nscheduling = "later"', "unknown scheduling 'later'"),
    ('[servers.x]\ncommand = "a"\nurl = "http://h/mcp"', "exactly one"),
    ('[servers.x]\ncommand = "a"\ncolour = "red"', "unknown key colour"),
    ('[servers.x]\ncommand = "a"\n[servers.x.tools.t]\non_delay = [0, "x"]', "on_delay must be"),
    ('[other]\n', "unknown section other"),
    ('not toml', "not valid TOML"),
])
def test_a_bad_config_file_is_refused_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_config_file(str(path))


def test_the_approval_policy_denies_before_it_allows() -> None:
    policy = ApprovalPolicy(allow=("gcal",), deny=("gcal:delete_event",))
    assert policy.decide("gcal", "create_event") is True
    assert policy.decide("gcal", "delete_event") is False
    assert policy.decide("other", "x") is None and policy.decide(None, "x") is None


EVERYTHING_LIKE = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "where": {"$ref": "#/$defs/Place"},
        "when": {"type": ["string", "null"], "format": "date-time"},
        "count": {"type": "integer", "exclusiveMinimum": 0, "multipleOf": 2},
        "mode": {"const": 3},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "extra": {"type": "object", "additionalProperties": {"type": "string"}},
        "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
        "both": {"allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                           {"properties": {"b": {"type": "number"}}}]},
        "link": {"type": "string", "format": "uri"},
    },
    "required": ["where", "missing"],
    "additionalProperties": False,
    "$defs": {"Place": {"type": "object", "title": "Place", "properties": {"name": {"type": "string"}}}},
}


def test_an_mcp_schema_becomes_self_contained_and_gemini_gets_only_what_it_takes() -> None:
    flat = self_contained(EVERYTHING_LIKE)
    assert "$schema" not in json.dumps(flat) and "$ref" not in json.dumps(flat) and "$defs" not in flat
    assert flat["properties"]["where"] == {"type": "object", "properties": {"name": {"type": "string"}}}
    assert OPENAI.tool_parameters(flat) is flat, "OpenAI takes the self-contained schema as it is"
    gemini = GEMINI.tool_parameters(flat)
    text = json.dumps(gemini)
    for refused in ("$schema", "exclusiveMinimum", "multipleOf", "uniqueItems", "additionalProperties", "oneOf",
                    "allOf", "const", '"uri"'):
        assert refused not in text, refused
    properties = gemini["properties"]
    assert properties["when"]["anyOf"] == [{"type": "string", "format": "date-time"}, {"type": "null"}]
    assert properties["count"] == {"type": "integer", "description": "Greater than 0; a multiple of 2"}
    assert properties["mode"] == {"description": "One of 3"}
    assert properties["either"] == {"anyOf": [{"type": "string"}, {"type": "number"}]}
    assert properties["both"]["required"] == ["a"] and set(properties["both"]["properties"]) == {"a", "b"}
    assert gemini["required"] == ["where"], "a required name without a property is dropped"


def test_a_top_level_combinator_is_dropped_for_openai() -> None:
    assert OPENAI.tool_parameters({"anyOf": [{"type": "object"}], "properties": {"a": {"type": "string"}}}) == {
        "type": "object", "properties": {"a": {"type": "string"}}}


def test_a_recursive_mcp_schema_ends_in_an_open_object() -> None:
    recursive = {"type": "object", "properties": {"node": {"$ref": "#/$defs/Node"}},
                 "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}}
    flat = self_contained(recursive)
    assert flat["properties"]["node"]["properties"]["next"] == {"type": "object"}


def test_results_become_outputs_and_other_content_is_described() -> None:
    text = SimpleNamespace(type="text", text="hello")
    image = SimpleNamespace(type="image", data=base64.b64encode(b"x" * 30).decode(), mime_type="image/png")
    link = SimpleNamespace(type="resource_link", name="report", uri="file:///r.pdf", mime_type="application/pdf")
    blob = SimpleNamespace(type="resource", resource=SimpleNamespace(uri="file:///a.gz", blob="AAAA", mime_type=None))
    embedded = SimpleNamespace(type="resource", resource=SimpleNamespace(uri="file:///n.txt", text="notes"))
    assert content_text(image) == "[image: image/png, 30 bytes]"
    assert content_text(link) == "[resource link: report file:///r.pdf (application/pdf)]"
    assert content_text(blob) == "[resource: file:///a.gz, unknown type, 3 bytes]"
    assert content_text(embedded) == "[resource file:///n.txt]\nnotes"
    assert call_result(SimpleNamespace(content=[text, image], structured_content=None, is_error=False)).result == \
        "hello\n[image: image/png, 30 bytes]"
    assert call_result(SimpleNamespace(content=[text], structured_content={"a": 1}, is_error=False)).result == {"a": 1}
    failed = call_result(SimpleNamespace(content=[text], structured_content=None, is_error=True))
    assert failed.is_error and failed.error == "hello"


def test_names_are_prefixed_and_made_fit_for_realtime_tools() -> None:
    server = McpServerConfig(name="docs", url="https://x/mcp", prefix="docs_")
    assert relay_name(server, "search.pages/v2") == "docs_search_pages_v2"
    assert len(relay_name(server, "x" * 100)) == 64


@pytest.mark.parametrize("workers", ["1", "2"])   # with workers, the parent finds it before forking
def test_the_command_refuses_a_name_clash_in_one_line(tmp_path: Path, workers: str) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text("from relay import tool\n\n@tool\ndef echo(text: str) -> str:\n    return text\n")
    server = REPO / "tests" / "mcp" / "server.py"
    done = subprocess.run([sys.executable, "-m", "relay", "serve", "--tools", str(tools), "--mcp",
                           f"test={sys.executable} {server}", "--port", "0", "--workers", workers,
                           "--upstream", "ws://127.0.0.1:9/v1/realtime"],   # loopback: no key needed
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert "tool name 'echo' is taken twice" in last and "--mcp-prefix" in last


def test_without_the_sdk_mcp_is_refused_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from relay.mcp import connection as mcp

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"pip install 'realtime-relay\[mcp\]'"):
        mcp.require_sdk()
