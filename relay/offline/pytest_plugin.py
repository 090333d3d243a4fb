"""relay's pytest plugin, registered through the `pytest11` entry point: installing realtime-relay
is enough. Recorded sessions become tests of your tools.

Every recording in a folder, one test item each (named after the file), failing with the
divergence report when the tools now answer differently:

    pytest --relay-recordings recordings/ --relay-tools my_app/tools.py

One recording in a test of your own, with the `relay_replay` fixture:

    def test_the_refund_call_still_answers(relay_replay):
        result = relay_replay("recordings/refund.jsonl", tools=["my_app/tools.py"])
        relay_replay.check(result)                      # fails the test with the report
        assert result.calls[0].outcome == "ok"

An expectations file beside a recording (`refund.expect.yaml`, `.toml` or `.json`: see
`relay.offline.expectfile`) is applied to its replay: steps walked over the replayed session and
the invariants it asks for; its `promotion` (blocking, nightly, manual) marks the item, so that
`pytest -m blocking` runs the recordings CI must never break. A Python test next to the recordings
does the same in code: `relay.testing.expect(relay_replay("recordings/refund.jsonl"))`. A failing
item ends with the command that shows the session: `relay inspect ...`.

What passes: a relay recording (written by `relay serve --record`) passes when the relay under
test sends what was recorded: no divergence. A plain event log (server events only, like the
shared real sessions) has no relay sends to compare with, so it passes when no call the tools
ran on the recorded arguments failed (`CallOutcome.failed`: a handler error, bad arguments, a
timeout, an unknown tool, or a call still unanswered when the replay ended); calls the tools do
not own are left to the client as always. Either kind fails when
the engine met an internal error.

This module is imported by every pytest run in an environment where the package is installed:
it imports nothing of the relay until a replay is asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from relay.errors import RelayError

if TYPE_CHECKING:
    from relay.offline.replay import ReplayResult
    from relay.tools import ToolRegistry

RECORDINGS_OPTION = "--relay-recordings"
TOOLS_OPTION = "--relay-tools"
EXPLORE_OPTION = "--relay-explore"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("relay", "relay: recorded realtime sessions as tests")
    group.addoption(RECORDINGS_OPTION, action="append", default=[], metavar="DIR",
                    help="replay every recording (*.jsonl) under DIR as its own test item (repeatable)")
    group.addoption(TOOLS_OPTION, action="append", default=[], metavar="SPEC",
                    help="the tools replays run: a .py file or a module, as `relay --tools` (repeatable)")
    group.addoption("--relay-gate-timeout", type=float, default=None, metavar="SECONDS",
                    help="virtual seconds a replay waits for a handler before calling a recorded send missing")
    group.addoption("--relay-mcp-answers", choices=("recording", "live"), default="recording",
                    help="answer recorded MCP tools from the recording (default) or from the live servers of "
                         "--relay-mcp-config")
    group.addoption(EXPLORE_OPTION, type=int, default=0, metavar="BUDGET",
                    help="also explore each recording under up to BUDGET schedules (relay explore): one more "
                         "item per recording, failing with the smallest schedule that breaks an invariant")
    group.addoption("--relay-mcp-config", default=None, metavar="FILE",
                    help="the MCP servers live answers come from, as `relay --mcp-config` (docs/mcp.md)")


# ---- judging a replay ------------------------------------------------------------------------

def problems_of(result: ReplayResult) -> list[str]:
    """Why `result` does not pass (see the module's docstring); empty when it does."""
    from relay.engine.calls import CallOutcome

    problems = [f"engine {error}" for error in result.internal_errors]
    if result.kind == "relay":
        return problems + [divergence.describe() for divergence in result.divergences]
    for call in result.calls:
        if CallOutcome.means_failure(call.outcome) and not call.skipped:
            problems.append(f"{call.name} {call.call_id} failed ({call.outcome}) on the recorded arguments "
                            f"{call.arguments}: {call.output}")
    return problems


def failure_report(result: ReplayResult, problems: Sequence[str], tool_specs: Sequence[str] = ()) -> str:
    """What a failing item says: the problems, what the tools answered, and the command that
    shows the whole replay (with `tool_specs`, the `--relay-tools` given)."""
    from relay.offline.replaying import counted

    what = (counted(len(problems), "divergence") + " from the recording" if result.kind == "relay"
            else counted(len(problems), "failed call"))
    lines = [f"replay of {result.path.name} ({result.kind}): {what}"]
    for problem in problems:
        lines += ["  " + line for line in problem.splitlines()]
    if result.calls:
        lines.append("calls the tools answered:")
        for call in result.calls:
            output = call.output if call.output is None or len(call.output) <= 120 else call.output[:117] + "..."
            lines.append(f"  {call.name} {call.call_id}: {call.outcome} -> {output}")
    tools = " ".join(f"--tools {spec}" for spec in tool_specs) or "--tools ..."
    lines.append(f"the whole report: relay replay {result.path} {tools}")
    lines.append(f"look at the session: relay inspect {result.path}")
    return "\n".join(lines)


class ReplayFailed(RelayError):
    """A recording that does not pass; the message is the report."""


# ---- the fixture -----------------------------------------------------------------------------

class RelayReplay:
    """The `relay_replay` fixture: `relay_replay(path, tools=...)` replays one recording and
    returns the `ReplayResult`; `check(result)` fails the test with the report when it does not
    pass. `tools` defaults to the `--relay-tools` given to pytest."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config

    def __call__(self, recording: str | Path, tools: Any = None, **options: Any) -> ReplayResult:
        from relay.offline.replay import replay

        return replay(recording, self._tools(tools), **self._options(options))

    async def replay_async(self, recording: str | Path, tools: Any = None, **options: Any) -> ReplayResult:
        """The same, from an async test."""
        from relay.offline.replay import replay_async

        return await replay_async(recording, self._tools(tools), **self._options(options))

    def check(self, result: ReplayResult) -> ReplayResult:
        problems = problems_of(result)
        if problems:
            pytest.fail(failure_report(result, problems, self._config.getoption(TOOLS_OPTION)), pytrace=False)
        return result

    def _tools(self, tools: Any) -> Any:
        return tool_registry_for(self._config) if tools is None else tools

    def _options(self, options: dict[str, Any]) -> dict[str, Any]:
        return {**replay_options(self._config), **options}


def replay_options(config: pytest.Config) -> dict[str, Any]:
    """The replay options pytest's command line sets: the gate timeout, where MCP answers come from."""
    options: dict[str, Any] = {}
    gate_timeout = config.getoption("--relay-gate-timeout")
    if gate_timeout is not None:
        options["gate_timeout"] = gate_timeout
    if config.getoption("--relay-mcp-answers") == "live":
        from relay.errors import ConfigError
        from relay.tools.mcp_config import read_config_file

        config_file = config.getoption("--relay-mcp-config")
        if config_file is None:
            raise pytest.UsageError("--relay-mcp-answers live needs --relay-mcp-config FILE")
        try:
            options["mcp"] = read_config_file(config_file)
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
        options["mcp_answers"] = "live"
    return options


@pytest.fixture
def relay_replay(pytestconfig: pytest.Config) -> RelayReplay:
    """Replay recorded sessions against tools; see `relay.pytest_plugin`."""
    return RelayReplay(pytestconfig)


# ---- one item per recording ------------------------------------------------------------------

_REGISTRY = pytest.StashKey["ToolRegistry"]()


def tool_registry_for(config: pytest.Config) -> ToolRegistry:
    """The `--relay-tools` registry, loaded once per run (module names are looked up from the
    directory pytest was started in too, as the relay command does)."""
    registry = config.stash.get(_REGISTRY, None)
    if registry is None:
        from relay.errors import ConfigError
        from relay.tools.sources import tool_registry

        started_in = str(config.invocation_params.dir)
        if started_in not in sys.path:
            sys.path.append(started_in)
        try:
            registry = tool_registry(config.getoption(TOOLS_OPTION))
        except ConfigError as exc:
            raise pytest.UsageError(f"{TOOLS_OPTION}: {exc}") from None
        config.stash[_REGISTRY] = registry
    return registry


_DIRECTORIES = pytest.StashKey[list[Path]]()


PROMOTION_MARKERS = {
    "blocking": "a recording whose replay must pass before a change lands (relay expectations file)",
    "nightly": "a recording replayed in the nightly run (relay expectations file)",
    "manual": "a recording replayed on demand (relay expectations file)",
}


def pytest_configure(config: pytest.Config) -> None:
    """Each `--relay-recordings DIR` is collected like a path given on the command line (beside
    the tests pytest collects anyway), and the tools are loaded now: a bad one is a usage error.
    The promotion levels are markers (`-m blocking`)."""
    for level, meaning in PROMOTION_MARKERS.items():
        config.addinivalue_line("markers", f"{level}: {meaning}")
    directories = []
    for directory in config.getoption(RECORDINGS_OPTION):
        resolved = (config.invocation_params.dir / directory).resolve()
        if not resolved.is_dir():
            raise pytest.UsageError(f"{RECORDINGS_OPTION} {directory}: not a directory")
        directories.append(resolved)
        if directory not in config.args:
            config.args.append(directory)
    config.stash[_DIRECTORIES] = directories
    if directories:
        tool_registry_for(config)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A recording under one of the directories, by the path pytest walked (which keeps the
    symlinks it came through: a directory linked from elsewhere) or by where it really is."""
    if file_path.suffix != ".jsonl":
        return None
    directories = parent.config.stash.get(_DIRECTORIES, ())
    if not directories:
        return None
    real = file_path.resolve()
    if any(file_path.is_relative_to(d) or real.is_relative_to(d) for d in directories):
        return RecordingFile.from_parent(parent, path=file_path)
    return None


class RecordingFile(pytest.File):
    """A recording under a `--relay-recordings` directory: one item, its replay (with the
    expectations file beside it, if any, and the marker of its promotion level)."""

    def collect(self) -> Iterator[RecordingItem]:
        from relay.offline.expectfile import (
            ExpectationsFileError,
            find_expectations,
            load_expectations,
        )

        item = RecordingItem.from_parent(self, name="replay")
        found = find_expectations(self.path)
        if found is not None:
            try:
                item.expectations = load_expectations(found)
            except ExpectationsFileError as exc:
                item.unusable = str(exc)
            else:
                if item.expectations.promotion:
                    item.add_marker(item.expectations.promotion)
        yield item
        if self.config.getoption(EXPLORE_OPTION) > 0:
            yield ExploreItem.from_parent(self, name="explore")


class RecordingItem(pytest.Item):
    """One recording replayed against the `--relay-tools`; fails with the report (see the module
    docstring for what passes)."""

    expectations: Any = None
    unusable: str | None = None

    def runtest(self) -> None:
        from relay.offline.expect import ExpectationFailed
        from relay.offline.replay import replay
        from relay.offline.timeline import Timeline
        from relay.recording.format import RecordingError

        if self.unusable is not None:
            raise ReplayFailed(self.unusable)
        try:
            result = replay(self.path, tool_registry_for(self.config), **replay_options(self.config))
        except (OSError, RecordingError) as exc:
            raise ReplayFailed(f"cannot replay {self.path}: {exc}") from None
        problems = problems_of(result)
        if problems:
            raise ReplayFailed(failure_report(result, problems, self.config.getoption(TOOLS_OPTION)))
        if self.expectations is not None:
            try:
                self.expectations.apply(Timeline.from_replay(result))
            except ExpectationFailed as failed:
                raise ReplayFailed(f"replay of {self.path.name} against {self.expectations.path.name}:\n"
                                   f"{failed}") from None

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ReplayFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"replay of {self.path.name}"


class ExploreItem(pytest.Item):
    """One recording explored (`--relay-explore BUDGET`, relay/offline/explore.py): its caller's
    lines and its model's responses under up to BUDGET schedules; fails with the findings."""

    def runtest(self) -> None:
        from relay.offline.explore import NothingToExplore, explore
        from relay.offline.explore_input import from_recording

        try:
            conversation = from_recording(self.path, tool_registry_for(self.config))
            result = explore(conversation, budget=self.config.getoption(EXPLORE_OPTION),
                             tools_arg=" --tools ".join(self.config.getoption(TOOLS_OPTION)))
        except NothingToExplore as nothing:   # a session with no call of the tools: its replay item stands
            pytest.skip(str(nothing))
        if not result.ok:
            raise ReplayFailed(f"exploring {self.path.name}:\n{result.report()}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ReplayFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"exploration of {self.path.name}"
