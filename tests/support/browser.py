"""A real headless browser for the web console's tests: Debian's chromium driven through
its chromedriver by selenium, with the page's console messages collected (a test fails
on any error there) and screenshots saved as test artefacts.

Screenshots go to $ODRADEK_TEST_ARTIFACTS (default: test-artifacts/ at the project's
root, ignored by git), one folder per test module.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 20.0  # for an element or a condition of the page


def artifacts_dir(name: str) -> Path:
    base = Path(os.environ.get("ODRADEK_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    path = base / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or None (scripts/test installs both)."""
    for binary in ("chromium", "chromedriver"):
        if shutil.which(binary) is None:
            return f"{binary} is not installed (Debian: apt-get install chromium chromium-driver)"
    return None


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", f"--window-size={width},{height}",
                     "--disable-extensions", "--no-first-run"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options,
                              service=Service(shutil.which("chromedriver") or "chromedriver"))
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: WebDriver) -> list[dict[str, Any]]:
    """The page's console messages at level SEVERE (errors, failed loads, uncaught
    exceptions) since the last call."""
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def wait_for(driver: WebDriver, condition: Callable[[WebDriver], Any],
             what: str, timeout: float = WAIT_S) -> Any:
    """condition(driver)'s first truthy value; fails naming `what` (and the page's errors)
    when there is none in time."""
    def check(d: WebDriver) -> Any:
        try:
            return condition(d)
        except (StaleElementReferenceException, WebDriverException):
            return None  # the page redrew meanwhile: ask again
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(check)
    except Exception as e:
        raise AssertionError(f"{what}: not within {timeout} s; page errors: "
                             f"{console_errors(driver)}") from e
