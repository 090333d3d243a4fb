"""The pages read whole as Markdown (on the forge, in an editor) and on the site alike: what they
show from other sources is written into them by scripts/docs (scripts/docs_sync.py), and this
test fails when a page is out of date with those sources: an example file under docs/examples/,
a command's argparse parser, the benchmark's results file. Run `scripts/docs` to bring them back."""

from __future__ import annotations

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

