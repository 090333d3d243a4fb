"""`relay inspect` from the command line: a page for good input; for bad input one clear line on
stderr and exit 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from relay.cli import main
from tests.inspector import synth
from tests.support.paths import REPO


def test_inspect_writes_one_self_contained_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = synth.openai_session(tmp_path / "rec")
    out = tmp_path / "page.html"
    assert main(["inspect", str(facts.path), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    page = out.read_text()
    assert "call_1" in page and "get_weather" in page
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    model = json.loads(page.split('id="inspector-model">', 1)[1].split("</script>", 1)[0])
    assert model["summary"]["calls"] == 2 and model["audio"]["caller"]["playable"]


def test_the_default_page_goes_to_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    facts = synth.g711_session(tmp_path / "rec")
    monkeypatch.chdir(tmp_path)
    assert main(["inspect", str(facts.path), "--no-audio"]) == 0
    page = tmp_path / (facts.path.stem + ".html")
    assert page.exists() and "--no-audio" in page.read_text()


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "garbage.jsonl").write_bytes(b"\x00\xff garbage \x01\n\x9c not json at all\n")
    (tmp_path / "config.json").write_text(json.dumps({"name": "relay", "version": 1}))
    (tmp_path / "pretty.json").write_text(json.dumps({"a": [1, 2]}, indent=2))
    (tmp_path / "other-format.jsonl").write_text(json.dumps({"format": "something-else", "version": 1}) + "\n")
    (tmp_path / "adir").mkdir()
    return {
        "missing": tmp_path / "nope.jsonl", "empty": tmp_path / "empty.jsonl",
        "garbage": tmp_path / "garbage.jsonl", "directory": tmp_path / "adir",
        "json-not-a-recording": tmp_path / "config.json", "pretty-json": tmp_path / "pretty.json",
        "another-format": tmp_path / "other-format.jsonl",
    }


@pytest.mark.parametrize("case", ["missing", "empty", "garbage", "directory", "json-not-a-recording",
                                  "pretty-json", "another-format"])
def test_bad_input_is_one_line_on_stderr_and_exit_2(case: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = _bad_inputs(tmp_path)[case]
    assert main(["inspect", str(path), "--out", str(tmp_path / "page.html")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("relay inspect: ") and str(path.name) in lines[0], captured.err
    assert "Traceback" not in captured.err and not (tmp_path / "page.html").exists()


def test_an_unwritable_page_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = synth.g711_session(tmp_path / "rec")
    assert main(["inspect", str(facts.path), "--out", str(tmp_path / "no" / "such" / "dir" / "p.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("relay inspect: cannot write")


def test_the_command_line_never_shows_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "relay", "inspect", str(tmp_path)], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == f"relay inspect: {tmp_path} is a directory, not a recording"


def test_without_chromium_the_reason_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from tests.support import chromium

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(chromium.Path, "exists", lambda self: False)
    reason = chromium.missing_reason()
    assert reason is not None and "apt-get install -y chromium chromium-driver" in reason
