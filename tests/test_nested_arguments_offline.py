"""A call whose arguments nest past Python's parser (valid JSON, 100,000 arrays deep, as a model
may send) is answered with an error by the relay, and the session is still read offline: its
timeline and invariants, `relay replay`, `relay inspect` and `relay redact` (each stopped with a
RecursionError where it read the arguments or the output back as JSON)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.cli import main
from relay.testing import Script, Turn, call
from relay.tools import tool

DEEP = '{"people": ' + "[" * 100_000 + "]" * 100_000 + "}"


@tool
def book(people: int) -> str:
    """Book a table."""
    return f"booked for {people}"


@pytest.mark.parametrize("dialect", ["openai", "live"])
def test_deep_arguments_are_an_error_output_and_the_session_reads_offline(
        dialect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Script(Turn(say="Checking.", calls=[call("book", DEEP)]), Turn(say="Done.")).start(
            [book], dialect=dialect) as session:
        session.user("A table, please")
        session.advance(5)
    session.check_invariants()
    [entry] = list(session.engine.ledger)
    assert entry.output == '{"error":"arguments for book are nested too deeply"}'
    session.expect().next_call("book").output(contains="nested too deeply").spoken("Done.")
    recording = session.save(tmp_path)
    tools = tmp_path / "tools.py"
    tools.write_text("from relay import tool\n@tool\ndef book(people: int) -> str:\n    '''Book a table.'''\n"
                     "    return f'booked for {people}'\n")
    assert main(["replay", str(recording), "--tools", str(tools)]) == 0
    assert main(["inspect", str(recording), "--out", str(tmp_path / "page.html")]) == 0
    assert main(["redact", str(recording), "--out", str(tmp_path / "redacted.jsonl")]) == 0
    assert "no divergence" in capsys.readouterr().out
