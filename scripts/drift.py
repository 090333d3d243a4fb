"""Name the release that broke the suite: run by `scripts/test --newest` after a failing pass.

The newest-releases environment (.venv-newest) holds the newest versions pyproject.toml's ranges
allow; the lock (requirements/dev.lock) holds the versions that last passed. This script, run by
that environment's interpreter, lists every package whose installed version differs from the
lock, then puts each one back to its locked version alone (`pip install --no-deps`) and reruns
only the tests that failed: a package whose locked version makes them pass is the one that broke
them. Each package is restored to its newest version before the next is tried, so the
environment ends as it began.

    python scripts/drift.py --lock requirements/dev.lock [--failed NODEID ...]
    python scripts/drift.py --lock requirements/dev.lock --check

Exit status: 0 nothing drifted or nothing failed; 1 a finding (tests failed: the report names the
package, or says that no single package explains the failures); 2 unusable input. With `--check`
(run by `scripts/test --newest` before its pass) no test is looked at: 1 when this environment
differs from the lock (a package at another version, or one the lock does not pin), 0 when it
holds exactly the locked versions, so that the pass would repeat the lock's own.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

# The most packages tried one at a time, and the most failing tests rerun for each: a drift of
# more than this is reported as a list, not searched.
MAX_TRIED = 40
MAX_RERUN = 25
OWN_DISTRIBUTION = "realtime-relay"

_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;]+)\s*(?:;\s*(.+))?$")


def canonical(name: str) -> str:
    """A distribution's name as the index compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(lines: Iterable[str], applies: Callable[[str], bool]) -> dict[str, str]:
    """The pinned versions of a lock file that apply here, by canonical name. `applies` evaluates a
    requirement's environment marker for the running interpreter."""
    pinned: dict[str, str] = {}
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("-"):
            continue
        found = _REQUIREMENT.match(line)
        if found is None:
            raise ValueError(f"not a pinned requirement: {line!r}")
        name, version, marker = found.groups()
        if marker is None or applies(marker):
            pinned[canonical(name)] = version
    return pinned


@dataclass(frozen=True)
class Drift:
    name: str
    locked: str
    installed: str


def drifted(locked: dict[str, str], installed: dict[str, str]) -> list[Drift]:
    """The packages installed at another version than the lock's, in name order (the project's
    own distribution, installed editable, is not one of them)."""
    return [Drift(name, locked[name], installed[name])
            for name in sorted(locked)
            if name in installed and installed[name] != locked[name] and name != OWN_DISTRIBUTION]


# What a virtual environment holds beside what the lock pins, whichever releases it was made from.
INSTALLER_TOOLS = frozenset({"pip", "setuptools", "wheel"})


def unlocked(locked: dict[str, str], installed: dict[str, str]) -> list[str]:
    """The packages installed that the lock does not pin (a newer release's new dependency), in
    name order, less the installer's own tools and the project itself."""
    return sorted(name for name in installed
                  if name not in locked and name not in INSTALLER_TOOLS and name != OWN_DISTRIBUTION)


def culprits(drifts: Sequence[Drift], pin: Callable[[str, str], None],
             failing_pass: Callable[[], bool]) -> list[Drift]:
    """The drifted packages whose locked version alone makes the failing tests pass. `pin`
    installs a version of a package; `failing_pass` reruns the failing tests and says whether
    they pass."""
    found = []
    for drift in drifts[:MAX_TRIED]:
        pin(drift.name, drift.locked)
        try:
            if failing_pass():
                found.append(drift)
        finally:
            pin(drift.name, drift.installed)
    return found


def installed_versions() -> dict[str, str]:
    return {canonical(dist.metadata["Name"]): dist.version for dist in metadata.distributions()
            if dist.metadata["Name"]}


def marker_check() -> Callable[[str], bool]:
    from packaging.markers import Marker  # pytest's dependency: in every test environment

    return lambda marker: Marker(marker).evaluate()


def last_failed(cache: Path) -> list[str]:
    """The node ids pytest's cache recorded as failed in the last run."""
    try:
        recorded = json.loads(cache.read_text())
    except (OSError, ValueError):
        return []
    return sorted(node for node, failed in recorded.items() if failed)


def _pin(name: str, version: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-deps", f"{name}=={version}"], check=True)


def _rerun(failed: Sequence[str]) -> Callable[[], bool]:
    def passes() -> bool:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *failed]
        return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    return passes


def report(drifts: Sequence[Drift], failed: Sequence[str], found: Sequence[Drift] | None) -> list[str]:
    lines = []
    if drifts:
        lines.append(f"not at the locked version ({len(drifts)}): "
                     + ", ".join(f"{d.name} {d.locked} -> {d.installed}" for d in drifts))
    else:
        lines.append("nothing drifted: every package is at its locked version")
    if not failed:
        return lines
    lines.append(f"{len(failed)} test(s) failed on the newest releases")
    if found is None:
        lines.append(f"more than {MAX_TRIED} packages drifted: not searched one by one")
    elif found:
        for drift in found:
            lines.append(f"broke: {drift.name} {drift.installed} (the failing tests pass with "
                         f"{drift.name} {drift.locked}, the locked version)")
    else:
        lines.append("no single package explains the failures (they fail with each one put back "
                     "to its locked version): look at the drift above together")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=Path(".pytest_cache/v/cache/lastfailed"),
                        help="pytest's record of the last run's failures (when --failed is not given)")
    parser.add_argument("--failed", nargs="*", default=None, help="the failing tests' node ids")
    parser.add_argument("--check", action="store_true",
                        help="only say whether this environment differs from the lock (exit 1 if so)")
    args = parser.parse_args(argv)
    try:
        locked = read_lock(args.lock.read_text().splitlines(), marker_check())
    except (OSError, ValueError) as exc:
        print(f"drift: cannot read the lock {args.lock}: {exc}", file=sys.stderr)
        return 2
    installed = installed_versions()
    drifts = drifted(locked, installed)
    if args.check:
        new = unlocked(locked, installed)
        for line in report(drifts, [], None):
            print(f"drift: {line}")
        if new:
            print(f"drift: not in the lock ({len(new)}): {', '.join(new)}")
        return 1 if drifts or new else 0
    failed = args.failed if args.failed is not None else last_failed(args.cache)
    found = None
    if failed and drifts and len(drifts) <= MAX_TRIED:
        found = culprits(drifts, _pin, _rerun(failed[:MAX_RERUN]))
    elif failed:
        found = [] if not drifts else None
    for line in report(drifts, failed, found):
        print(f"drift: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
