"""Driving the inspector page in headless Chromium (selenium with Debian's chromium-driver): make a
page, open it, wait on what it shows, and the checks a person would make of lanes and calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from relay.cli import main

WAIT = 30.0
LANE_IDS = ("caller", "assistant", "user_words", "assistant_words", "responses", "calls", "relay", "anomalies")


def make_page(recording: Path, out: Path, *extra: str) -> Path:
    assert main(["inspect", str(recording), "--out", str(out), *extra]) == 0
    return out


def open_page(browser: Any, page: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(page.resolve().as_uri())
    WebDriverWait(browser, WAIT).until(
        lambda d: d.execute_script("return !!(window.inspector && window.inspector.timings.firstRender)"))


def screenshot(browser: Any, artifacts: Path, name: str) -> None:
    browser.save_screenshot(str(artifacts / f"inspector-{name}.png"))


def page_errors(browser: Any) -> list[str]:
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def model_of(page: Path) -> dict[str, Any]:
    return json.loads(page.read_text().split('id="inspector-model">', 1)[1].split("</script>", 1)[0])


def wait_for(browser: Any, script: str, timeout: float = WAIT) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(lambda d: d.execute_script(script))


def normalised(text: str) -> str:
    return " ".join(text.split())


def assert_lanes(browser: Any) -> None:
    from selenium.webdriver.common.by import By

    for lane in LANE_IDS:
        label = browser.find_element(By.CSS_SELECTOR, f'.lane-label[data-lane="{lane}"]')
        assert label.is_displayed(), lane
        assert browser.find_element(By.CSS_SELECTOR, f'.lane[data-lane="{lane}"]').is_displayed(), lane


def assert_calls_on_timeline_with_outputs_and_arguments(browser: Any, model: dict[str, Any]) -> None:
    from selenium.webdriver.common.by import By

    calls = [e for e in model["events"] if e["kind"] == "call"]
    assert calls
    for call in calls:
        element = browser.find_element(By.CSS_SELECTOR, f'.ev[data-kind="call"][data-call-id="{call["call_id"]}"]')
        assert element.is_displayed()
        tooltip = normalised(element.get_attribute("title"))
        expected_output = normalised(call["output"])[:100] if call["output"] is not None else "(none)"
        assert expected_output in tooltip, (call["call_id"], tooltip)
        element.click()
        detail = browser.find_element(By.ID, "detail")
        assert detail.find_element(By.CSS_SELECTOR, ".call-name").text == call["name"]
        shown = detail.find_element(By.CSS_SELECTOR, "pre.arguments").text
        if call["arguments"]:
            assert json.loads(shown) == json.loads(call["arguments"])
        else:
            assert shown == ""       # a log fragment that never carried them
        output = detail.find_element(By.CSS_SELECTOR, "pre.output").text
        if call["output"] is not None:
            try:
                assert json.loads(output) == json.loads(call["output"])
            except ValueError:
                assert output == call["output"]
