"""`relay mock` as a user runs it: a subprocess that prints its URL first and stops on a signal."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

from websockets.asyncio.client import connect

from relay.cli import build_parser
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


async def test_relay_mock_refuses_a_bad_script(tmp_path: Path) -> None:
    script = tmp_path / "bad.json"
    script.write_text('{"rules": [{"say": "no match field"}]}')
    async with relay_process("mock", "--port", "0", "--script", str(script), env={"PYTHONPATH": str(REPO)},
                             stdout=True) as process:
        _, stderr = await asyncio.wait_for(process.communicate(), 10)
    assert process.returncode == 2 and b"cannot use script" in stderr


def test_mock_is_a_relay_subcommand() -> None:
    args = build_parser().parse_args(["mock", "--port", "0", "--dialect", "foundry"])
    assert (args.port, args.dialect, args.host, args.script, args.rest_port) == (0, "foundry", "127.0.0.1", None, None)
