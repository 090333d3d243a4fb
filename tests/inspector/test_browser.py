"""The inspector page in headless Chromium, checked as a person would: the lanes are there, every
call is on the timeline with its output, a click shows a call's arguments, the audio plays for as
long as the recording's audio lasts, a recording without audio says why, and a replay's
divergences are marked. A screenshot of every page goes to $RELAY_TEST_ARTIFACTS (default
test-artifacts/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relay.cli import main
from tests.inspector import synth
from tests.support.browser import (
    assert_calls_on_timeline_with_outputs_and_arguments,
    assert_lanes,
    make_page,
    model_of,
    open_page,
    page_errors,
    screenshot,
    wait_for,
)
from tests.support.paths import shared_dir


def test_the_demo_page_shows_lanes_and_every_call_with_its_output_and_arguments(
        browser: Any, demo_recording: Path, tmp_path: Path, artifacts: Path) -> None:
    page = make_page(demo_recording, tmp_path / "demo.html")
    open_page(browser, page)
    assert_lanes(browser)
    model = model_of(page)
    assert len([e for e in model["events"] if e["kind"] == "call"]) == 5
    assert_calls_on_timeline_with_outputs_and_arguments(browser, model)
    from selenium.webdriver.common.by import By
    assert browser.find_element(By.CSS_SELECTOR, '[data-fact="calls"]').text == "5"
    assert browser.find_element(By.CSS_SELECTOR, '#tool-table tr[data-tool="search_flights"]').is_displayed()
    screenshot(browser, artifacts, "demo")
    assert page_errors(browser) == []


def test_at_the_default_zoom_what_the_demo_page_opens_on_shows_every_label(
        browser: Any, demo_recording: Path, tmp_path: Path, artifacts: Path) -> None:
    # the demo's first turns come within a fraction of its length (its flight search is long):
    # fitted to the view, each was a few pixels wide, its label cut to a letter
    page = make_page(demo_recording, tmp_path / "demo.html")
    open_page(browser, page)
    shown = browser.execute_script(
        "const right = document.getElementById('timeline').getBoundingClientRect().right;"
        "return [...document.querySelectorAll('.lane .ev')].filter((e) => e.getBoundingClientRect().left < right)"
        ".map((e) => { const label = e.querySelector('.ev-label') || e;"
        " return [e.dataset.kind, label.textContent, label.clientWidth, label.scrollWidth]; })")
    kinds = {kind for kind, *_ in shown}
    assert {"words", "response", "call", "follow_up"} <= kinds, kinds
    squeezed = [(kind, text, width) for kind, text, width, needed in shown if width < min(needed, 80)]
    screenshot(browser, artifacts, "demo-labels")
    assert squeezed == []
    assert page_errors(browser) == []


@pytest.mark.parametrize("scenario", ["openai_session", "g711_session", "gemini_session"])
def test_the_audio_plays_and_lasts_as_long_as_the_recorded_audio(
        browser: Any, scenario: str, tmp_path: Path, artifacts: Path) -> None:
    facts = getattr(synth, scenario)(tmp_path / "rec")
    page = make_page(facts.path, tmp_path / f"{scenario}.html")
    open_page(browser, page)
    for side, seconds in (("caller", facts.caller_seconds), ("assistant", facts.assistant_seconds)):
        duration = wait_for(browser, f"const p = document.getElementById('player-{side}');"
                                     " return p.src && isFinite(p.duration) && p.duration > 0 ? p.duration : false")
        assert duration == pytest.approx(seconds, rel=0.01), side
    played = browser.execute_async_script(
        "const done = arguments[arguments.length - 1]; const p = document.getElementById('player-caller');"
        " p.muted = true; p.play().then(() => done('playing'), (e) => done(String(e)));")
    assert played == "playing"
    wait_for(browser, "return document.getElementById('player-caller').currentTime > 0")
    wait_for(browser, "return !document.getElementById('playhead-caller').hidden")
    browser.execute_script("document.getElementById('player-caller').pause()")
    screenshot(browser, artifacts, f"audio-{scenario}")
    assert page_errors(browser) == []


def test_clicking_an_event_seeks_the_audio_there(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    facts = synth.openai_session(tmp_path / "rec")
    page = make_page(facts.path, tmp_path / "seek.html")
    open_page(browser, page)
    wait_for(browser, "return isFinite(document.getElementById('player-caller').duration)")
    call = next(e for e in model_of(page)["events"] if e.get("call_id") == "call_1")
    browser.find_element(By.CSS_SELECTOR, '.ev[data-call-id="call_1"]').click()
    position = browser.execute_script("return document.getElementById('player-caller').currentTime")
    # the caller's audio starts at 0.1 s and runs without a gap: the call's start, 0.1 s earlier
    assert position == pytest.approx(call["t0"] - 0.1, abs=0.01)


def test_a_recording_made_with_record_audio_drop_has_no_player_and_says_why(
        browser: Any, tmp_path: Path, artifacts: Path) -> None:
    from selenium.webdriver.common.by import By

    facts = synth.openai_session(tmp_path / "rec", record_audio="drop")
    page = make_page(facts.path, tmp_path / "dropped.html")
    open_page(browser, page)
    note = browser.find_element(By.ID, "audio-note")
    assert note.is_displayed() and "--record-audio drop" in note.text
    for side in ("caller", "assistant"):
        assert not browser.find_element(By.ID, f"player-{side}").is_displayed()
        assert browser.find_element(By.CSS_SELECTOR, f'.lane[data-lane="{side}"] canvas').is_displayed()
    assert_lanes(browser)
    screenshot(browser, artifacts, "record-audio-drop")
    assert page_errors(browser) == []


def _shared() -> list[Path]:
    try:
        return sorted((shared_dir() / "recordings").glob("*.jsonl"))
    except RuntimeError:
        return []


@pytest.mark.parametrize("recording", _shared(), ids=lambda p: p.stem)
def test_every_shared_recording_opens_with_its_lanes_and_calls(
        browser: Any, recording: Path, tmp_path: Path, artifacts: Path) -> None:
    page = make_page(recording, tmp_path / "shared.html")
    open_page(browser, page)
    assert_lanes(browser)
    model = model_of(page)
    if any(e["kind"] == "call" for e in model["events"]):
        assert_calls_on_timeline_with_outputs_and_arguments(browser, model)
    screenshot(browser, artifacts, f"shared-{recording.stem}")
    assert page_errors(browser) == []


CHANGED_TOOLS = '''
from relay.tools import tool

@tool
def get_weather(city: str, unit: str = "celsius") -> dict:
    """Current weather for a city."""
    return {"city": city, "temp_c": 99}
'''


def test_replay_html_marks_every_divergence_and_shows_its_diff(
        browser: Any, demo_recording: Path, tmp_path: Path, artifacts: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from selenium.webdriver.common.by import By

    tools = tmp_path / "changed_tools.py"
    tools.write_text(CHANGED_TOOLS)
    page = tmp_path / "replay.html"
    assert main(["replay", str(demo_recording), "--tools", str(tools), "--json", "--html", str(page)]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["divergences"]
    open_page(browser, page)
    # the page opens zoomed in on the session's start; the whole session shows every divergence
    browser.execute_script("window.inspector.fit()")
    wait_for(browser, "return !window.inspector.state.renderQueued")
    marks = browser.find_elements(By.CSS_SELECTOR, '.lane[data-lane="divergences"] .ev[data-kind="divergence"]')
    # divergences closer than a few pixels at the page's zoom stack, the mark on top counting those under it
    stacked = [int(mark.find_element(By.TAG_NAME, "b").text.lstrip("+")) if mark.find_elements(By.TAG_NAME, "b") else 0
               for mark in marks]
    assert len(marks) + sum(stacked) == len(result["divergences"])
    listed = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#divergences li")]
    assert listed == [f'{d["kind"]}: {d["what"]}' for d in result["divergences"]]
    changed = next(d for d in result["divergences"] if d["what"].startswith("output of"))
    browser.find_element(By.XPATH, f'//*[@id="divergences"]//li[text()="changed: {changed["what"]}"]').click()
    diff = browser.find_element(By.CSS_SELECTOR, "#detail pre.diff").text
    assert "+++ replayed" in diff and '"temp_c": 99' in diff
    assert "divergence" in browser.find_element(By.CSS_SELECTOR, ".verdict").text
    screenshot(browser, artifacts, "replay-divergences")
    assert page_errors(browser) == []
