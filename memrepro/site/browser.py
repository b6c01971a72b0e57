"""Headless Chromium for the report's browser tests, its benchmark and its screenshots: Debian's ``chromium`` and
``chromedriver`` (``apt-get install chromium chromium-driver``) driven by Selenium, nothing downloaded at run time.

:func:`unavailable` says in one line why no browser can be had (the tests skip with it); :func:`chromium` starts
one with a fresh profile and every background network feature off.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CHROMIUM = os.environ.get("MEMREPRO_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MEMREPRO_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")


def unavailable() -> str | None:
    """Why headless Chromium cannot be driven here (None when it can)."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (Path(path).is_file() and os.access(path, os.X_OK)):
            return f"{path} not found (Debian package {package}: apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the selenium package is not installed (pip install selenium; it is in memrepro's test extra)"
    return None


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[object]:
    """A Selenium Chrome driver on headless Chromium that records the browser console (``driver.get_log``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="memrepro-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver: object) -> list[str]:
    """The console messages of level SEVERE since the last call (JavaScript errors, failed loads)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
