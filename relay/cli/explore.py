"""`relay explore`: a recording or a scripted conversation run under every schedule a real session
could take (within a budget), the relay's invariants checked on each, and the smallest failing
schedule handed back as a recording with its `relay replay` command (relay/offline/explore.py).

Exits 0 when every invariant held, 1 with a finding, 2 for input it cannot use (a file that is
neither a recording nor a script, tools that do not import, a budget of zero). Ctrl-C stops it
after the schedule in flight and reports what it tried (1 if something broke, else 130); a
second Ctrl-C ends the process at once (130)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

from relay.cli.exits import FINDING, INTERRUPTED, OK
from relay.cli.options import (
    TOOLS,
    Command,
    check_record_dir,
    option,
    tools_from_working_directory,
    users_prints_to_stderr,
)
from relay.dialects import DIALECT_CHOICES
from relay.errors import UnusableInput
from relay.dialects.live import DELEGATION_TARGETS

DEMO = "demo"
_CLIENT, RESPONSES, _ = DELEGATION_TARGETS
DELEGATIONS = (RESPONSES, _CLIENT)

EXPLORE_OPTIONS = (
    option("source", field=None, metavar="RECORDING|SCRIPT",
           help="a relay recording (.jsonl), a script file (JSON: the mock's script and the caller's `lines`), "
                f"or `{DEMO}` (the demo's conversation with the example tools)"),
    TOOLS,
    option("--budget", type=int, default=2000, help="at most this many schedules (default 2000)"),
    option("--seed", type=int, default=0, help="the seed of the random schedules (default 0)"),
    option("--time-budget", type=float, default=None, metavar="SECONDS", help="stop after this many seconds"),
    option("--dialect", choices=DIALECT_CHOICES, help="the dialect to explore (default: the input's, else openai)"),
    option("--delegation", choices=DELEGATIONS,
           help="GPT-Live's delegation mode (--dialect live): responses (a Responses backend calls the tools; the "
                "default) or client (the relay's @delegate among the tools answers with appends); over a script "
                "file's own; a recording's is its own"),
    option("--mode", choices=("proxy", "sidecar"), default=None,
           help="how the relay runs: proxy (the caller talks through it) or sidecar (the caller talks to the server, "
                "the relay attached to its session, as relay attach; the wires with a sideband: not Gemini's or Voice "
                "Live's); default: a recording's own, else proxy"),
    option("--invariant", field=None, action="append", default=[], metavar="FILE:FUNCTION",
           help="an invariant of your own (repeatable): a function of the explored session returning what broke or "
                "None, from a .py file or a module; its `reset` attribute, if any, is called before each schedule"),
    option("--history-items", type=int, default=None, metavar="N",
           help="explore under the relay's history limit, as `relay serve --history-items N` runs: keep the last N "
                "items, responses and finished calls (0: all; default: a recording's own, else all)"),
    option("--out", metavar="DIR", help="where a failing schedule's recording is written"),
    option("--json", field=None, action="store_true", help="print the result as JSON"),
)


def run(args: argparse.Namespace) -> int:
    tools_from_working_directory()
    with users_prints_to_stderr():
        result = _explored(args)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(json.dumps(result.to_json(), indent=2) if args.json else result.report())
    if not result.ok:
        return FINDING
    return INTERRUPTED if result.stopped == "interrupted" else OK


def _explored(args: argparse.Namespace) -> Any:
    """The exploration `args` ask for (its `ExploreResult`)."""
    if args.budget < 1:
        raise UnusableInput("--budget must be at least 1")
    if args.time_budget is not None and args.time_budget <= 0:
        raise UnusableInput("--time-budget must be more than 0 seconds")
    if args.history_items is not None and args.history_items < 0:
        raise UnusableInput("--history-items must be 0 (all) or more")
    check_record_dir(args.out, "--out")   # before exploring, not once a finding is made
    from relay.offline.explore import explore
    from relay.offline.explore_input import checked_delegation, from_file, with_delegate
    from relay.offline.explore_session import Conversation
    from relay.tools.sources import tool_registry

    specs = list(args.tools)
    if args.source == DEMO:
        from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
        specs = specs or [EXAMPLE_TOOLS]
        conversation = Conversation(DEMO, demo_script(), TURNS, tool_registry(specs)).with_dialect(
            args.dialect or "openai")
        conversation = with_delegate(replace(conversation, delegation=checked_delegation(
            args.delegation, DEMO, conversation.dialect)), DEMO)
    else:
        conversation = from_file(args.source, tool_registry(specs), dialect=args.dialect, delegation=args.delegation)
    conversation = conversation.with_mode(args.mode, args.source)
    if args.history_items is not None:
        conversation = replace(conversation, history_limit=args.history_items or None)
    tty = sys.stderr.isatty()

    def progress(result: object) -> None:
        tried = getattr(result, "tried", 0)
        found = len(getattr(result, "findings", ()))
        line = f"explored {tried}/{args.budget} schedules, {found} invariant(s) broken"
        print(f"\r{line}" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    own, reset = own_invariants(args.invariant)
    with _interruptible() as interrupted:
        result = explore(conversation, budget=args.budget, seed=args.seed, time_budget=args.time_budget,
                         out=args.out, tools_arg=" --tools ".join(specs), invariant_args=tuple(args.invariant),
                         progress=progress, invariants=own,
                         reset=reset, stop=interrupted)
    return result


@contextmanager
def _interruptible() -> Iterator[Callable[[], bool]]:
    """While exploring, the first SIGINT (Ctrl-C) only asks the exploration to stop: it ends after
    the schedule in flight and reports what it tried. Raised as `KeyboardInterrupt` instead, it
    would land in whatever code runs: a handler's, where it is that call's error output (a finding
    the user never had), or the virtual loop's, leaving its tasks to print their tracebacks. The
    second SIGINT ends the process at once (a tool blocked in real time, a shrink the user will
    not wait for)."""
    asked: list[int] = []

    def on_interrupt(signum: int, frame: object) -> None:
        # straight to the file descriptor: the handler may run in the middle of a write to stderr
        # (the progress line, a tool's print), where a buffered stream refuses a reentrant write
        if asked:
            os.write(2, b"\nrelay explore: interrupted\n")
            os._exit(INTERRUPTED)
        asked.append(signum)
        os.write(2, b"\nrelay explore: stopping after this schedule (Ctrl-C again to quit now)\n")

    try:
        before = signal.signal(signal.SIGINT, on_interrupt)
    except ValueError:   # not the main thread (explore called from a thread): Ctrl-C is the caller's
        yield lambda: False
        return
    if before is signal.SIG_IGN:   # started with SIGINT ignored (a background job): it stays ignored
        signal.signal(signal.SIGINT, before)
        yield lambda: False
        return
    try:
        yield lambda: bool(asked)
    finally:
        signal.signal(signal.SIGINT, before)


def own_invariants(specs: list[str]) -> tuple[dict[str, Callable[..., Any]], Callable[[], None] | None]:
    """The `--invariant` specs' functions by name, and what resets them (each one's `reset`
    attribute, called in turn; None when none has one). A reset that raises stops the command:
    one line naming it (exit 2), not a bug of relay's, since nothing it checks can be trusted."""
    own: dict[str, Callable[..., Any]] = {}
    resets: list[tuple[str, Callable[[], Any]]] = []
    for spec in specs:
        name, check = load_invariant(spec)
        own[name] = check
        if callable(getattr(check, "reset", None)):
            resets.append((spec, check.reset))   # type: ignore[attr-defined]
    if not resets:
        return own, None

    def reset() -> None:
        for spec, each in resets:
            try:
                each()
            except Exception as exc:   # the user's code: said in one line
                raise UnusableInput(f"--invariant {spec}: its reset raised {type(exc).__name__}: {exc}") from None

    return own, reset


def load_invariant(spec: str) -> tuple[str, Callable[..., Any]]:
    """`FILE.py:NAME` or `module:NAME`: the function, by its name. A file is imported by its name
    with its directory on the import path (as `--tools` does), so that it shares the modules its
    tools import."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise UnusableInput(f"--invariant {spec}: say FILE.py:FUNCTION or module:FUNCTION")
    module_name = where
    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise UnusableInput(f"--invariant {spec}: no such file {where}")
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        module_name = path.stem
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:   # any error of the user's module is unusable input, in one line
        raise UnusableInput(f"--invariant {spec}: cannot import {where}: {type(exc).__name__}: {exc}") from None
    check = getattr(module, name, None)
    if not callable(check):
        raise UnusableInput(f"--invariant {spec}: {where} has no function {name}")
    return name, check


COMMAND = Command(EXPLORE_OPTIONS, run)
