"""Expectations files: what a recording's replay must show, written beside it, applied by the
pytest plugin (`relay.offline.pytest_plugin`).

`refund.jsonl` has its expectations in `refund.expect.yaml` (or `.yml`; `.toml` and `.json` hold
the same document):

    promotion: blocking          # a pytest marker: select with -m blocking (or nightly, manual)
    invariants: all              # all, or a list of names (relay.testing.INVARIANTS); default none
    silent: [take_note]          # tools not owed speech after their answer (for spoke_after_tools)
    expect:                      # steps walked in order over the replayed session
      - call: lookup_order                       # a name ...
      - call: {name: refund, arguments: {order_id: "42"}}   # ... or the step's options
      - output: {contains: refunded, error: false}
      - follow_up: refund
      - spoken: "your refund"
      - no_more_events: true

Each step is one of `call`, `output`, `spoken`, `filler`, `follow_up`, `user`, `barge_in`,
`cancelled`, `error`, `no_more_events`, with the options of the `relay.testing.Expect` method of
the same name (`call` is `next_call`); a plain value stands for the first option (a call's name,
an output's `contains`, a filler's `after`...); `matches` takes a regular expression where text is
matched.

YAML needs PyYAML (`pip install 'realtime-relay[yaml]'`): the relay itself parses no YAML, so it is
not a dependency of a relay in production; TOML (standard library) and JSON always work.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.errors import UnusableInput
from relay.offline.expect import INVARIANTS, Expect, check_invariants
from relay.offline.timeline import Timeline

SUFFIXES = (".expect.yaml", ".expect.yml", ".expect.toml", ".expect.json")
PROMOTION_LEVELS = ("blocking", "nightly", "manual")

# step -> (the Expect method, its first option, the options it takes)
STEPS: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "call": ("next_call", "name", ("name", "arguments", "by")),
    "output": ("output", "contains", ("contains", "matches", "equals", "error", "status", "call", "by", "outcome",
                                      "final")),
    "spoken": ("spoken", "text", ("text", "matches")),
    "filler": ("filler", "after", ("after", "text", "matches", "call", "within")),
    "follow_up": ("follow_up", "call", ("call",)),
    "user": ("user", "text", ("text", "matches")),
    "barge_in": ("barge_in", None, ()),
    "cancelled": ("cancelled", "call", ("call",)),
    "error": ("error", "code", ("code",)),
    "no_more_events": ("no_more_events", None, ()),
}


class ExpectationsFileError(UnusableInput):
    """An expectations file that cannot be used; the message names the file and the place."""


@dataclass
class ExpectationsFile:
    path: Path
    promotion: str | None = None
    invariants: tuple[str, ...] | None = None     # None: not checked; (): all of them
    silent: tuple[str, ...] = ()
    steps: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def apply(self, timeline: Timeline) -> None:
        """Walk the steps over `timeline`, then check the invariants asked for; raises
        `ExpectationFailed` at the first that does not hold."""
        expect = Expect(timeline)
        for step, options in self.steps:
            getattr(expect, STEPS[step][0])(**options)
        if self.invariants is not None:
            check_invariants(timeline, *self.invariants, silent=self.silent)


def find_expectations(recording: Path) -> Path | None:
    """The expectations file beside `recording`, if there is one."""
    stem = recording.name[:-len(recording.suffix)] if recording.suffix else recording.name
    return next((candidate for suffix in SUFFIXES if (candidate := recording.with_name(stem + suffix)).is_file()), None)


def load_expectations(path: Path) -> ExpectationsFile:
    document = _read(path)
    if not isinstance(document, dict):
        raise ExpectationsFileError(f"{path}: expected a mapping (promotion, invariants, silent, expect)")
    unknown = set(document) - {"promotion", "invariants", "silent", "expect"}
    if unknown:
        raise ExpectationsFileError(f"{path}: unknown key {sorted(unknown)[0]!r} (promotion, invariants, silent, expect)")
    result = ExpectationsFile(path)
    promotion = document.get("promotion")
    if promotion is not None and promotion not in PROMOTION_LEVELS:
        raise ExpectationsFileError(f"{path}: promotion is one of {', '.join(PROMOTION_LEVELS)}, not {promotion!r}")
    result.promotion = promotion
    invariants = document.get("invariants")
    if invariants in ("all", True):
        result.invariants = ()
    elif isinstance(invariants, list) and all(name in INVARIANTS for name in invariants):
        result.invariants = tuple(invariants)
    elif invariants not in (None, False, "none"):
        raise ExpectationsFileError(f"{path}: invariants is `all` or a list of {', '.join(INVARIANTS)}, "
                                    f"not {invariants!r}")
    silent = document.get("silent") or []
    if not isinstance(silent, list) or not all(isinstance(name, str) for name in silent):
        raise ExpectationsFileError(f"{path}: silent is a list of tool names")
    result.silent = tuple(silent)
    steps = document.get("expect") or []
    if not isinstance(steps, list):
        raise ExpectationsFileError(f"{path}: expect is a list of steps")
    result.steps = [_step(path, number, step) for number, step in enumerate(steps, start=1)]
    return result


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ExpectationsFileError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        if path.name.endswith(".toml"):
            return tomllib.loads(text)
        if path.name.endswith(".json"):
            return json.loads(text)
        try:
            import yaml
        except ImportError:
            raise ExpectationsFileError(f"{path}: reading YAML needs PyYAML (pip install 'realtime-relay[yaml]'); "
                                        "or write the same document as .expect.toml or .expect.json") from None
        return yaml.safe_load(text)
    except ExpectationsFileError:
        raise
    except Exception as exc:  # each parser has its own error class: all mean a file it cannot read
        detail = " ".join(str(exc).split())
        raise ExpectationsFileError(f"{path}: not valid {path.suffix.lstrip('.').upper()}: {detail}") from None


def _step(path: Path, number: int, step: Any) -> tuple[str, dict[str, Any]]:
    where = f"{path}: step {number}"
    if not isinstance(step, dict) or len(step) != 1:
        raise ExpectationsFileError(f"{where}: a step is one key ({', '.join(STEPS)}) and its options")
    (name, value), = step.items()
    if name not in STEPS:
        raise ExpectationsFileError(f"{where}: unknown step {name!r} (one of: {', '.join(STEPS)})")
    _, first, allowed = STEPS[name]
    if isinstance(value, dict):
        options = dict(value)
    elif value is None or first is None or value is True:
        options = {}
    else:
        options = {first: value}
    unknown = set(options) - set(allowed)
    if unknown:
        raise ExpectationsFileError(f"{where}: {name} takes {', '.join(allowed) or 'no options'}, "
                                    f"not {sorted(unknown)[0]!r}")
    if "matches" in options:
        try:
            pattern = re.compile(str(options.pop("matches")))
        except re.error as exc:
            raise ExpectationsFileError(f"{where}: matches is not a regular expression: {exc}") from None
        options["contains" if name == "output" else "text"] = pattern
    return name, options
