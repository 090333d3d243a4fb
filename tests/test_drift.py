"""scripts/drift.py: the newest-releases pass names the package whose newer release broke the suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import script_module

drift = script_module("drift")

ROOT = Path(__file__).resolve().parent.parent


def test_the_lock_is_read_with_its_markers_for_this_interpreter() -> None:
    lock = [
        "# a comment",
        "anyio==4.9.0",
        "    # via realtime-relay (pyproject.toml)",
        "Typing_Extensions==4.15.0 ; python_full_version < '3.13'",
        "uvloop==0.22.1 ; sys_platform != 'win32'",
        "openai[realtime]==3.63.0",
    ]
    pinned = drift.read_lock(lock, applies=lambda marker: "3.13" not in marker)
    assert pinned == {"anyio": "4.9.0", "uvloop": "0.22.1", "openai": "3.63.0"}


def test_a_line_that_is_not_a_pin_is_unusable_input() -> None:
    try:
        drift.read_lock(["websockets>=14"], applies=lambda marker: True)
    except ValueError as exc:
        assert "websockets>=14" in str(exc)
    else:
        raise AssertionError("a range in a lock must be refused")


def test_the_repository_locks_pin_every_line_and_hold_the_runtime_to_the_dev_versions() -> None:
    dev = drift.read_lock((ROOT / "requirements/dev.lock").read_text().splitlines(), lambda marker: True)
    run = drift.read_lock((ROOT / "requirements/run.lock").read_text().splitlines(), lambda marker: True)
    assert {"websockets", "pydantic", "anyio", "pytest", "openai"} <= dev.keys()
    assert run.items() <= dev.items()


def test_drift_lists_what_differs_from_the_lock_but_not_the_project_itself() -> None:
    locked = {"websockets": "17.3", "anyio": "4.9.0", "realtime-relay": "0.1"}
    installed = {"websockets": "17.4", "anyio": "4.9.0", "realtime-relay": "0.2", "extra": "1"}
    assert drift.drifted(locked, installed) == [drift.Drift("websockets", "17.3", "17.4")]


def test_the_package_whose_locked_version_makes_the_failures_pass_is_named_and_all_are_restored() -> None:
    drifts = [drift.Drift("anyio", "4.8", "4.9"), drift.Drift("websockets", "17.3", "17.4"),
              drift.Drift("zz", "1", "2")]
    environment = {d.name: d.installed for d in drifts}
    pins = []

    def pin(name: str, version: str) -> None:
        pins.append((name, version))
        environment[name] = version

    found = drift.culprits(drifts, pin, failing_pass=lambda: environment["websockets"] == "17.3")
    assert found == [drifts[1]]
    assert environment == {"anyio": "4.9", "websockets": "17.4", "zz": "2"}
    assert len(pins) == 6
    lines = drift.report(drifts, ["tests/a.py::t"], found)
    assert "broke: websockets 17.4 (the failing tests pass with websockets 17.3, the locked version)" in lines


def test_failures_no_single_package_explains_are_said_to_be_so() -> None:
    drifts = [drift.Drift("anyio", "4.8", "4.9")]
    found = drift.culprits(drifts, lambda name, version: None, failing_pass=lambda: False)
    lines = drift.report(drifts, ["tests/a.py::t"], found)
    assert found == [] and any(line.startswith("no single package explains") for line in lines)


def test_without_failures_the_report_lists_the_drift_and_the_exit_is_zero(tmp_path: Path) -> None:
    lock = tmp_path / "dev.lock"
    lock.write_text("pytest==0.0.1\n")
    assert drift.main(["--lock", str(lock), "--failed"]) == 0


def test_an_unreadable_lock_is_unusable_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert drift.main(["--lock", str(tmp_path / "missing.lock")]) == 2
    assert capsys.readouterr().err.startswith("drift: cannot read the lock")


def test_check_finds_a_package_at_another_version_than_the_lock(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "dev.lock"
    lock.write_text("".join(f"{name}=={version}\n" for name, version in drift.installed_versions().items()
                            if name != "pytest") + "pytest==0.0.1\n")
    assert drift.main(["--lock", str(lock), "--check"]) == 1
    assert "pytest 0.0.1 ->" in capsys.readouterr().out


def test_check_finds_a_package_the_lock_does_not_pin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "dev.lock"
    lock.write_text("".join(f"{name}=={version}\n" for name, version in drift.installed_versions().items()
                            if name != "pytest"))
    assert drift.main(["--lock", str(lock), "--check"]) == 1
    assert "not in the lock (1): pytest" in capsys.readouterr().out


def test_check_passes_an_environment_that_holds_exactly_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "dev.lock"
    lock.write_text("".join(f"{name}=={version}\n" for name, version in drift.installed_versions().items()))
    assert drift.main(["--lock", str(lock), "--check"]) == 0


def test_the_installer_tools_and_the_project_are_not_unlocked_packages() -> None:
    installed = {"pip": "24.0", "setuptools": "70.0", "wheel": "0.43", drift.OWN_DISTRIBUTION: "1.0", "anyio": "4.0"}
    assert drift.unlocked({}, installed) == ["anyio"]
