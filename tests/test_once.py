"""tests/conftest.py's ONCE, the tests CI runs under the lowest Python only: each entry names a
test file or a test in it that exists, so a renamed test cannot silently start running twice (or
an entry outlive what it named), and an entry matches its test with any parameters, not a test
whose name merely begins the same."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ONCE, _once
from tests.support.paths import REPO


@pytest.mark.parametrize("key", list(ONCE))
def test_each_entry_names_a_test_that_exists(key: str) -> None:
    path, _, name = key.partition("::")
    source = REPO / path
    assert source.is_file(), f"ONCE names {path}, which is not there"
    if name:
        assert re.search(rf"^(async )?def {re.escape(name)}\(", source.read_text(), re.MULTILINE), \
            f"ONCE names {name}, which {path} does not define"


def test_an_entry_marks_its_file_s_tests_and_its_own_test_with_its_parameters_only() -> None:
    assert _once("tests/store/test_takeover.py::test_a_draining_replica_hands_its_call_to_a_peer")
    assert _once("tests/test_demo.py::test_x[openai]")
    assert not _once("tests/store/test_takeover_more.py::test_x")
    redact = "tests/test_relay_redact.py::test_a_long_recording_is_redacted_in_two_passes_a_line_at_a_time"
    assert _once(redact) and _once(redact + "[1]")
    assert not _once("tests/test_relay_redact.py::test_a_long_recording_is_redacted_in_two_passes")

