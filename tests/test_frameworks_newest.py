"""scripts/frameworks_newest.py: which voice framework has a release newer than its lock pins, as
`scripts/frameworks --newest` and CI's report-only pass on the frameworks' newest releases use it.
The index is replaced by canned `pip index versions` output; the .in and .lock files are ours."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import REPO, script_module


newest = script_module("frameworks_newest")
INDEX = "livekit-agents (1.9.0)\nAvailable versions: 1.9.0rc1, 1.8.10, 1.8.9, 1.10.0a1, 0.12.4\n"


def test_the_newest_final_release_is_numeric_not_textual() -> None:
    assert newest.newest_release(INDEX) == "1.8.10"
    assert newest.is_newer("1.8.10", "1.8.9") and not newest.is_newer("1.8.9", "1.8.9")
    assert newest.newest_release("WARNING: nothing here\n") is None


def test_the_framework_and_its_locked_version_come_from_our_files() -> None:
    for name in ("pipecat", "livekit", "agents"):
        in_text = (REPO / "requirements" / "frameworks" / f"{name}.in").read_text()
        distribution, extras = newest.framework_distribution(in_text)
        locked = newest.locked_version((REPO / "requirements" / "frameworks" / f"{name}.lock").read_text(),
                                       distribution)
        assert newest.release_key(locked) is not None, (name, locked)
    assert newest.framework_distribution("# c\nlivekit-agents[openai]==1.8.9\n") == ("livekit-agents", "[openai]")
    with pytest.raises(ValueError):
        newest.locked_version("aiohttp==3.0\n", "livekit-agents")


def locked_release(name: str) -> tuple[str, str, str]:
    """A framework's distribution, extras and the version its lock pins."""
    folder = REPO / "requirements" / "frameworks"
    distribution, extras = newest.framework_distribution((folder / f"{name}.in").read_text())
    return distribution, extras, newest.locked_version((folder / f"{name}.lock").read_text(), distribution)


def test_only_a_framework_with_a_newer_release_is_listed(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    livekit, extras, locked = locked_release("livekit")
    parts = locked.split(".")
    newer = ".".join([*parts[:-1], str(int(parts[-1]) + 1)])
    others = {locked_release(name)[0]: locked_release(name)[2] for name in ("pipecat", "agents")}

    def index(distribution: str) -> str:
        if distribution == livekit:
            return f"Available versions: {newer}rc1, {newer}, {locked}\n"
        return f"Available versions: {others[distribution]}\n"

    monkeypatch.setattr(newest, "index_versions", index)
    assert newest.main(["pipecat", "livekit", "agents"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"livekit {livekit} {locked} {newer} {livekit}{extras}=={newer}"]
    assert "pipecat: the lock holds the newest release" in err and "agents: the lock holds" in err


def test_an_unknown_framework_is_unusable_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert newest.main(["nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err
