"""What the packaging tests start from: a clean copy of the checkout, the files a clone would
hold, never the virtual environments, build output or caches of the working tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Left out when the checkout is not a git repository (e.g. an unpacked sdist).
_NOT_SOURCE = (".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
               ".pytest_cache", ".hypothesis", "recordings", "bench-results*.json")


def source_files() -> list[str]:
    """The checkout's files, relative paths: what git tracks plus new files it does not ignore
    (so uncommitted work is tested as it stands), or, outside git, the tree minus build debris."""
    if (REPO / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=REPO, capture_output=True, check=True).stdout.decode()
        return sorted(name for name in listed.split("\0") if name and (REPO / name).is_file())
    ignore = shutil.ignore_patterns(*_NOT_SOURCE)
    found: list[str] = []
    for folder, dirs, files in os.walk(REPO):
        relative = Path(folder).relative_to(REPO)
        skipped = ignore(folder, dirs + files)
        dirs[:] = [d for d in dirs if d not in skipped]
        found += [(relative / f).as_posix() for f in files if f not in skipped]
    return sorted(found)


def clean_copy(destination: Path) -> list[str]:
    """Copy the checkout's files to `destination`; return their relative paths."""
    names = source_files()
    for name in names:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return names


def fresh_shell_environment() -> dict[str, str]:
    """The environment of a new terminal: this one's, without any activated virtual environment,
    the test run's own Python settings or the scripts' venv choice."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHON", "RELAY_VENV", "PYTEST_ADDOPTS")
           and not key.startswith("PYTEST_")}
    venv_bins = {str(Path(sys.prefix) / "bin")}
    env["PATH"] = os.pathsep.join(entry for entry in env.get("PATH", "").split(os.pathsep)
                                  if entry and entry not in venv_bins
                                  and not (Path(entry).parent / "pyvenv.cfg").exists())
    return env
