"""The Python interpreters on this machine that the package claims to support.

Prints one line per minor version that satisfies pyproject.toml's `requires-python` and can make a
virtual environment with pip: `X.Y PATH`, lowest first. `.ci/run` runs the suite under the first
and the last. Looks at `python3` and `python3.N` on the PATH, pyenv's versions and /usr/bin.

Usage: python3 scripts/pythons.py
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = "import sys, venv, ensurepip; print('%d.%d' % sys.version_info[:2])"


def lowest_claimed() -> tuple[int, int]:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    found = re.fullmatch(r"\s*>=\s*(\d+)\.(\d+)\s*", requires)
    if not found:
        raise SystemExit(f"pythons.py: cannot read requires-python {requires!r} (only '>=X.Y' is understood)")
    return int(found[1]), int(found[2])


def candidates() -> list[str]:
    names = ["python3", *(f"python3.{minor}" for minor in range(8, 30))]
    on_path = [shutil.which(name) for name in names]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    pyenv = sorted(glob.glob(os.path.join(pyenv_root, "versions", "*", "bin", "python3")))
    system = sorted(glob.glob("/usr/bin/python3.*") + glob.glob("/usr/local/bin/python3.*"))
    return [path for path in [*on_path, *pyenv, *system] if path]


def version_of(path: str) -> tuple[int, int] | None:
    """The interpreter's X.Y, or None when it cannot run or has no venv/ensurepip (a pyenv shim
    for an inactive version, Debian's python3.N without python3.N-venv)."""
    try:
        done = subprocess.run([path, "-c", PROBE], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    if done.returncode != 0 or not re.fullmatch(r"\d+\.\d+", done.stdout.strip()):
        return None
    major, minor = done.stdout.split(".")
    return int(major), int(minor)


def main() -> int:
    lowest = lowest_claimed()
    chosen: dict[tuple[int, int], str] = {}
    for path in candidates():
        if not re.fullmatch(r"python3(\.\d+)?", os.path.basename(path)):
            continue                                  # python3.11-config and the like
        version = version_of(path)
        if version is not None and version >= lowest and version not in chosen:
            chosen[version] = path                    # the first found wins: python3 on the PATH first
    for version in sorted(chosen):
        print(f"{version[0]}.{version[1]} {chosen[version]}")
    return 0 if chosen else 1


if __name__ == "__main__":
    sys.exit(main())
