"""The pieces of `relay serve` that need no socket: upstream URLs and credentials, token refresh,
log formats and redaction, the metrics exposition, and the command line's refusals."""

from __future__ import annotations

import importlib.util
import io
import gc
import json
import logging
import socket
import subprocess
import sys
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from relay.cli import main
from relay.dialects import AZURE, FOUNDRY, OPENAI, OPENAI_BETA
from relay.engine import Notice
from relay.observe.logs import (
    UNREDACTABLE_LINE,
    JsonFormatter,
    RedactingLogger,
    TextFormatter,
    configure_logging,
    keep_out_of_logs,
)
from relay.observe.metrics import Metrics, TrafficTap
from relay.errors import REDACTED, ConfigError
from relay.recording.redact import Redactor
from relay.recording.taps import Taps
from relay.edges.upstream import (
    AccessToken,
    TokenCache,
    Upstream,
    display_host,
    key_from_environment,
    merged_url,
)
from tests.support.frames import ListRecorder
from tests.support.keys import PROVIDER_KEY
from tests.support.relays import application_log


@pytest.mark.parametrize("dialect", ["openai", "gemini"])
def test_a_providers_upstream_without_a_key_is_refused_by_the_library_too(
        dialect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only `relay serve`: an application that makes a RelayServer (or a sidecar) without the
    key is told at once, not by every session failing at the provider's door."""
    from relay.edges.serve import RelayServer, ServerConfig
    from relay.edges.sidecar import SidecarServer, SidecarServerConfig

    for variable in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ConfigError, match="no provider key for .*: set (OPENAI|GEMINI)_API_KEY"):
        RelayServer(ServerConfig(dialect=dialect))
    if dialect == "openai":
        with pytest.raises(ConfigError, match="no provider key for api.openai.com"):
            SidecarServer(SidecarServerConfig(webhook_secret="whsec_" + "c2VjcmV0" * 4))
    assert RelayServer(ServerConfig(dialect=dialect, api_key="sk-given")).credentials_warning is None
    local = RelayServer(ServerConfig(upstream="ws://127.0.0.1:9/v1/realtime", dialect=dialect))
    assert local.credentials_warning is None   # the mock, a local proxy
    gateway = RelayServer(ServerConfig(upstream="wss://gateway.example.com/v1/realtime", dialect=dialect))
    assert "connecting to gateway.example.com without credentials" in (gateway.credentials_warning or "")


def test_the_client_query_is_passed_on_without_credentials() -> None:
    url = merged_url("wss://res.openai.azure.com/openai/realtime?api-version=2024-10-01&deployment=a",
                     [("deployment", "b"), ("api-key", "client-secret"), ("model", "m")])
    parts = urlsplit(url)
    assert parts.path == "/openai/realtime"
    assert dict(parse_qsl(parts.query)) == {"api-version": "2024-10-01", "deployment": "b", "model": "m"}


def test_display_host_never_shows_user_info_or_query() -> None:
    assert display_host("wss://user:pw@api.openai.com/v1/realtime?key=x") == "api.openai.com"
    assert display_host("ws://127.0.0.1:9000/v1") == "127.0.0.1:9000"
    assert display_host("ws://[::1]:9000/v1") == "[::1]:9000"


def test_keys_come_from_the_dialects_variable() -> None:
    environ = {"OPENAI_API_KEY": "sk-openai", "AZURE_OPENAI_API_KEY": "az-key"}
    assert key_from_environment(OPENAI, environ) == "sk-openai"
    assert key_from_environment(AZURE, environ) == "az-key"
    assert key_from_environment(FOUNDRY, {}) is None


async def test_credentials_go_in_the_header_the_dialect_wants() -> None:
    upstream = Upstream("wss://x/v1/realtime", api_key="sk-1", max_frame_bytes=1, redactor=Redactor())
    assert await upstream.headers(OPENAI) == {"Authorization": "Bearer sk-1"}
    assert await upstream.headers(OPENAI_BETA) == {"OpenAI-Beta": "realtime=v1", "Authorization": "Bearer sk-1"}
    assert await upstream.headers(AZURE) == {"api-key": "sk-1"}

    async def entra() -> AccessToken:
        return AccessToken("entra-1", 10**12)

    with_token = Upstream("wss://x", api_key="sk-1", token_provider=entra, max_frame_bytes=1, redactor=Redactor())
    assert await with_token.headers(AZURE) == {"Authorization": "Bearer entra-1"}
    assert with_token.redactor("token entra-1") == f"token {REDACTED}"


async def test_tokens_are_reused_until_shortly_before_they_expire() -> None:
    now = [1000.0]
    issued: list[AccessToken] = []

    async def provider() -> AccessToken:
        token = AccessToken(f"t{len(issued)}", expires_on=now[0] + 3600)
        issued.append(token)
        return token

    cache = TokenCache(provider, refresh_margin=300, clock=lambda: now[0])
    assert await cache.token() == "t0"
    now[0] += 3000
    assert await cache.token() == "t0"
    now[0] += 301            # within the margin of the expiry: refreshed before it expires
    assert await cache.token() == "t1"
    assert len(issued) == 2


async def test_a_token_provider_returning_garbage_is_reported() -> None:
    async def provider() -> object:
        return 42

    with pytest.raises(TypeError, match="expected a str"):
        await TokenCache(provider).token()


def make_record(message: str, **fields: object) -> logging.LogRecord:
    record = logging.LogRecord("relay.server", logging.INFO, __file__, 1, message, None, None)
    record.__dict__.update(fields)
    return record


def test_json_log_lines_carry_the_extra_fields() -> None:
    line = JsonFormatter().format(make_record("tool call", session_id="rs_1", call_id="c1", ms=12.5))
    data = json.loads(line)
    assert data["msg"] == "tool call" and data["level"] == "info" and data["logger"] == "relay.server"
    assert (data["session_id"], data["call_id"], data["ms"]) == ("rs_1", "c1", 12.5)
    assert data["ts"].endswith("Z")


def test_text_log_lines_quote_values_with_spaces() -> None:
    line = TextFormatter().format(make_record("session end", reason="client went away", code=1000))
    assert line.endswith('INFO relay.server: session end reason="client went away" code=1000')


def test_the_redacting_logger_removes_secrets_from_websockets_debug_lines() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("relay.test.redaction")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        RedactingLogger(logger, Redactor(["sk-secret"])).debug("> %s: %s", "Authorization", "Bearer sk-secret")
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue() == f"> Authorization: Bearer {REDACTED}\n"


def test_configure_logging_quiets_the_connection_and_request_lines_of_libraries(restore_logging: None) -> None:
    narrators = ("relay.websocket.client", "websockets.server", "httpx", "httpx2", "httpcore2.http11",
                 "mcp.client.streamable_http")
    configure_logging("text", level="info", stream=io.StringIO())
    assert {logging.getLogger(name).getEffectiveLevel() for name in narrators} == {logging.WARNING}
    configure_logging("json", level="debug", stream=io.StringIO())
    assert {logging.getLogger(name).getEffectiveLevel() for name in narrators} == {logging.DEBUG}


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_every_line_leaves_out_the_secrets_a_runtime_keeps(fmt: str, restore_logging: None) -> None:
    """A library the relay gives no logger of its own logs a secret (httpx quotes an MCP server's
    URL, `?api_key=` and all): the formatter takes it out, in the message, the fields and a
    traceback alike, for as long as the redactor that knows it lives."""
    stream = io.StringIO()
    configure_logging(fmt, level="debug", stream=stream)
    redactor = Redactor(["unit-secret-24680"])
    keep_out_of_logs(redactor)
    url = "http://127.0.0.1:9/mcp?api_key=unit-secret-24680"
    logging.getLogger("httpx2").info('HTTP Request: POST %s "HTTP/1.1 200 OK"', url)
    try:
        raise ConnectionError(f"for url {url}")
    except ConnectionError:
        logging.getLogger("relay.test").exception("failed", extra={"url": url})
    redactor.add("later-token-67890")   # learned later: a refreshed token
    logging.getLogger("relay.test").info("token later-token-67890")
    text = stream.getvalue()
    assert "unit-secret-24680" not in text and "later-token-67890" not in text
    assert text.count(REDACTED) == 4, text   # the request line, the field, the traceback, the token
    del redactor
    gc.collect()
    logging.getLogger("relay.test").info("unit-secret-24680 is no secret once no runtime keeps it")
    assert "unit-secret-24680 is no secret" in stream.getvalue()


def test_a_library_line_leaves_out_the_secrets_whatever_handler_writes_it() -> None:
    """An application that logs with its own handler and formatter (`logging.basicConfig` at INFO)
    gets the narrating libraries' lines too, not through the relay's formatters: their records
    leave out the secrets a runtime keeps, as they are made, child loggers and tracebacks included.
    The application's own lines are its own: the relay does not touch them."""
    redactor = Redactor(["app-secret-13579"])
    keep_out_of_logs(redactor)
    url = "http://127.0.0.1:9/mcp?api_key=app-secret-13579"
    with application_log() as stream:
        logging.getLogger("httpx").info('HTTP Request: POST %s "HTTP/1.1 200 OK"', url)
        logging.getLogger("httpcore2.http11").info("send_request_headers.started url=%s", url)
        try:
            raise ConnectionError(f"for url {url}")
        except ConnectionError:
            logging.getLogger("mcp.client.streamable_http").exception("the request failed")
        logging.getLogger("httpx").info("a line with no secret: %d%%", 100)
        logging.getLogger("myapp").info("mine: %s", url)
    lines = stream.getvalue()
    library, _, own = lines.partition("myapp: ")
    assert "app-secret-13579" not in library
    assert library.count(REDACTED) == 3, library   # the request line, the child's line, the traceback
    assert "httpx: a line with no secret: 100%" in library
    assert own == f"mine: {url}\n"
    del redactor
    gc.collect()


def test_a_library_line_that_cannot_be_redacted_goes_without_its_text_and_its_call_goes_on() -> None:
    """Redaction runs inside the library's logging call: should it fail, the call still returns
    and the line is written without what it said, not with it."""
    class BrokenRedactor(Redactor):
        def text(self, value: str) -> str:
            raise RuntimeError("broken")

    redactor = BrokenRedactor(["broken-secret-97531"])
    keep_out_of_logs(redactor)
    try:
        with application_log() as stream:
            logging.getLogger("httpx").info("HTTP Request: POST %s", "http://127.0.0.1:9/?k=broken-secret-97531")
    finally:
        del redactor
        gc.collect()
    assert stream.getvalue() == f"httpx: {UNREDACTABLE_LINE}\n"


def test_the_exposition_escapes_labels_and_bounds_tool_names() -> None:
    metrics = Metrics()
    metrics.count_notice(Notice("tool_call", {"name": "get_weather", "outcome": "ok", "ms": 20.0}), {"get_weather"})
    metrics.count_notice(Notice("tool_call", {"name": 'made"up\ntool', "outcome": "unknown_tool", "ms": None}),
                         {"get_weather"})
    metrics.count_notice(Notice("upstream_error", {"code": 'bad "code"'}), ())
    metrics.session_started()
    metrics.session_started()
    text = metrics.render()
    assert 'relay_tool_calls_total{outcome="unknown_tool",tool="(unknown)"} 1.0' in text
    assert 'relay_tool_call_seconds_bucket{le="0.025",tool="get_weather"} 1.0' in text
    assert 'relay_tool_call_seconds_bucket{le="0.01",tool="get_weather"} 0.0' in text
    assert 'relay_errors_total{code="bad \\"code\\"",source="upstream"} 1.0' in text
    assert "relay_sessions_open 2.0" in text
    assert all(line.startswith("#") or " " in line for line in text.splitlines())


def test_the_traffic_tap_counts_frames_and_survives_a_broken_recording(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenWriter:
        def record(self, direction: str, frame: str | bytes) -> None:
            raise RuntimeError("disk on fire")

        def record_notice(self, kind: str, fields: dict[str, Any]) -> None:
            raise AssertionError("a dropped writer hears no more")

        def close(self, reason: str) -> None:
            raise AssertionError("a dropped writer is not closed")

    metrics = Metrics()
    taps = Taps(TrafficTap(metrics), BrokenWriter())
    taps.record("client>relay", '{"type":"x"}')
    taps.record("client>relay", "{}")
    taps.record_notice("tool_call", {})
    taps.close("done")
    assert metrics.frames["client>relay"] == 2 and metrics.frame_bytes["client>relay"] == 14
    assert [r.getMessage() for r in caplog.records] == [
        "a session recorder (BrokenWriter) failed recording a frame; it is dropped, the session goes on"]


def test_a_forwarded_frame_is_counted_both_ways_and_recorded_twice_by_a_plain_recorder(
        caplog: pytest.LogCaptureFixture) -> None:
    class BrokenWriter(ListRecorder):
        def record(self, direction: str, frame: str | bytes) -> None:
            raise RuntimeError("disk on fire")

    metrics, writer = Metrics(), ListRecorder()
    taps = Taps(TrafficTap(metrics), BrokenWriter(), writer)
    taps.record_forwarded("upstream>relay", "secret!", "relay>client", "[redacted]!")
    taps.record_forwarded("client>relay", "{}", "relay>upstream", "{}")
    taps.close("done")
    assert metrics.frames == {"upstream>relay": 1, "relay>client": 1, "client>relay": 1, "relay>upstream": 1}
    assert metrics.frame_bytes["upstream>relay"] == 7 and metrics.frame_bytes["relay>client"] == 11
    assert writer.frames == [("upstream>relay", "secret!"), ("relay>client", "[redacted]!"),
                             ("client>relay", "{}"), ("relay>upstream", "{}")]
    assert [r.getMessage() for r in caplog.records] == [
        "a session recorder (BrokenWriter) failed recording a frame; it is dropped, the session goes on"]


@pytest.mark.parametrize("argv, message", [
    (["--upstream", "https://api.openai.com/v1/realtime"], "ws:// or wss://"),
    (["--upstream", "ws://127.0.0.1:1/realtime"], "cannot infer the dialect"),   # no provider's path
    (["--host", "0.0.0.0", "--dialect", "openai"], "--auth-token"),
    (["--tools", "no_such_tools_module_here"], "no module named"),
    (["--auth-token", 'tok"en'], "may not hold quotes"),
])
def test_the_command_line_refuses_a_config_that_cannot_work(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        restore_logging: None) -> None:
    monkeypatch.delenv("RELAY_AUTH_TOKEN", raising=False)
    assert main(["serve", "--port", "0", *argv]) == 2
    assert message in capsys.readouterr().err


def test_import_relay_stays_light_and_serve_is_there_on_demand() -> None:
    code = ("import relay, sys; assert 'websockets' not in sys.modules and 'relay.edges.serve' not in sys.modules; "
            "assert callable(relay.serve) and 'relay.edges.serve' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_a_port_in_use_is_unusable_input_exit_status_2(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, restore_logging: None) -> None:
    monkeypatch.delenv("RELAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--dialect", "openai", "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


async def test_a_client_cannot_join_a_live_call_through_the_proxy() -> None:
    """The relay's key would open any live call of the account: `call_id` is refused at the
    handshake, before any upstream connection."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    from relay.mock import MockUpstream
    from relay.edges.serve import RelayServer, ServerConfig

    async with MockUpstream() as mock:
        call_id = mock.create_call()
        async with RelayServer(ServerConfig(upstream=mock.url, dialect="openai", port=0)) as server:
            with pytest.raises(InvalidStatus) as refused:
                async with connect(f"{server.url}?call_id={call_id}"):
                    pass
            assert refused.value.response.status_code == 400
            assert b"relay attach" in refused.value.response.body
        assert len(mock.find_session(call_id).connections) == 0


WORKERS_THAT_FAIL = """
import logging, sys
from relay.edges.process import run_workers
from relay.errors import UnusableInput

logging.basicConfig(stream=sys.stderr, format="%(message)s")

def broken(port):
    raise RuntimeError("no such thing")

def refused(port):
    raise UnusableInput("port taken")

assert run_workers("127.0.0.1", 0, 1, {worker}) == 1
"""


@pytest.mark.parametrize("worker", ["broken", "refused"])
def test_a_worker_that_fails_says_why_before_it_exits(worker: str) -> None:
    """A worker ends with os._exit, which prints no traceback: what made it fail is logged (in one
    line for unusable input, with its traceback for a fault). In a process of its own: forking
    the test runner, which may hold threads, could leave a lock held in the child."""
    done = subprocess.run([sys.executable, "-c", WORKERS_THAT_FAIL.format(worker=worker)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pid = done.stderr.split()[1].rstrip(":")
    if worker == "broken":
        assert done.stderr.startswith(f"worker {pid} failed\nTraceback")
        assert "RuntimeError: no such thing" in done.stderr
    else:
        assert done.stderr.splitlines() == [f"worker {pid}: port taken", f"worker {pid} exited with status 1"]
    assert done.stderr.endswith(f"worker {pid} exited with status 1\n")


STOPPED_THEN_SIGNALLED = """
import os, signal, sys
from relay.edges.process import run_until_signalled

async def work():
    return 0

async def on_signal(name, again):
    pass

status = run_until_signalled(work, on_signal, loop=sys.argv[1])
# SIG_IGN, not a handler of the closed loop's: the interpreter resets Python-level handlers to
# the default as it finalizes, and a signal then kills the process
print(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN, flush=True)
os.kill(os.getpid(), signal.SIGTERM)   # a late stop signal, as the process exits
sys.exit(status)
"""


SIGNALLED_THEN_STOPPED = """
import asyncio, json, os, signal, sys
from relay.edges.process import run_until_signalled

set_as = []   # every disposition given to a stop signal, in order
real_signal = signal.signal
def recording_signal(signum, handler):
    if signum in (signal.SIGTERM, signal.SIGINT):
        named = {signal.SIG_DFL: "SIG_DFL", signal.SIG_IGN: "SIG_IGN", signal.default_int_handler: "default"}
        set_as.append(named.get(handler, "handler"))
    return real_signal(signum, handler)
signal.signal = recording_signal   # asyncio's loop sets dispositions through the module too

received = []
stopped = asyncio.Event()

async def work():
    os.kill(os.getpid(), signal.SIGTERM)
    await stopped.wait()
    return 0

async def on_signal(name, again):
    received.append((name, again))
    stopped.set()

status = run_until_signalled(work, on_signal, loop=sys.argv[1])
print(json.dumps({"status": status, "received": received, "set_as": set_as}), flush=True)
"""


@pytest.mark.parametrize("loop", ["asyncio", pytest.param("uvloop", marks=pytest.mark.skipif(
    importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed: pip install 'realtime-relay[fast]'"))])
def test_a_stop_signal_is_handled_and_the_default_action_is_never_put_back(loop: str) -> None:
    # taking the loop's own handler away put the default action (death) back for an instant
    # before SIG_IGN replaced it, and a second SIGTERM in that gap killed a relay whose drain had
    # just ended (-15 in the cluster test, once in a full run)
    done = subprocess.run([sys.executable, "-c", SIGNALLED_THEN_STOPPED, loop], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["status"] == 0 and seen["received"] == [["SIGTERM", False]]
    # asyncio.Runner's own SIGINT handler may come first; the default never comes, SIG_IGN last
    assert "SIG_DFL" not in seen["set_as"] and "default" not in seen["set_as"], seen
    assert seen["set_as"][-2:] == ["SIG_IGN", "SIG_IGN"], seen


@pytest.mark.parametrize("loop", ["asyncio", pytest.param("uvloop", marks=pytest.mark.skipif(
    importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed: pip install 'realtime-relay[fast]'"))])
def test_a_stop_signal_after_the_work_is_done_does_not_kill_the_exiting_process(loop: str) -> None:
    # an orchestrator's second SIGTERM reached a relay whose drain had just ended: it died by the
    # signal (-15) instead of exiting 0 (seen in the cluster test)
    done = subprocess.run([sys.executable, "-c", STOPPED_THEN_SIGNALLED, loop], capture_output=True, text=True,
                          timeout=30)
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr
