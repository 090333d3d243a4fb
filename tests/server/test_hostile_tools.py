"""Tools that misbehave, in a real `relay serve` process: a handler that raises what ends a program
(`SystemExit`, `KeyboardInterrupt`, a bare `BaseException`) ends only its own call, whose output
is the error; the session and the process go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.mock import MockUpstream
from tests.support.clients import http_get, realtime_client
from tests.support.frames import function_call_outputs
from tests.support.keys import PROVIDER_KEY
from tests.support.processes import next_log_line, relay_process
from tests.support.relays import weather_turn

# (how the handler is written, what it raises, the error the model is told)
RAISING = {
    "sync SystemExit": ("def", "SystemExit(3)", "SystemExit: 3"),
    "sync KeyboardInterrupt": ("def", "KeyboardInterrupt", "KeyboardInterrupt"),
    "async KeyboardInterrupt": ("async def", "KeyboardInterrupt", "KeyboardInterrupt"),
    "async SystemExit": ("async def", "SystemExit(3)", "SystemExit: 3"),
    "sync BaseException": ("def", "BaseException('odd')", "BaseException: odd"),
    "async BaseException": ("async def", "BaseException('odd')", "BaseException: odd"),
    "async CancelledError of its own": ("async def", "asyncio.CancelledError('mine')", "CancelledError: mine"),
}


def tools_raising(kind: str, raised: str) -> str:
    """A tool file whose `get_weather` raises `raised` on its first call and answers after."""
    return (
        "import asyncio\nimport itertools\nfrom relay.tools import tool\n\ncalls = itertools.count()\n\n"
        f"@tool\n{kind} get_weather(city: str) -> str:\n"
        "    if next(calls) == 0:\n"
        f"        raise {raised}\n"
        "    return 'rainy'\n")


@pytest.mark.parametrize("kind, raised, error", RAISING.values(), ids=RAISING.keys())
async def test_a_tool_raising_what_ends_a_program_ends_only_its_call(
        weather_mock: MockUpstream, tmp_path: Path, kind: str, raised: str, error: str) -> None:
    (tmp_path / "weather_tools.py").write_text(tools_raising(kind, raised))
    log: list[str] = []
    async with relay_process("serve", "--port", "0", "--upstream", weather_mock.url, "--dialect", "openai",
                             "--tools", "weather_tools", cwd=tmp_path, env={"OPENAI_API_KEY": PROVIDER_KEY}) as relay:
        assert relay.stderr is not None
        listening = await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
        base = listening["url"].removesuffix("/v1/realtime")
        port = int(base.rsplit(":", 1)[1])
        async with realtime_client(base, token=None) as client, realtime_client(base, token=None) as other:
            await other.wait_type("session.created")
            failed = await weather_turn(client, says=error)   # the call is answered with the error
            assert failed["response"]["status"] == "completed"
            assert "rainy" in json.dumps(await weather_turn(client, says="found"))   # its session goes on
            assert "rainy" in json.dumps(await weather_turn(other, says="found"))    # and the others
        assert relay.returncode is None   # and the process
        assert (await http_get(port, "/healthz"))[0] == 200
    [first, second, third] = function_call_outputs(weather_mock)
    assert json.loads(first["output"]) == {"error": error}
    assert (second["output"], third["output"]) == ("rainy", "rainy")
