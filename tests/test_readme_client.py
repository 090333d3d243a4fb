"""The `relay serve` example of the README and of docs/getting-started.md runs as written (issue 20,
point 7: its client snippet was not runnable). The tool, the mock script and the client are the
files under docs/examples/serve/ that the page includes and the README shows; `relay serve` runs as
the README says, with port 0, and the client, pointed at the port the relay got, runs here with the
official SDK: its module code as written, its `main()` awaited on this test's loop instead of
`asyncio.run` (a second interpreter would spend seconds importing the SDK)."""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from relay.mock import MockScript, MockUpstream
from tests.support.paths import REPO
from tests.support.processes import next_log_line, relay_process
from tests.support.snippets import check_page_includes_its_examples

RELAY_TOKEN = "readme-relay-token"
EXAMPLES = REPO / "docs" / "examples" / "serve"


SERVE = "relay serve --upstream ws://127.0.0.1:8765/v1/realtime --tools weather_tools"


def block_after(text: str, marker: str, language: str = "python") -> str:
    """The first fenced block of `language` after `marker`."""
    rest = text[text.index(marker):]
    found = re.search(rf"```{language}\n(.*?)```", rest, re.S)
    assert found is not None, marker
    return found.group(1)


def indented_after(text: str, marker: str, block: int = 1) -> str:
    """The indented block (4 spaces) right after `marker`'s paragraph (`block`: the n-th of the
    indented blocks that follow it one after the other)."""
    rest = text[text.index(marker):].split("\n\n", block)[block]
    return "\n".join(line[4:] for line in rest.split("\n\n", 1)[0].splitlines())


async def test_the_readme_client_gets_the_tool_result_spoken(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "weather_tools.py").write_text((EXAMPLES / "weather_tools.py").read_text())
    script = (EXAMPLES / "script.json").read_text()
    client = (EXAMPLES / "weather_client.py").read_text()
    assert "ws://127.0.0.1:8000/v1" in client and client.rstrip().endswith("\nasyncio.run(main())")
    monkeypatch.setenv("RELAY_AUTH_TOKEN", RELAY_TOKEN)
    # `relay mock --script script.json`, in this process; `relay serve` as the README runs it (the
    # dialect inferred from the upstream's path), with the port the mock got
    async with MockUpstream(script=MockScript.model_validate_json(script)) as mock:
        assert mock.url.endswith("/v1/realtime")
        async with relay_process("serve", "--upstream", mock.url, "--tools", "weather_tools",
                                 "--port", "0", cwd=tmp_path, env={"PYTHONPATH": str(REPO),
                                                                  "RELAY_AUTH_TOKEN": RELAY_TOKEN}) as relay:
            assert relay.stderr is not None
            listening = await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), [])
            assert listening["auth"] == "token"
            port = re.search(r":(\d+)/", listening["url"]).group(1)   # type: ignore[union-attr]
            # the client as its own program would run it, minus `asyncio.run`: this test's loop runs it
            program: dict[str, Any] = {"__name__": "weather_client"}
            module = client.rstrip().removesuffix("asyncio.run(main())")
            exec(compile(module.replace("ws://127.0.0.1:8000/v1", f"ws://127.0.0.1:{port}/v1"),
                         "weather_client.py", "exec"), program)
            await asyncio.wait_for(program["main"](), 15)
            relay.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(relay.wait(), 10) == 0
    assert capsys.readouterr().out.splitlines() == ["Let me check.", "It is sunny and 21 degrees in Paris."]
    [session] = mock.sessions
    assert [item["name"] for item in session.items if item["type"] == "function_call"] == ["get_weather"]


def test_the_readme_and_the_page_show_the_example_files_and_the_commands_the_test_runs() -> None:
    readme = (REPO / "README.md").read_text()
    assert block_after(readme, "Put a tool in `weather_tools.py`") == (EXAMPLES / "weather_tools.py").read_text()
    assert block_after(readme, "and a script for the mock model", "json") == (EXAMPLES / "script.json").read_text()
    for text in (readme, (REPO / "docs" / "getting-started.md").read_text()):
        commands = indented_after(text, "Then run the mock model and the relay").splitlines()
        assert commands == ["relay mock --port 8765 --script script.json &", SERVE]
    check_page_includes_its_examples(REPO / "docs" / "getting-started.md", EXAMPLES)
