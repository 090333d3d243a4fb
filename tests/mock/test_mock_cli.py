"""`relay mock` as a user runs it: a subprocess that prints its URL first and stops on a signal."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from pathlib import Path

import pytest

from websockets.asyncio.client import connect

from relay.cli import build_parser, main
from tests.support.paths import REPO
from tests.support.processes import relay_process


async def test_relay_mock_serves_until_terminated(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": {"say": "Hello from the CLI."}, "options": {"audio_chunks": 1}}))
    async with relay_process("mock", "--port", "0", "--script", str(script), "--dialect", "openai",
                             env={"PYTHONPATH": str(REPO)}, stdout=True) as process:
        assert process.stdout is not None
        try:
            url = (await asyncio.wait_for(process.stdout.readline(), 10)).decode().strip()
            rest_url = (await asyncio.wait_for(process.stdout.readline(), 5)).decode().strip()
            assert url.startswith("ws://127.0.0.1:") and url.endswith("/v1/realtime")
            assert rest_url.startswith("http://127.0.0.1:") and rest_url.endswith("/v1")
            async with connect(f"{url}?model=gpt-realtime") as ws:
                assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "session.created"
                await ws.send(json.dumps({"type": "response.create", "response": {"output_modalities": ["text"]}}))
                while (event := json.loads(await asyncio.wait_for(ws.recv(), 5)))["type"] != "response.done":
                    pass
            assert event["response"]["output"][0]["content"][0]["text"] == "Hello from the CLI."
        finally:
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 10) == 0


async def test_relay_mock_refuses_a_bad_script_in_one_line(tmp_path: Path) -> None:
    script = tmp_path / "bad.json"
    script.write_text('{"rules": [{"say": "no match field"}]}')
    async with relay_process("mock", "--port", "0", "--script", str(script), env={"PYTHONPATH": str(REPO)},
                             stdout=True) as process:
        _, stderr = await asyncio.wait_for(process.communicate(), 10)
    [line] = stderr.decode().splitlines()
    assert process.returncode == 2
    # one line that names the script and where in it the problem is (pydantic words the rest)
    assert json.loads(line)["msg"].startswith(f"cannot use script {script}: rules.0.match: ")


def _taken_port_after_a_free_one() -> tuple[socket.socket, int]:
    """A listening socket on some port P + 1 while P itself is free (as far as one can tell)."""
    for _ in range(20):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        below = taken.getsockname()[1] - 1
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", below))
            return taken, below
        except OSError:
            taken.close()
    raise AssertionError("no free port below a free port")


def test_a_taken_rest_port_is_named_with_the_option_that_moves_it(
        capsys: pytest.CaptureFixture[str], restore_logging: None) -> None:
    """`relay mock --port P` while P + 1 is taken: the REST API's port clashed, not P."""
    for _ in range(3):   # P might be taken by someone else meanwhile: then try another pair
        taken, port = _taken_port_after_a_free_one()
        with taken:
            status = main(["mock", "--port", str(port)])
        [line] = capsys.readouterr().err.splitlines()
        message = json.loads(line)["msg"]
        if "the WebSocket API" not in message:
            break
    assert status == 2
    assert message.startswith(f"cannot listen on 127.0.0.1:{port + 1} for the fake REST API: ")
    assert "--port + 1" in message and "--rest-port" in message

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["mock", "--port", "0", "--rest-port", str(taken.getsockname()[1])]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert json.loads(line)["msg"].endswith("choose another --rest-port")


def test_mock_is_a_relay_subcommand() -> None:
    args = build_parser().parse_args(["mock", "--port", "0", "--dialect", "foundry"])
    assert (args.port, args.dialect, args.host, args.script, args.rest_port) == (0, "foundry", "127.0.0.1", None, None)
