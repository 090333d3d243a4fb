"""What the operator says about MCP servers: which servers are the relay's tool sources (`--mcp`,
`--mcp-header`, `--mcp-prefix`, or a `--mcp-config` file), the call settings of their tools (as
`@tool` takes them: timeout, fillers, scheduling, interruption), and how the provider's own MCP
approval requests are answered (`ApprovalPolicy`: `--mcp-approve`, `--mcp-deny`).

Pure data and parsing, no I/O but reading the config file and the environment, and no import of
the `mcp` SDK: a configuration is checked (and refused with one line, exit 2) before any server is
reached. Secrets never sit in a configuration: headers and a stdio server's environment name
environment variables (`${DOCS_TOKEN}`), expanded when the server is reached, and their values are
what `McpServerConfig.secrets` hands the relay's redactor.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import string
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus, urlsplit

from relay.errors import ConfigError
from relay.tools.result import Interruption, Scheduling, coerce_choice

DEFAULT_MCP_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 10.0
URL_SECRET_MIN_CHARS = 8
"""A URL's password or query value this long or longer is kept out of logs and recordings (see
McpServerConfig.url_secrets); a shorter one (`v=2`) is no credential."""
_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class ToolSettings:
    """The `@tool` settings an MCP tool takes from its configuration; None: not set here (the
    server's setting, else `@tool`'s default)."""

    timeout: float | None = None
    scheduling: Scheduling | None = None
    interruption: Interruption | None = None
    on_start: str | None = None
    on_complete: str | None = None
    on_failure: str | None = None
    on_delay: tuple[float, str] | None = None

    def over(self, base: ToolSettings) -> ToolSettings:
        """These settings where set, `base`'s elsewhere."""
        return replace(base, **{f.name: getattr(self, f.name) for f in fields(self)
                                if getattr(self, f.name) is not None})

    def spec_fields(self) -> dict[str, Any]:
        """The settings that are set, as `ToolSpec` fields."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def as_json(self) -> dict[str, Any]:
        """The settings that are set, as JSON data (a recording's header keeps them)."""
        data = self.spec_fields()
        for choice in ("scheduling", "interruption"):
            if choice in data:
                data[choice] = data[choice].value
        if "on_delay" in data:
            data["on_delay"] = list(data["on_delay"])
        return data


SETTING_NAMES = tuple(f.name for f in fields(ToolSettings))


def tool_settings(data: Mapping[str, Any], where: str) -> ToolSettings:
    """Settings from a config file's table (or a recording's header); ConfigError names the
    culprit."""
    unknown = sorted(set(data) - set(SETTING_NAMES))
    if unknown:
        raise ConfigError(f"{where}: unknown setting {', '.join(unknown)} (settings: {', '.join(SETTING_NAMES)})")
    values: dict[str, Any] = dict(data)
    if "timeout" in values:
        timeout = values["timeout"]
        if (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
                or timeout == float("inf")):
            raise ConfigError(f"{where}: timeout must be a positive number of seconds, not {timeout!r}")
        values["timeout"] = float(timeout)
    for choice, kind in (("scheduling", Scheduling), ("interruption", Interruption)):
        if choice in values:
            try:
                values[choice] = coerce_choice(kind, values[choice], choice)
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
    for message in ("on_start", "on_complete", "on_failure"):
        if message in values and (not isinstance(values[message], str) or not values[message].strip()):
            raise ConfigError(f"{where}: {message} must be a non-empty string")
    if "on_delay" in values:
        delay = values["on_delay"]
        if (not isinstance(delay, (list, tuple)) or len(delay) != 2 or isinstance(delay[0], bool)
                or not isinstance(delay[0], (int, float)) or not delay[0] > 0
                or not isinstance(delay[1], str) or not delay[1].strip()):
            raise ConfigError(f"{where}: on_delay must be [milliseconds > 0, \"text\"], not {delay!r}")
        values["on_delay"] = (float(delay[0]), delay[1])
    return ToolSettings(**values)


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server the relay takes tools from: a command it starts (stdio) or a URL
    (streamable HTTP). `env` and `headers` are templates naming environment variables; `prefix`
    goes before each of its tool names; `include` (if any) and `exclude` choose its tools by name
    (shell patterns); `settings` apply to all its tools, `tool_settings` to one (by its MCP
    name). Frozen and hashable: the process's connection to a server is kept by its config."""

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    prefix: str = ""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    settings: ToolSettings = field(default_factory=ToolSettings)
    tool_settings: tuple[tuple[str, ToolSettings], ...] = ()
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    def __post_init__(self) -> None:
        if not _SERVER_NAME.fullmatch(self.name):
            raise ConfigError(f"MCP server name {self.name!r}: use 1 to 32 characters from A-Z, a-z, 0-9, _ "
                              "and -, starting with a letter or digit")
        if bool(self.command) == bool(self.url):
            raise ConfigError(f"MCP server {self.name}: give a command (stdio) or a url (streamable HTTP), "
                              "exactly one")
        if self.url is not None and urlsplit(self.url).scheme not in ("http", "https"):
            raise ConfigError(f"MCP server {self.name}: url must be http:// or https://, not {self.url!r}")
        if self.headers and not self.url:
            raise ConfigError(f"MCP server {self.name}: headers go to HTTP servers; a stdio server takes env")
        if self.prefix and not re.fullmatch(r"[A-Za-z0-9_-]+", self.prefix):
            raise ConfigError(f"MCP server {self.name}: prefix {self.prefix!r} may hold A-Z, a-z, 0-9, _ and - only")
        if not self.connect_timeout > 0:
            raise ConfigError(f"MCP server {self.name}: connect_timeout must be positive")
        for what, templates in (("env", self.env), ("header", self.headers)):
            for key, template in templates:
                try:
                    string.Template(template).get_identifiers()
                    if not string.Template(template).is_valid():
                        raise ValueError
                except ValueError:
                    raise ConfigError(f"MCP server {self.name}: {what} {key} is not a valid template "
                                      f"(name variables as ${{NAME}}; write $$ for a dollar sign)") from None

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def describe(self) -> str:
        """Where the server is, for log lines: the command, or the URL without credentials,
        query or fragment (headers and env are never shown)."""
        if self.command:
            return "stdio: " + shlex.join(self.command)
        parts = urlsplit(self.url or "")
        return f"http: {parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"

    def settings_for(self, tool: str) -> ToolSettings:
        """The settings of one of its tools (by MCP name): the tool's over the server's."""
        own = dict(self.tool_settings).get(tool)
        return self.settings if own is None else own.over(self.settings)

    def offers(self, tool: str) -> bool:
        """Whether a tool of this server (by MCP name) becomes one of the relay's tools."""
        if self.include and not any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.include):
            return False
        return not any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.exclude)

    def resolved_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        return self._expand(self.headers, "header", os.environ if environ is None else environ)

    def resolved_env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        return self._expand(self.env, "env", os.environ if environ is None else environ)

    def secrets(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The values the headers and env take from the environment, and what in the URL may be
        a credential (`url_secrets`): never to be logged or recorded (the relay's redactor learns
        them)."""
        environ = os.environ if environ is None else environ
        found = self.url_secrets()
        for _key, template in (*self.headers, *self.env):
            for variable in string.Template(template).get_identifiers():
                value = environ.get(variable)
                if value:
                    found.append(value)
        return found

    def url_secrets(self) -> list[str]:
        """The URL's password and query values of at least URL_SECRET_MIN_CHARS characters, as
        written and percent-decoded: some servers take their key there (`?api_key=...`), and the
        HTTP client's errors quote the whole URL. Shorter values are left alone: the redactor
        replaces a secret wherever it occurs, and `2` or `json` would be blanked out of every frame.
        A spelling that holds a quote, a backslash or a control character is left out (the
        redactor refuses those: escaped in JSON, they could not be found)."""
        if not self.url:
            return []
        parts = urlsplit(self.url)
        written = [parts.password or "", *(pair.partition("=")[2] for pair in parts.query.split("&"))]
        found: list[str] = []
        for value in written:
            for spelling in (value, unquote_plus(value)):
                if (len(spelling) >= URL_SECRET_MIN_CHARS and spelling not in found
                        and not any(ch in '"\\' or ord(ch) < 0x20 for ch in spelling)):
                    found.append(spelling)
        return found

    def _expand(self, templates: tuple[tuple[str, str], ...], what: str,
                environ: Mapping[str, str]) -> dict[str, str]:
        expanded = {}
        for key, template in templates:
            try:
                expanded[key] = string.Template(template).substitute(environ)
            except KeyError as exc:
                raise ConfigError(f"MCP server {self.name}: {what} {key} names ${{{exc.args[0]}}}, which is not "
                                  "set in the environment") from None
        return expanded


@dataclass(frozen=True)
class ApprovalPolicy:
    """How the relay answers the provider's own MCP approval requests (`mcp_approval_request`
    items, OpenAI Realtime): `allow` and `deny` hold `SERVER_LABEL:TOOL` shell patterns (a label
    alone means all its tools). A request that matches `deny` is refused, one that matches
    `allow` approved, any other passed to the client as without the relay."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for pattern in (*self.allow, *self.deny):
            if not isinstance(pattern, str) or not pattern or pattern.startswith(":"):
                raise ConfigError(f"MCP approval pattern {pattern!r}: write SERVER_LABEL or SERVER_LABEL:TOOL")

    def __bool__(self) -> bool:
        return bool(self.allow or self.deny)

    def decide(self, server_label: Any, tool: Any) -> bool | None:
        """True: approve; False: refuse; None: not the relay's to decide."""
        if not isinstance(server_label, str) or not isinstance(tool, str):
            return None
        if any(_approval_match(pattern, server_label, tool) for pattern in self.deny):
            return False
        if any(_approval_match(pattern, server_label, tool) for pattern in self.allow):
            return True
        return None


def _approval_match(pattern: str, server_label: str, tool: str) -> bool:
    label_pattern, _, tool_pattern = pattern.partition(":")
    return fnmatch.fnmatchcase(server_label, label_pattern) and fnmatch.fnmatchcase(tool, tool_pattern or "*")


@dataclass(frozen=True)
class McpSettings:
    """Everything the operator configured about MCP: the servers, and the approval policy."""

    servers: tuple[McpServerConfig, ...] = ()
    approvals: ApprovalPolicy = field(default_factory=ApprovalPolicy)

    def __post_init__(self) -> None:
        names = [server.name for server in self.servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ConfigError(f"MCP server name {duplicates[0]!r} is used twice: give each server its own name")

    def __bool__(self) -> bool:
        return bool(self.servers or self.approvals)

    def secrets(self, environ: Mapping[str, str] | None = None) -> list[str]:
        return [secret for server in self.servers for secret in server.secrets(environ)]


# ---- the command line -----------------------------------------------------------------------------
def server_from_spec(spec: str) -> McpServerConfig:
    """`--mcp SPEC`: `[NAME=]URL` (streamable HTTP) or `[NAME=]COMMAND ARGS...` (stdio, split as
    a shell would, without running one). Without NAME, a URL is named by its host's first label and
    a command by its last argument's stem (`python weather.py`: `weather`)."""
    text = spec.strip()
    name = None
    head, sep, rest = text.partition("=")
    if sep and _SERVER_NAME.fullmatch(head.strip()) and " " not in head.strip():
        name, text = head.strip(), rest.strip()
    if not text:
        raise ConfigError(f"--mcp {spec!r}: give a URL or a command")
    if urlsplit(text).scheme in ("http", "https"):
        return McpServerConfig(name=name or _name_from_host(text), url=text)
    try:
        command = tuple(shlex.split(text))
    except ValueError as exc:
        raise ConfigError(f"--mcp {spec!r}: {exc}") from None
    return McpServerConfig(name=name or _name_from_command(command), command=command)


def _name_from_host(url: str) -> str:
    host = urlsplit(url).hostname or "mcp"
    return _server_name(host.split(".")[0] if not host.replace(".", "").isdigit() else "mcp")


def _name_from_command(command: tuple[str, ...]) -> str:
    last = next((part for part in reversed(command) if not part.startswith("-")), command[0])
    return _server_name(Path(last).stem)


def _server_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]", "_", text).strip("_-")[:32] or "mcp"
    return name if name[0].isalnum() else "mcp" + name[:29]


def header_from_spec(spec: str) -> tuple[str, str, str]:
    """`--mcp-header SERVER:NAME=VALUE`: (server, header name, value template). Quote the value
    so that the shell leaves `${VAR}` to the relay: `'docs:Authorization=Bearer ${DOCS_TOKEN}'`."""
    server, colon, rest = spec.partition(":")
    header, equals, value = rest.partition("=")
    if not colon or not equals or not server.strip() or not header.strip():
        raise ConfigError(f"--mcp-header {spec!r}: write SERVER:NAME=VALUE, e.g. "
                          "'docs:Authorization=Bearer ${DOCS_TOKEN}'")
    return server.strip(), header.strip(), value


def settings_from_options(*, specs: Sequence[str] = (), headers: Sequence[str] = (), prefix: bool = False,
                          config_file: str | None = None, approve: Sequence[str] = (),
                          deny: Sequence[str] = ()) -> McpSettings:
    """The MCP settings of the command line: the config file's servers and policy, then the
    `--mcp` servers, with the `--mcp-header` headers on the servers they name; `prefix` gives
    every server without a prefix of its own the prefix `NAME_`."""
    from_file = read_config_file(config_file) if config_file else McpSettings()
    servers = list(from_file.servers) + [server_from_spec(spec) for spec in specs]
    by_name = {server.name: server for server in servers}
    for header_spec in headers:
        server_name, header, value = header_from_spec(header_spec)
        server = by_name.get(server_name)
        if server is None:
            raise ConfigError(f"--mcp-header {header_spec!r}: no MCP server named {server_name!r} "
                              f"(servers: {', '.join(by_name) or 'none'})")
        by_name[server_name] = replace(server, headers=(*server.headers, (header, value)))
    servers = [by_name[server.name] if by_name.get(server.name) is not server else server for server in servers]
    if prefix:
        servers = [server if server.prefix else replace(server, prefix=f"{server.name}_") for server in servers]
    approvals = ApprovalPolicy(allow=(*from_file.approvals.allow, *approve),
                               deny=(*from_file.approvals.deny, *deny))
    return McpSettings(servers=tuple(servers), approvals=approvals)


# ---- the config file ------------------------------------------------------------------------------
_SERVER_KEYS = frozenset({"command", "args", "url", "env", "headers", "cwd", "prefix", "include", "exclude",
                          "connect_timeout", "tools", *SETTING_NAMES})


def read_config_file(path: str) -> McpSettings:
    """A `--mcp-config` file (TOML, or JSON when it ends in .json): see docs/mcp.md."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"--mcp-config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--mcp-config {path}: cannot read it: {exc}") from None
    try:
        data = json.loads(text) if source.suffix.lower() == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"--mcp-config {path}: not valid {'JSON' if source.suffix.lower() == '.json' else 'TOML'}: "
                          f"{exc}") from None
    return settings_from_data(data, f"--mcp-config {path}")


def settings_from_data(data: Any, where: str) -> McpSettings:
    """MCP settings from a config file's parsed content."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table of [servers.NAME] and [approvals]")
    unknown = sorted(set(data) - {"servers", "approvals"})
    if unknown:
        raise ConfigError(f"{where}: unknown section {', '.join(unknown)} (sections: servers, approvals)")
    servers_data = data.get("servers", {})
    if not isinstance(servers_data, dict):
        raise ConfigError(f"{where}: servers must be a table of servers by name")
    servers = tuple(_server_from_data(name, entry, f"{where}: servers.{name}") for name, entry in servers_data.items())
    approvals_data = data.get("approvals", {})
    if not isinstance(approvals_data, dict) or set(approvals_data) - {"allow", "deny"}:
        raise ConfigError(f"{where}: approvals takes allow and deny, lists of SERVER_LABEL[:TOOL]")
    approvals = ApprovalPolicy(allow=_strings(approvals_data.get("allow", []), f"{where}: approvals.allow"),
                               deny=_strings(approvals_data.get("deny", []), f"{where}: approvals.deny"))
    return McpSettings(servers=servers, approvals=approvals)


def _server_from_data(name: str, entry: Any, where: str) -> McpServerConfig:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = sorted(set(entry) - _SERVER_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {', '.join(unknown)}")
    command = entry.get("command", ())
    if isinstance(command, str):
        command = tuple(shlex.split(command))
    command = (*_strings(command, f"{where}.command"), *_strings(entry.get("args", []), f"{where}.args"))
    tools = entry.get("tools", {})
    if not isinstance(tools, dict):
        raise ConfigError(f"{where}.tools: expected a table of tool settings by tool name")
    connect_timeout = entry.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)):
        raise ConfigError(f"{where}.connect_timeout: a number of seconds")
    return McpServerConfig(
        name=name,
        command=command,
        url=_optional_string(entry.get("url"), f"{where}.url"),
        env=_string_pairs(entry.get("env", {}), f"{where}.env"),
        headers=_string_pairs(entry.get("headers", {}), f"{where}.headers"),
        cwd=_optional_string(entry.get("cwd"), f"{where}.cwd"),
        prefix=_optional_string(entry.get("prefix"), f"{where}.prefix") or "",
        include=_strings(entry.get("include", []), f"{where}.include"),
        exclude=_strings(entry.get("exclude", []), f"{where}.exclude"),
        settings=tool_settings({key: value for key, value in entry.items() if key in SETTING_NAMES}, where),
        tool_settings=tuple((tool, tool_settings(_table(settings, f"{where}.tools.{tool}"), f"{where}.tools.{tool}"))
                            for tool, settings in tools.items()),
        connect_timeout=float(connect_timeout),
    )


def _table(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    raise ConfigError(f"{where}: expected a table of settings")


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise ConfigError(f"{where}: expected a list of strings")


def _optional_string(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{where}: expected a string")


def _string_pairs(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return tuple(value.items())
    raise ConfigError(f"{where}: expected a table of strings")

