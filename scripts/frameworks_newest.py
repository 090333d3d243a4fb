"""Which voice framework has a release newer than the one its lock pins: run by `scripts/frameworks
--newest` to decide which frameworks' newest releases to install and test (report-only in CI).

For each framework NAME, requirements/frameworks/NAME.in names the framework's distribution (its
first requirement, extras and range included) and NAME.lock pins what the suite last passed with.
The newest release is asked of the package index (`pip index versions DIST`, ignoring the .in's
upper bound: the newest-releases pass is about what users install tomorrow, not what our range
allows). Prints one line per framework, `NAME DIST LOCKED NEWEST REQUIREMENT`, for those with a
newer release, and says of the others that the lock holds the newest.

    python scripts/frameworks_newest.py NAME ...

Exit status: 0 (whether or not something is newer); 2 unusable input (an unknown framework, an
.in or .lock without the distribution).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = ROOT / "requirements" / "frameworks"
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?")
_VERSION = re.compile(r"^(\d+(?:\.\d+)*)$")


def canonical(name: str) -> str:
    """A distribution's name as the index compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def framework_distribution(in_text: str) -> tuple[str, str]:
    """The distribution and its extras (`[openai]` or "") of an .in file's first requirement."""
    for line in in_text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            found = _REQUIREMENT.match(line)
            if found is not None:
                return found.group(1), found.group(2) or ""
    raise ValueError("no requirement in the .in file")


def locked_version(lock_text: str, distribution: str) -> str:
    """The version the lock pins for `distribution`."""
    want = canonical(distribution)
    for line in lock_text.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and canonical(name.split("[")[0]) == want:
            return version.split(";")[0].strip()
    raise ValueError(f"the lock pins no {distribution}")


def release_key(version: str) -> tuple[int, ...] | None:
    """A final release's sort key (1.8.10 after 1.8.9); None for a pre-release or anything else."""
    found = _VERSION.match(version)
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def newest_release(index_output: str) -> str | None:
    """The newest final release in `pip index versions` output ("Available versions: a, b, ...")."""
    for line in index_output.splitlines():
        if line.startswith("Available versions:"):
            versions = [v.strip() for v in line.partition(":")[2].split(",")]
            finals = [v for v in versions if release_key(v) is not None]
            return max(finals, key=release_key) if finals else None   # type: ignore[arg-type, return-value]
    return None


def is_newer(newest: str, locked: str) -> bool:
    new, old = release_key(newest), release_key(locked)
    return new is not None and old is not None and new > old


def index_versions(distribution: str) -> str:
    """What `pip index versions` says of `distribution` ("" when the index cannot be asked)."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", distribution,
                           "--disable-pip-version-check"], capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else ""


def main(names: list[str]) -> int:
    for name in names:
        try:
            distribution, extras = framework_distribution((FRAMEWORKS / f"{name}.in").read_text())
            locked = locked_version((FRAMEWORKS / f"{name}.lock").read_text(), distribution)
        except (OSError, ValueError) as exc:
            print(f"frameworks_newest: {name}: {exc}", file=sys.stderr)
            return 2
        newest = newest_release(index_versions(distribution))
        if newest is None:
            print(f"{name}: the index gave no release of {distribution}: its newest is not tested",
                  file=sys.stderr)
        elif is_newer(newest, locked):
            print(f"{name} {distribution} {locked} {newest} {distribution}{extras}=={newest}")
        else:
            print(f"{name}: the lock holds the newest release ({distribution}=={locked})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
