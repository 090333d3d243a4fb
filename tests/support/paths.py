"""Where the checkout and the shared test data are."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    """../shared beside the checkout (as in CI), or RELAY_SHARED_DIR, or /work/shared (where a
    worktree elsewhere finds it); its `recordings` are real sessions."""
    candidates = [os.environ.get("RELAY_SHARED_DIR"), REPO.parent / "shared", "/work/shared"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "recordings").is_dir():
            return Path(candidate)
    raise RuntimeError("cannot find the shared recordings: set RELAY_SHARED_DIR")


def script_module(name: str) -> ModuleType:
    """The module of scripts/NAME.py, loaded from its file (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
