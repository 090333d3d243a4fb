"""`relay --help` and `relay --version` start at once: they import the command line's own module
and nothing of the commands (issue 30: importing everything made them take 0.6-0.8 s, and a
sidecar started per call paid that before it could attach). Checked by what they import, never by
a clock; scripts/bench_startup.py measures the time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("relay.mock", "relay.inspector", "relay.edges", "relay.engine", "relay.tools", "starlette", "uvicorn",
         "prometheus_client", "opentelemetry", "websockets", "pydantic", "httpx")


def modules_after(*argv: str) -> list[str]:
    """The modules imported by `relay ARGV` (run as the console script runs it), by prefix."""
    code = ("import sys, json, contextlib, io\n"
            "from relay.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    try:\n"
            f"        main({list(argv)!r})\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], []])
def test_the_top_level_help_and_version_import_nothing_heavy(argv: list[str]) -> None:
    loaded = modules_after(*argv)
    assert [m for m in loaded if m.startswith(HEAVY)] == []


def test_a_command_imports_its_own_module_and_not_the_others() -> None:
    loaded = modules_after("export", "--help")
    assert "relay.cli.export" in loaded
    others = ("relay.cli.serve", "relay.cli.attach", "relay.cli.sidecar", "relay.cli.mock", "relay.cli.demo",
              "relay.cli.inspect", "relay.mock", "relay.inspector", "starlette", "uvicorn", "prometheus_client")
    assert [m for m in loaded if m.startswith(others)] == []


@pytest.mark.parametrize("command", ["attach", "replay", "export"])
def test_a_command_that_serves_no_page_imports_no_web_server_and_no_inspector(command: str) -> None:
    """`relay attach` is started per call by a webhook and must connect before the caller speaks:
    the live inspector (Starlette, uvicorn) is imported only with `--inspector`."""
    code = (f"import sys, json\nimport relay.cli.{command}\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(done.stdout)
    unwanted = ("relay.inspector", "relay.mock", "starlette", "uvicorn", "prometheus_client", "opentelemetry.sdk")
    assert [m for m in loaded if m.startswith(unwanted)] == []
