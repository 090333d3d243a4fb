"""The pages show runnable code by carrying the files themselves: scripts/docs writes each file
of docs/examples/ into the page that names it (`<!-- include: PATH -->` ... `<!-- /include -->`),
and tests/test_docs_sync.py fails when a page's copy differs from its file, so a page cannot drift
from the file its test runs. This reads which files a page includes."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO

INCLUDED = re.compile(r"^<!-- include: (?P<path>\S+) -->$", re.M)


def included_files(page: Path) -> list[str]:
    """The paths (relative to the repository) of the files `page` includes as code blocks."""
    return [found["path"] for found in INCLUDED.finditer(page.read_text())]


def check_page_includes_its_examples(page: Path, examples: Path) -> list[str]:
    """Every file of `examples` is included by `page`, once, and the page includes nothing that
    is not there; returns the included paths."""
    included = included_files(page)
    files = sorted(path.relative_to(REPO).as_posix() for path in examples.iterdir() if path.is_file())
    assert sorted(included) == files, f"{page.name} includes {sorted(included)}, the folder holds {files}"
    return included
