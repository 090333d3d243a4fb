#!/usr/bin/env python3
"""docs/inspector.png: the inspector page of the demo's session, in headless Chromium.

Runs `relay demo` into a temporary directory, writes its inspector page, opens it, selects the
slow flight search (so the detail panel shows a call) and saves the screenshot.

Usage: .venv/bin/python scripts/inspector_screenshot.py [--out docs/inspector.png]
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from relay.cli.demo import EXAMPLE_TOOLS, run_demo  # noqa: E402
from tests.support.chromium import chromium, missing_reason  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "inspector.png"))
    args = parser.parse_args()
    reason = missing_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with tempfile.TemporaryDirectory() as directory:
        anyio.run(lambda: run_demo(tools=str(EXAMPLE_TOOLS), record_dir=directory, color=False, out=io.StringIO()))
        [page] = Path(directory).glob("*.html")
        with chromium(1400, 1000) as driver:
            driver.get(page.as_uri())
            WebDriverWait(driver, 30).until(lambda d: d.execute_script("return !!window.inspector.timings.firstRender"))
            call = driver.find_element(By.CSS_SELECTOR, '.ev[data-kind="call"][data-outcome="ok"]:last-of-type')
            driver.execute_script("window.inspector.select(arguments[0])", call.get_attribute("data-id"))
            driver.save_screenshot(args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
