"""docs/frameworks.md shows the lines that point each framework at the relay as files under
docs/examples/frameworks/, which the framework clients of these tests import (clients/plan.py)."""

from __future__ import annotations

from tests.support.paths import REPO
from tests.support.snippets import check_page_includes_its_examples


def test_the_page_includes_every_example_file() -> None:
    check_page_includes_its_examples(REPO / "docs" / "frameworks.md", REPO / "docs" / "examples" / "frameworks")
