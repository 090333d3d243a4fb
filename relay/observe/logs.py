"""Structured logging: one line per record, JSON (for log pipelines) or text (for people), with
the fields a record carries in `extra` laid out as keys. The default, `auto`, is text when stderr
is a terminal and JSON otherwise: a person starting `relay serve` by hand reads a startup error
as it is, a service manager or a container runtime gets lines it can parse.

The relay logs sessions and tool calls, never frames: nothing here is on the per-frame path.
`RedactingLogger` is given to websockets, which logs handshake headers (the provider key, the
relay token) at DEBUG level: with it, even a debug log carries no secret. The libraries the relay
does not hand a logger log what they like (httpx, under the MCP SDK, quotes each request's URL,
an MCP server's `?api_key=` included): the formatters here take every secret a runtime's
redactor knows out of every line, and those libraries' records are redacted as they are made,
for an application's own handlers (`keep_out_of_logs`); below `debug` the relay's CLI does not
show their narration at all.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import weakref
from datetime import datetime, timezone
from typing import IO, TYPE_CHECKING, Any

from relay.dialects.jsontext import utf8_safe
from relay.engine.actions import TOOL_CALL
from relay.errors import REDACTED
from relay.recording.redact import Redactor

if TYPE_CHECKING:
    from relay.engine import Notice

LOG_FORMATS = ("auto", "json", "text")
LOG_LEVELS = ("debug", "info", "warning", "error")
ANOMALY_LOG_LIMIT = 10   # per session; the rest are only counted
# tool_call notice fields a log line leaves out (`message` is also a name logging reserves)
_NOT_LOGGED = frozenset({"message", "is_error"})
# Parent of the loggers the relay gives websockets (`relay.websocket.client`, `.upstream`).
WEBSOCKET_LOGGER = "relay.websocket"
# Libraries that narrate every connection or request at INFO (the relay logs its sessions and its
# MCP servers' connections itself): websockets; the HTTP clients under the MCP SDK; its client.
NARRATING_LOGGERS = (WEBSOCKET_LOGGER, "websockets", "httpx", "httpx2", "httpcore", "httpcore2", "mcp.client")
# The live runtimes' redactors, weakly: a tuple replaced on every change, never changed in place,
# so a thread that logs reads a whole one (a WeakSet's iteration can fail while another thread adds).
_LOG_REDACTORS: tuple[weakref.ref[Redactor], ...] = ()
_REGISTERING = threading.Lock()
UNREDACTABLE_LINE = "[a library's log line that could not be checked for secrets]"


# The libraries among them whose records are redacted as they are made (`keep_out_of_logs`): the
# relay's own websocket loggers are given a `RedactingLogger` instead.
_LIBRARY_LOGGERS = tuple(name for name in NARRATING_LOGGERS if name != WEBSOCKET_LOGGER)
_record_factory_installed = False


def keep_out_of_logs(redactor: Redactor) -> None:
    """Take the secrets `redactor` knows, now and later (a refreshed token), out of the logs for
    as long as it lives (an edge's runtime registers its own): out of every line the formatters
    below write, and out of every record the narrating libraries make, whatever handler and
    formatter write it (an application that logs with its own, `logging.basicConfig` at INFO,
    gets httpx's request lines too)."""
    global _LOG_REDACTORS
    with _REGISTERING:
        _LOG_REDACTORS = (*(ref for ref in _LOG_REDACTORS if ref() not in (None, redactor)), weakref.ref(redactor))
        _install_record_factory()


def _without_secrets(line: str) -> str:
    for ref in _LOG_REDACTORS:
        redactor = ref()
        if redactor is not None:
            line = redactor.text(line)
    return line


def _install_record_factory() -> None:
    """Once per process (called under `_REGISTERING`): a log record factory, chained to the one
    in place, that redacts the records of the narrating libraries (`_redact_record`) as they are
    made. A filter would not do: a logger's filters do not see its children's records (httpcore
    logs as `httpcore.http11`...), and a handler's are the application's. Records are made only
    for levels a logger shows, so this costs nothing for lines nobody sees."""
    global _record_factory_installed
    if _record_factory_installed:
        return
    _record_factory_installed = True
    previous = logging.getLogRecordFactory()

    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if _LOG_REDACTORS and record.name.startswith(_LIBRARY_LOGGERS):
            try:
                _redact_record(record)
            except Exception:   # never the library's call to fail: its line goes without its text
                record.msg, record.args, record.exc_info, record.exc_text = UNREDACTABLE_LINE, None, None, None
        return record

    logging.setLogRecordFactory(make_record)


def _redact_record(record: logging.LogRecord) -> None:
    """`record`'s message, and its traceback's text, without the secrets the runtimes know (left
    as they are when they hold none)."""
    try:
        message = record.getMessage()
    except Exception:   # logging reports a record it cannot format when a handler writes it
        return
    clean = _without_secrets(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        text = logging.Formatter().formatException(record.exc_info)
        clean = _without_secrets(text)
        if clean != text:
            record.exc_text = clean   # what logging.Formatter writes for the traceback


# Attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD_ATTRIBUTES = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__
) | {"message", "asctime", "taskName"}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a record was given with `extra=`."""
    return {key: value for key, value in record.__dict__.items() if key not in _STANDARD_ATTRIBUTES}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", ...fields}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        data.update(record_fields(record))
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return _without_secrets(utf8_safe(json.dumps(data, ensure_ascii=False, default=str)))


class TextFormatter(logging.Formatter):
    """`<ts> <LEVEL> <logger>: <msg> key=value ...`; values with spaces are quoted."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, f"{record.name}:", record.getMessage()]
        for key, value in record_fields(record).items():
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            if not text or any(c.isspace() or c in "\"=" for c in text):
                text = json.dumps(text)
            parts.append(f"{key}={text}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return _without_secrets(line)


def resolved_format(fmt: str, stream: IO[str]) -> str:
    """`json` or `text`: `auto` is text when `stream` is a terminal, JSON otherwise."""
    if fmt != "auto":
        return fmt
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return "json"


def configure_logging(
    fmt: str = "auto", *, level: str = "info", stream: IO[str] | None = None
) -> logging.Handler:
    """Send every log record to `stream` (stderr) in `fmt` (`auto`: see `resolved_format`),
    replacing earlier handlers of the root logger: the CLI owns the process's logging. Returns
    the handler. The lines libraries narrate connections and requests with (NARRATING_LOGGERS)
    are shown only at `debug`."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    target = stream or sys.stderr
    handler = logging.StreamHandler(target)
    handler.setFormatter(JsonFormatter() if resolved_format(fmt, target) == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in NARRATING_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    return handler


# What names a credential, in a header's or a query parameter's name: its value is not logged even
# when it is no secret the relay knows (a client's wrong token, a session's resume token).
_CREDENTIAL_NAME = r"[\w-]*(?:auth|key|token|secret|resume|cookie|signature)[\w-]*"
# A handshake's debug line for one header ("> Authorization: Bearer ..."), and a query parameter
# in its request line ("< GET /v1/realtime?resume=... HTTP/1.1").
_CREDENTIAL_HEADER = re.compile(rf"^([<>] {_CREDENTIAL_NAME}:\s*(?:(?:Bearer|Basic|Token)\s+)?).+$",
                                re.IGNORECASE)
_CREDENTIAL_PARAMETER = re.compile(rf"([?&]{_CREDENTIAL_NAME}=)[^&\s]*", re.IGNORECASE)


def without_credentials(line: str) -> str:
    """A handshake's debug line with the values of credential headers and query parameters
    replaced by the redaction mark."""
    line = _CREDENTIAL_HEADER.sub(lambda found: found.group(1) + REDACTED, line)
    return _CREDENTIAL_PARAMETER.sub(lambda found: found.group(1) + REDACTED, line)


class RedactingLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger for websockets that removes secrets from what it logs (its handshake debug lines
    print every header, `Authorization` included): the secrets the redactor knows, and the values
    of every header and query parameter whose name says it holds a credential."""

    def __init__(self, logger: logging.Logger, redactor: Redactor) -> None:
        super().__init__(logger, {})
        self.redactor = redactor

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        # Formatted here, not by the handler: websockets passes objects (frames) whose text may
        # hold a secret, and whose str() raises for a text frame that is not valid UTF-8.
        try:
            text = str(msg) % args if args else str(msg)
        except Exception as exc:
            text = f"{msg} [arguments not printable: {type(exc).__name__}: {exc}]"
        super().log(level, without_credentials(self.redactor(text)), **kwargs)


class AnomalyLog:
    """How many protocol anomalies one session has logged. An anomaly means the provider (or the
    relay) is not doing what it should: worth a warning, but a peer that sends nothing but garbage
    must not flood the log, so only the first `limit` are logged, then one line saying the rest
    are only counted (`relay_anomalies_total`)."""

    def __init__(self, limit: int = ANOMALY_LOG_LIMIT) -> None:
        self.limit = limit
        self.logged = 0

    def log(self, logger: logging.Logger, fields: dict[str, Any], context: dict[str, Any]) -> None:
        self.logged += 1
        if self.logged > self.limit + 1:
            return
        source = fields.get("source")
        extra = {**context, "source": source, "event_type": fields.get("event_type")}
        if self.logged > self.limit:
            logger.warning("%s anomalies: more in this session are counted in relay_anomalies_total, not logged",
                           source, extra=extra)
        elif fields.get("internal"):   # the engine's own failure
            logger.error("%s", fields.get("message"), extra=extra)
        else:
            logger.warning("%s anomaly: %s", source, fields.get("message"), extra=extra)


def log_notice(logger: logging.Logger, notice: Notice, *, anomalies: AnomalyLog | None = None,
               **context: Any) -> None:
    """The log line for an engine notice, the same for every edge: one `tool call` line per
    answered (or abandoned, skipped) call, a warning when the upstream refused one of the relay's
    events or a tool held the event loop, warnings for anomalies when the edge keeps an `AnomalyLog` for the session (else debug
    lines), and debug lines for errors sent to a client. `context` names the session
    (`session_id`, and the sidecar's `realtime_call_id`)."""
    fields = notice.fields
    if notice.kind == TOOL_CALL:
        # `name` is reserved by logging: the tool's name is logged as `tool`; what the assistant
        # is to say is content, like outputs: recordings keep it, logs do not
        logger.info("tool call", extra={**context, **{"tool" if key == "name" else key: value
                                                      for key, value in fields.items()
                                                      if key not in _NOT_LOGGED}})
    elif notice.kind == "upstream_error":
        logger.warning("the upstream refused a relay event: %s", fields.get("message"),
                       extra={**context, "what": fields.get("what"), "call_id": fields.get("call_id"),
                              "code": fields.get("code")})
    elif notice.kind == "mcp_approval":
        logger.info("MCP approval %s: %s of %s", "given" if fields.get("approve") else "refused",
                    fields.get("name"), fields.get("server_label"),
                    extra={**context, "tool": fields.get("name"), "server_label": fields.get("server_label"),
                           "approve": fields.get("approve")})
    elif notice.kind == "loop_blocked":
        logger.warning("tool %s held the event loop for %.3f s, stalling every session: blocking code "
                       "belongs in a sync tool (it runs in a thread)", fields.get("name"), fields.get("seconds"),
                       extra={**context, "tool": fields.get("name"), "call_id": fields.get("call_id"),
                              "seconds": fields.get("seconds")})
    elif notice.kind == "limit":   # once per session and limit: the client's later events past it are refused
        logger.warning("a client reached a session limit (%s at most: %s); its events past it are refused",
                       fields.get("limit"), fields.get("what"), extra={**context, "code": "session_limit_exceeded"})
    elif notice.kind == "anomaly" and anomalies is not None:
        anomalies.log(logger, fields, context)
    elif notice.kind in ("anomaly", "client_error"):
        logger.debug("%s: %s", notice.kind, fields.get("message"), extra={**context, "code": fields.get("code")})
