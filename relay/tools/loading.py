"""Loading tools from the files and modules named on the command line (`--tools SPEC`).

The one part of `relay.tools` with I/O: it reads and executes the user's code, so whatever that
code does at import time happens here, and any failure becomes one `ToolLoadError` whose message
is one line naming the error and the innermost line of the user's code that raised it (the
traceback stays on the exception's `__cause__`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType

from relay.tools.errors import ToolLoadError
from relay.tools.spec import ToolSpec, spec_of

_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

_PACKAGE_DIR = Path(__file__).parent
"""relay/tools/: frames from here (loading, then `@tool` checking a definition) are the relay's,
not the user's."""


def load_tools(spec: str) -> list[ToolSpec]:
    """The tools defined in a `.py` file (absolute or relative to the working directory) or an
    importable module (dotted name): every module-level attribute carrying a spec, in
    definition order, each once even when aliased. Tools the module imports count too, so one
    module can gather tools from several others.

    Files are imported under a name derived from their full path, so two files with the same
    basename do not replace each other in `sys.modules`. A file's own directory goes on the import
    path first, as Python puts a script's: its sibling modules import as they do when it runs.
    """
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        module = _import_file(spec)
    elif _MODULE_NAME.fullmatch(spec):
        module = _import_module(spec)
    else:
        raise ToolLoadError(f"cannot load tools from {spec!r}: not a .py file path or a module name")
    found: dict[int, ToolSpec] = {}
    for value in list(vars(module).values()):
        attached = spec_of(value)
        if attached is not None:
            found.setdefault(id(attached), attached)
    if not found:
        raise ToolLoadError(f"no tools found in {spec!r}: mark functions with @tool")
    return list(found.values())


def _import_file(spec: str) -> ModuleType:
    path = Path(spec).expanduser().resolve()
    if not path.is_file():
        raise ToolLoadError(f"cannot load tools from {spec!r}: no such file ({path})")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    stem = re.sub(r"\W", "_", path.stem)
    module_name = f"relay_tools_{stem}_{digest}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ToolLoadError(f"cannot load tools from {spec!r}: not importable as a Python file")
    module = importlib.util.module_from_spec(module_spec)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    # Registered before running, as a normal import does: dataclasses and pydantic models in
    # the file look their module up in sys.modules while it executes.
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        raise ToolLoadError(_import_failure(spec, exc)) from exc
    return module


def _import_module(spec: str) -> ModuleType:
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (spec == exc.name or spec.startswith(exc.name + ".")):
            raise ToolLoadError(
                f"cannot load tools from {spec!r}: no module named {exc.name!r} "
                "(to load a file, give its path ending in .py)"
            ) from exc
        raise ToolLoadError(_import_failure(spec, exc)) from exc
    except (Exception, SystemExit) as exc:
        raise ToolLoadError(_import_failure(spec, exc)) from exc


def _import_failure(spec: str, exc: BaseException) -> str:
    """One line: what went wrong and where in the user's code (the innermost of their frames;
    importlib's and this package's say nothing about it). The full traceback stays on the
    exception's cause."""
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}, line {exc.lineno}" if exc.filename else ""
        code = (exc.text or "").strip()
        return (f"importing {spec!r} failed: SyntaxError: {exc.msg}"
                + (f" at {where}" if where else "") + (f": {code}" if code else ""))
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<frozen ") and Path(frame.filename).parent != _PACKAGE_DIR
    ]
    what = " ".join(traceback.format_exception_only(type(exc), exc)[-1].split())
    what = what.removeprefix(f"{type(exc).__module__}.") if type(exc).__module__ != "builtins" else what
    if not frames:
        return f"importing {spec!r} failed: {what}"
    last = frames[-1]
    code = f": {last.line}" if last.line else ""
    return f"importing {spec!r} failed: {what} at {last.filename}, line {last.lineno}, in {last.name}{code}"
