"""The pages read whole as Markdown (on the forge, in an editor) and on the site alike: what they
show from other sources is written into them by scripts/docs (scripts/docs_sync.py), and this
test fails when a page is out of date with those sources: an example file under docs/examples/,
a command's argparse parser, the benchmark's results file. Run `scripts/docs` to bring them back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.processes import script_module

docs_sync = script_module("docs_sync")

COMMAND_PAGES = sorted(path for path in (REPO / "docs" / "commands").glob("*.md") if path.name != "index.md")


def test_every_page_is_in_sync_with_its_sources() -> None:
    stale = [path.relative_to(REPO).as_posix() for path in docs_sync.pages()
             if docs_sync.render(path.relative_to(REPO).as_posix(), path.read_text()) != path.read_text()]
    assert stale == [], f"out of date with their sources (run scripts/docs): {stale}"


def test_no_page_shows_an_include_that_only_a_site_would_render() -> None:
    shown = [path.relative_to(REPO).as_posix() for path in docs_sync.pages() if "--8<--" in path.read_text()]
    assert shown == []


@pytest.mark.parametrize("page", COMMAND_PAGES, ids=lambda path: path.stem)
def test_each_command_page_carries_its_options_table(page: Path) -> None:
    text = page.read_text()
    block = re.search(rf"^<!-- options: {page.stem} -->\n(.*?)^<!-- /options -->$", text, re.M | re.S)
    assert block is not None, f"{page.name} has no options block for relay {page.stem}"
    rows = [line for line in block.group(1).splitlines() if line.startswith("| `")]
    parser = docs_sync._parser_of(page.stem)
    flags = [flag for action in parser._actions for flag in action.option_strings if flag not in ("-h", "--help")]
    assert rows and all(f"`{flag}" in block.group(1) for flag in flags), page.name


def test_an_edited_example_or_a_new_option_makes_the_page_stale_and_scripts_docs_rewrites_it() -> None:
    page = "docs/tools.md"
    text = (REPO / page).read_text()
    drifted = text.replace("return {\"city\": city, \"temp_c\": 21}", "return {\"city\": city}")
    assert drifted != text
    assert docs_sync.render(page, drifted) == text
    serve = (REPO / "docs" / "commands" / "serve.md").read_text()
    emptied = re.sub(r"(<!-- options: serve -->\n).*?(<!-- /options -->)", r"\1\2", serve, flags=re.S)
    assert emptied != serve and docs_sync.render("docs/commands/serve.md", emptied) == serve


def test_each_included_file_is_named_and_linked_where_it_is_shown() -> None:
    for path in docs_sync.pages():
        text = path.read_text()
        for found in re.finditer(r"^<!-- include: (\S+) -->\n\n\*From \[`(\S+)`\]\((\S+)\):\*$", text, re.M):
            source, named, link = found.groups()
            assert source == named and (path.parent / link).resolve() == (REPO / source).resolve()
        assert text.count("<!-- include: ") == len(re.findall(r"^\*From \[`", text, re.M)), path.name


def test_the_docs_name_no_version_of_a_locked_dependency() -> None:
    """A version the lock decides (websockets, picows, ...) goes stale with the next refresh of the
    lock: the pages name the ranges in pyproject.toml, or nothing."""
    locked = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (REPO / "requirements" / "dev.lock").read_text(), re.M))
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    named = [(page.relative_to(REPO).as_posix(), name) for page in pages for name in locked
             if re.search(rf"\b{re.escape(name)} \d+\.\d+\.\d+", page.read_text(), re.I)]
    assert named == []


def test_the_docs_state_no_count_of_the_suite_s_tests() -> None:
    """The count changes with every round of work (pytest's summary gives it): a page that states
    one is soon wrong."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    stated = [(page.relative_to(REPO).as_posix(), found.group(0)) for page in pages
              for found in re.finditer(r"\b\d,\d{3} tests\b", page.read_text())]
    assert stated == []


def section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_is_short_and_its_performance_is_a_claim_from_the_results_file() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    performance = [line for line in section(readme, "## Performance").splitlines() if line.strip()]
    assert len(performance) <= 6, performance
    assert performance[0] == "<!-- bench-claim: docs/bench/latest.json -->"
    assert "(docs/benchmarks.md)" in "\n".join(performance)


def test_the_benchmarks_page_leads_with_the_one_table_the_results_file_gives() -> None:
    page = (REPO / "docs" / "benchmarks.md").read_text()
    before_the_method = page.split("\n## ", 1)[0]
    assert page.count("<!-- bench-table: ") == 1 and "<!-- bench-table: docs/bench/latest.json -->" in before_the_method
    assert before_the_method.split("<!-- bench-table: ", 1)[0].count("\n|") == 0     # no table before it
    figures = docs_sync.results("docs/bench/latest.json")
    at_100 = next(step for step in figures["throughput"] if step["sessions"] == 100)
    assert f"{at_100['relay_fast_vs_haproxy_cpu']:.2f}x" in before_the_method



def test_the_table_and_the_claim_read_a_partial_run_and_leave_what_it_did_not_measure_out(tmp_path: Path) -> None:
    """`scripts/bench --only realtime --json` writes no throughput: the table shows a dash there,
    and the claim says what was measured."""
    only_realtime = {"machine": {"cpus": 4, "rounds": 3}, "realtime": {
        "bound_ms": 10.0, "max_sessions_within_bound": {"raw": 300, "relay": 150, "relay_fast": 450, "haproxy": 500},
        "relay_fast_vs_relay_sessions": 3.0, "ceiling": None}}
    results = tmp_path / "only_realtime.json"
    results.write_text(json.dumps(only_realtime))
    rows = dict((label, figure) for label, figure, _ in docs_sync.bench_rows(only_realtime))
    assert rows["flooded, 10 / 100 sessions: relay_fast's CPU per event / HAProxy's"] == "- / -"
    assert "450 / 500 / 150" in rows.values() and "3.00x" in rows.values()
    claim = docs_sync.bench_claim(Path("README.md"), str(results))     # an absolute path: REPO / it is itself
    assert "On a shared 4-core VM, at realtime pace relay on picows holds 450 sessions" in " ".join(claim.split())
    assert "flooded" not in claim
