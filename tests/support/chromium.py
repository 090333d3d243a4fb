"""Headless Chromium for the inspector's browser tests, benchmark and screenshot (test support:
not in the package, which has no use for a browser).

Debian's `chromium` with its `chromium-driver`, driven by selenium: the driver comes from the same
source package as the browser, so their versions always match, and nothing is downloaded (the
driver's path is given, so selenium's own driver manager never runs).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

INSTALL_HINT = "apt-get install -y chromium chromium-driver"
LAUNCH_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--autoplay-policy=no-user-gesture-required", "--mute-audio")


def find_chromium() -> tuple[str, str] | None:
    """(browser, driver) paths, or None when either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
    return (browser, driver) if browser and driver else None


def missing_reason() -> str | None:
    """Why no browser can run here (naming the install command), or None when one can."""
    if find_chromium() is None:
        return f"headless Chromium is not installed: {INSTALL_HINT}"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[dev]'"
    return None


@contextmanager
def chromium(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A selenium WebDriver on headless Chromium with a fresh profile, closed afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_chromium()
    if found is None:
        raise RuntimeError(f"headless Chromium is not installed: {INSTALL_HINT}")
    browser, driver_path = found
    profile = tempfile.mkdtemp(prefix="relay-inspector-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in LAUNCH_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
