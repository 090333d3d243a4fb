#!/usr/bin/env python3
"""Writes into the Markdown pages what they show from other sources, so that a page reads whole
wherever it is read (on the forge as plain Markdown, or on the MkDocs site): `scripts/docs`
rewrites the pages, `scripts/docs --check` lists the pages out of date and exits 1
(tests/test_docs_sync.py runs the check).

Each generated block sits between two marker comments, kept so that the next run regenerates it:

- `<!-- include: docs/examples/PATH -->` ... `<!-- /include -->`: the file's text as a code block,
  under a line naming (and linking) where the file lives; the tests run those files.
- `<!-- options: COMMAND -->` ... `<!-- /options -->`: the table of `relay COMMAND`'s arguments,
  read from the parser the command line itself builds, so a command's page cannot list an option
  the command lacks or miss one it has.
- `<!-- bench-table: RESULTS -->` ... `<!-- /bench-table -->` and `<!-- bench-claim: RESULTS -->`
  ... `<!-- /bench-claim -->`: the benchmark's table and its one-paragraph claim, from a results
  file `scripts/bench --json` wrote.
- `<!-- bench-audio: RESULTS -->` ... `<!-- /bench-audio -->`: the relay's CPU per audio frame in a
  Realtime session beside a GPT-Live session's, from the file `scripts/bench_session.py --dialects
  --json` wrote.
- `<!-- bench-framing: RESULTS -->` ... `<!-- /bench-framing -->`: the audio fast path's framing
  check beside the prefix-only test it replaced, per transport, from the file
  `scripts/bench_framing.py --json` wrote.
- `<!-- bench-against: RESULTS -->` ... `<!-- /bench-against -->`: this checkout's instructions per
  tool call and per audio frame beside an older commit's, from the file `scripts/bench_against.py
  --json` wrote.
- `<!-- bench-explore: RESULTS -->` ... `<!-- /bench-explore -->`: the explorer's schedules per CPU
  second, before and after a change, per conversation, from the file `scripts/bench_explore.py
  --json` wrote.

Usage: scripts/docs [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/**/*.md")

BLOCK = re.compile(r"^<!-- (?P<kind>include|options|bench-table|bench-claim|bench-audio|bench-framing|bench-against|bench-explore): (?P<arg>\S+) -->\n"
                   r"(?P<body>.*?)"
                   r"^<!-- /(?P=kind) -->$", re.M | re.S)
LANGUAGES = {".py": "python", ".sh": "sh", ".json": "json", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml",
             ".txt": "text", ".jsonl": "json"}


def _link(page: Path, path: str) -> str:
    """The relative link from `page` to the repository's file `path`."""
    return Path(os.path.relpath(REPO / path, (REPO / page).parent)).as_posix()


# ---- included files -----------------------------------------------------------------------------

def include(page: Path, path: str) -> str:
    """The block for the repository's file `path`: where it lives, then its text as code."""
    source = REPO / path
    text = source.read_text()
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    link = _link(page, path)
    language = LANGUAGES.get(source.suffix, "text")
    return f"\n*From [`{path}`]({link}):*\n\n{fence}{language}\n{text.rstrip(chr(10))}\n{fence}\n\n"


# ---- a command's options ------------------------------------------------------------------------

def _parser_of(command: str) -> Any:
    import argparse as _argparse

    from relay.cli import build_parser

    parser = build_parser(only=command)
    [subparsers] = [a for a in parser._actions if isinstance(a, _argparse._SubParsersAction)]
    return subparsers.choices[command]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def options_table(command: str) -> str:
    """The Markdown table of `relay COMMAND`'s arguments: name (with its value), what it does."""
    parser = _parser_of(command)
    formatter = parser._get_formatter()
    rows = ["| argument | what it does |", "|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            value = "" if action.nargs == 0 else " " + formatter._format_args(action, action.dest.upper())
            name = ", ".join(f"`{flag}{value}`" for flag in action.option_strings)
        else:
            name = f"`{formatter._format_args(action, action.dest.upper())}`"
        help_text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| {_cell(name)} | {_cell(help_text)} |")
    return "\n" + "\n".join(rows) + "\n\n"


# ---- the benchmark's table and claim ------------------------------------------------------------

def results(path: str) -> dict[str, Any]:
    return json.loads((REPO / path).read_text())


def _step(figures: dict[str, Any], sessions: int) -> dict[str, Any]:
    return next((step for step in figures.get("throughput", []) if step["sessions"] == sessions), {})


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def bench_rows(figures: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The table's rows: what is measured, this run's figure, the target (empty when none)."""
    at_10, at_100 = _step(figures, 10), _step(figures, 100)
    realtime = figures.get("realtime", {})
    held = realtime.get("max_sessions_within_bound", {})
    ceiling = (realtime.get("ceiling") or {}).get("sessions", {})

    def both(name: str) -> str:
        return f"{_ratio(at_10.get(name))} / {_ratio(at_100.get(name))}"

    rows = [("flooded, 10 / 100 sessions: relay_fast's CPU per event / HAProxy's",
             both("relay_fast_vs_haproxy_cpu"), "<= 1.5x"),
            ("flooded, 10 / 100 sessions: the bare picows pass-through's CPU per event / HAProxy's",
             both("raw_picows_vs_haproxy_cpu"), ""),
            ("flooded, 10 / 100 sessions: relay_fast's events/s / HAProxy's",
             both("relay_fast_vs_haproxy_events"), ">= 0.85x")]
    split = {path: at_100.get(path, {}) for path in ("relay_fast", "raw_picows", "haproxy")}
    if any("system_us_per_event" in figures for figures in split.values()):
        rows.append(("flooded, 100 sessions: user + kernel CPU per event, relay_fast / bare pass-through / HAProxy",
                     " / ".join(f"{_us(figures.get('user_us_per_event'))} + {_us(figures.get('system_us_per_event'))}"
                                for figures in split.values()) + " µs", ""))
    if held:
        rows.append((f"realtime pace: sessions held within {realtime.get('bound_ms', 10.0):g} ms of added p99, "
                     "relay_fast / HAProxy / relay (websockets)",
                     " / ".join(_count(held.get(path)) for path in ("relay_fast", "haproxy", "relay")), ""))
        rows.append(("realtime pace: relay_fast's sessions / relay's (websockets)",
                     _ratio(realtime.get("relay_fast_vs_relay_sessions")), ">= 3x"))
    if ceiling:
        rows.append(("realtime pace: the most sessions the cores could carry beside the load generator, "
                     "relay_fast / HAProxy", " / ".join(_count(ceiling.get(path)) for path in ("relay_fast", "haproxy")),
                     ""))
    return rows


def bench_table(page: Path, path: str) -> str:
    figures = results(path)
    lines = ["| measure | figure | target |", "|---|---:|---:|"]
    lines += [f"| {label} | {figure} | {target} |" for label, figure, target in bench_rows(figures)]
    machine = figures.get("machine", {})
    note = (f"From [`{path}`]({_link(page, path)}): "
            f"{machine.get('cpus', '?')} CPUs, {machine.get('rounds', '?')} rounds per trial, medians of the "
            f"rounds. {figures.get('source', '')}").rstrip()
    return "\n" + "\n".join(lines) + "\n\n" + wrap(note) + "\n\n"


def bench_claim(page: Path, path: str) -> str:
    """The README's claim: the flooded ratios against HAProxy and the bare pass-through, and the
    sessions held at realtime pace, on which machine."""
    figures = results(path)
    at_10, at_100 = _step(figures, 10), _step(figures, 100)
    realtime = figures.get("realtime", {})
    held = realtime.get("max_sessions_within_bound", {})
    parts = [f"On a shared {figures.get('machine', {}).get('cpus', '?')}-core VM"]
    if at_10 or at_100:
        parts.append(f", flooded with audio, relay on picows costs {_ratio(at_10.get('relay_fast_vs_haproxy_cpu'))} "
                     f"HAProxy's CPU per event at 10 sessions and {_ratio(at_100.get('relay_fast_vs_haproxy_cpu'))} "
                     "at 100")
    if at_100.get("raw_picows_vs_haproxy_cpu") is not None:
        parts.append(f" (a bare picows pass-through: {_ratio(at_100['raw_picows_vs_haproxy_cpu'])})")
    if held:
        subject = "; at realtime pace it" if at_10 or at_100 else ", at realtime pace relay on picows"
        parts.append(f"{subject} holds {_count(held.get('relay_fast'))} sessions within "
                     f"{realtime.get('bound_ms', 10.0):g} ms of added p99 (HAProxy {_count(held.get('haproxy'))}), "
                     f"{_ratio(realtime.get('relay_fast_vs_relay_sessions'))} its websockets transport")
    text = "".join(parts) + f". [Benchmarks]({_link(page, 'docs/benchmarks.md')}): the method and every figure."
    return "\n" + wrap(text) + "\n\n"


def bench_audio(page: Path, path: str) -> str:
    """The table of the relay's CPU per audio frame, Realtime beside GPT-Live, per direction and
    burst, from `scripts/bench_session.py --dialects --json`."""
    figures = results(path)
    lines = ["| audio frames, bursts of | Realtime, µs CPU per frame | GPT-Live, µs CPU per frame | "
             "GPT-Live / Realtime (median of rounds; range) |", "|---|---:|---:|---:|"]
    rounds = "?"
    for key, run in figures.items():
        if not key.startswith("burst_"):
            continue
        rounds = run["repeats"]
        for direction, label in (("output", "the model's"), ("input", "the caller's")):
            low, high = run[f"live_vs_openai_{direction}_range"]
            lines.append(f"| {label}, {run['burst']} | {run[f'openai_{direction}_cpu_us_per_frame']:.2f} | "
                         f"{run[f'live_{direction}_cpu_us_per_frame']:.2f} | "
                         f"{run[f'live_vs_openai_{direction}']:.2f}x ({low:.2f}x to {high:.2f}x) |")
    machine = figures.get("machine", {})
    frames = next((run["frames"] for key, run in figures.items() if key.startswith("burst_")), 0)
    note = (f"{_measured(page, path, machine)}, on {machine.get('commit') or 'an unnamed commit'}; {rounds} rounds of one pass each, {frames:,} frames a "
            "pass.")
    return "\n" + "\n".join(lines) + "\n\n" + wrap(note) + "\n\n"


def bench_framing(page: Path, path: str) -> str:
    """The table of the framing check's cost beside the prefix-only test, per transport, from
    `scripts/bench_framing.py --json`: instructions and CPU time per frame, their ratios, and
    whether the difference is within the run-to-run noise."""
    figures = results(path)
    lines = ["| transport | instructions per frame: framing check / prefix-only (ratio) | counts of one relay differ "
             "by up to | µs CPU per frame: framing check / prefix-only | ratio, median of rounds (range) | "
             "within the run-to-run noise |", "|---|---:|---:|---:|---:|---|"]
    for transport, label in (("websockets", "websockets"), ("websockets_python", "websockets, Python test (no C "
                             "compiler at install)"), ("picows", "picows")):
        row = figures.get(transport)
        if row is None:
            continue
        if transport == "websockets" and "compiled_test" in row:
            label += ", compiled test" if row["compiled_test"] else ", Python test"
        if transport == "picows":
            label += ", compiled lane" if row.get("compiled_lane") else ", Python lane"
        low, high = row["cpu_ratio_range"]
        counted = (f"{_count(row['framing_instructions_per_frame'])} / {_count(row['prefix_instructions_per_frame'])} "
                   f"({row['instructions_ratio']:.4f}x)" if "instructions_ratio" in row else "-")
        noise = _count(row.get("instructions_noise_per_frame"))
        within = row.get("within_noise", {})
        verdict = "; ".join(f"{measure}: {'yes' if within[measure] else 'no'}" for measure in ("cpu", "instructions")
                            if measure in within).replace("cpu", "CPU")
        lines.append(f"| {label} | {counted} | {noise} | {row['framing_us_per_frame']:.2f} / "
                     f"{row['prefix_us_per_frame']:.2f} | {row['cpu_ratio']:.3f}x ({low:.3f}x to {high:.3f}x) | "
                     f"{verdict or '-'} |")
    machine = figures.get("machine", {})
    note = (f"{_measured(page, path, machine)}, on {machine.get('commit') or 'an unnamed commit'}; {figures.get('rounds', '?')} rounds of one pass of "
            f"each, {figures.get('frames', 0):,} frames a pass (each way on websockets); " + (
                f"instructions: the median of {figures.get('callgrind_estimates', 1)} counts of each, each from "
                f"callgrind runs over {figures['callgrind_frames']:,} frames and twice as many."
                if figures.get("callgrind_frames") else "no instructions counted (`--no-callgrind`)."))
    return "\n" + "\n".join(lines) + "\n\n" + wrap(note) + "\n\n"


def bench_against(page: Path, path: str) -> str:
    """The table of this checkout's instructions beside an older commit's, from
    `scripts/bench_against.py --json`: per tool call, per audio frame through the engine, per
    audio frame through the relay on picows, each with its ratio and whether it is within the limit."""
    figures = results(path)
    base, head, limit = figures["base"], figures["head"], figures["limit"]
    lines = [f"| measure | {base['commit']} | {head['commit']} | ratio | within +{(limit - 1) * 100:.0f} % |",
             "|---|---:|---:|---:|---|"]
    for name, label in (("instructions_per_tool_call", "per tool call (the engine, a whole call's round)"),
                        ("instructions_per_engine_audio_frame", "per audio frame through the engine"),
                        ("instructions_per_picows_audio_frame", "per audio frame through the relay on picows")):
        ratio = figures["ratios"][name]
        lines.append(f"| {label} | {_count(base[name])} | {_count(head[name])} | {ratio:.3f}x | "
                     f"{'yes' if ratio <= limit else 'no'} |")
    beside = figures.get("haproxy", {})
    for name, label in (("relay_fast_vs_haproxy_cpu_at_10", "flooded, 10 sessions: relay_fast's CPU per event / HAProxy's"),
                        ("relay_fast_vs_haproxy_cpu_at_100", "flooded, 100 sessions: relay_fast's CPU per event / HAProxy's"),
                        ("relay_fast_vs_haproxy_events_at_10", "flooded, 10 sessions: relay_fast's events/s / HAProxy's"),
                        ("relay_fast_vs_haproxy_events_at_100", "flooded, 100 sessions: relay_fast's events/s / HAProxy's")):
        if name in beside.get("base", {}) and name in beside.get("head", {}):
            lines.append(f"| {label} | {beside['base'][name]:.2f}x | {beside['head'][name]:.2f}x | "
                         f"{beside['head'][name] / beside['base'][name]:.3f}x | - |")
    machine = figures.get("machine", {})
    note = (f"{_measured(page, path, machine)}; "
            f"{figures['calls']:,} tool calls and {20 * figures['calls']:,} audio "
            f"frames through the engine, {figures['frames']:,} frames through the relay, each the difference of "
            "two callgrind runs, the garbage collector off in the engine's" + (
                f"; beside HAProxy: each commit's `scripts/bench --only throughput --rounds "
                f"{figures['haproxy_rounds']}`, one after the other." if beside else "."))
    return "\n" + "\n".join(lines) + "\n\n" + wrap(note) + "\n\n"


def _measured(page: Path, path: str, machine: dict) -> str:
    """A generated table's note opening: its JSON file, linked, and the machine it was measured on."""
    return (f"From [`{path}`]({_link(page, path)}): {machine.get('cpus', '?')} CPUs, Python "
            f"{machine.get('python', '?')}, load average {machine.get('load_average', 0):.1f} at the start")


def _rates(rates: list[float]) -> str:
    return " / ".join(f"{rate:.0f}" for rate in rates) or "-"


ISSUE_48_SCHEDULES = 10_000
"""Issue 48's target: this many schedules explored in under a minute of one core."""


def _one_core(rate: float | None) -> str:
    """How long one core takes for issue 48's 10,000 schedules at `rate` schedules per CPU second."""
    if not rate:
        return "-"
    seconds = round(ISSUE_48_SCHEDULES / rate)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def bench_explore(page: Path, path: str) -> str:
    """The table of the explorer's schedules per CPU second, each round's figure before and after,
    the garbage collector's share of it, the time issue 48's 10,000 schedules take at the median
    rate after, and what the run after tried, from `scripts/bench_explore.py --json`."""
    figures = results(path)
    before = figures.get("machine", {}).get("before")
    rows = figures.get("conversations", {})
    collector = any("after_collector" in row for row in rows.values())   # (older runs did not time it)
    sides = ["before", "after"] if before else ["after"]
    lines = ["| conversation | schedules per CPU second" + (f": before (`{before}`) | after" if before else "") +
             (" | collector's share of it, %" + (": before | after" if before else "") if collector else "") +
             f" | {ISSUE_48_SCHEDULES:,} schedules on one core"
             " | distinct / tried | boundaries covered | every invariant held |",
             "|---|" + "---:|" * (len(sides) * (2 if collector else 1)) + "---:|---:|---:|---|"]
    for name, row in rows.items():
        rates = " | ".join(_rates(row.get(side, [])) for side in sides)
        if collector:
            rates += " | " + " | ".join(_rates(row.get(f"{side}_collector", [])) for side in sides)
        grown = f" (and {row['grown_covered']} of {row['grown']} grown)" if row.get("grown") else ""
        lines.append(f"| {name} | {rates} | {_one_core(row.get('after_median'))} | "
                     f"{row['distinct']} / {row['tried']} | {row['covered']} of {row['boundaries']}{grown} | "
                     f"{'yes' if row['ok'] else 'no'} |")
    machine = figures.get("machine", {})
    note = (f"{_measured(page, path, machine)}, on {machine.get('commit') or 'an unnamed commit'}; budget {figures.get('budget', '?')}, seed "
            f"{figures.get('seed', '?')}, {figures.get('rounds', '?')} round(s), each measuring every conversation"
            + (" before and after, one after the other, in fresh processes." if before else " in a fresh process."))
    return "\n" + "\n".join(lines) + "\n\n" + wrap(note) + "\n\n"


def wrap(text: str, width: int = 100) -> str:
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


# ---- the pages ----------------------------------------------------------------------------------

def render(page: str, text: str) -> str:
    """`text` (the page at `page`, relative to the repository) with every generated block rewritten."""
    writers: dict[str, Callable[[str], str]] = {
        "include": lambda arg: include(Path(page), arg), "options": options_table,
        "bench-table": lambda arg: bench_table(Path(page), arg), "bench-claim": lambda arg: bench_claim(Path(page), arg),
        "bench-audio": lambda arg: bench_audio(Path(page), arg),
        "bench-framing": lambda arg: bench_framing(Path(page), arg),
        "bench-against": lambda arg: bench_against(Path(page), arg),
        "bench-explore": lambda arg: bench_explore(Path(page), arg)}

    def block(found: re.Match[str]) -> str:
        kind, arg = found["kind"], found["arg"]
        return f"<!-- {kind}: {arg} -->\n{writers[kind](arg)}<!-- /{kind} -->"

    return BLOCK.sub(block, text)


def pages() -> list[Path]:
    found = {path for pattern in PAGES for path in REPO.glob(pattern)}
    return sorted(path for path in found if "_build" not in path.parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; list the pages out of date, exit 1")
    args = parser.parse_args(argv)
    stale = []
    for path in pages():
        name = path.relative_to(REPO).as_posix()
        text = path.read_text()
        written = render(name, text)
        if written != text:
            stale.append(name)
            if not args.check:
                path.write_text(written)
    verb = "out of date (scripts/docs rewrites them)" if args.check else "rewritten"
    for name in stale:
        print(f"{name}: {verb}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
