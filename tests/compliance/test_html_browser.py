"""The review page in a real browser: Debian's Chromium, headless, driven by selenium (issue 51 item 4).

Skipped where Chromium, its driver or selenium is missing, except under CI (``CI=true``), where
.ci/run installs them: there a missing browser is a failure, not a skip. The browser starts with
networking features off and a fresh profile; the page comes from a ``file://`` URL.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compliance.review_page import REPO, ROUND, RTL_NAME, SCRIPT_NAME, hostile_tree, review_page

pytestmark = pytest.mark.slow  # a browser start is seconds; CI runs the slow set

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1200,900")
SCREENSHOT = REPO / "docs" / "images" / "review-page.png"


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(path) is None:
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    missing = _missing()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI installs the browser: {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("page")
    output = base / "report.html"
    review_page(hostile_tree(base), output)
    return output


def _open(driver: Any, page: Path) -> list[dict[str, Any]]:
    driver.get_log("browser")  # drop what an earlier page logged
    driver.get(page.as_uri())
    return [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]


def test_the_page_loads_without_console_errors(browser: Any, hostile_page: Path) -> None:
    assert _open(browser, hostile_page) == []
    assert browser.title == f"compliance: {ROUND} — FAIL"
    assert browser.execute_script("return document.scripts.length") == 1  # the page's own script only


def test_hostile_file_names_render_as_text(browser: Any, hostile_page: Path) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    _open(browser, hostile_page)
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert  # noqa: B018  (reading it raises when no script ran alert())
    paths = [element.text for element in browser.find_elements(By.CSS_SELECTOR, ".path")]
    assert any(text.endswith(SCRIPT_NAME) for text in paths), paths
    assert any(text.endswith(RTL_NAME.replace("\u202e", "\\u202e")) for text in paths), paths
    assert not any("\u202e" in text for text in paths)


def test_the_filter_hides_what_does_not_match(browser: Any, hostile_page: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    _open(browser, hostile_page)
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.row")
    total = len(rows)
    assert total >= 6 and all(row.is_displayed() for row in rows)
    browser.find_element(By.ID, "filter").send_keys("attention")
    visible = [row for row in rows if row.is_displayed()]
    assert visible and all("attention.cu" in row.text for row in visible)
    assert browser.find_element(By.ID, "shown").text == f"{len(visible)} of {total} rows shown"
    groups = browser.find_elements(By.CSS_SELECTOR, "[data-group]")
    assert any(not g.is_displayed() for g in groups)  # a group with no matching row is hidden
    browser.find_element(By.ID, "filter").clear()
    Select(browser.find_element(By.ID, "level")).select_by_value("error")
    errors = [row for row in rows if row.is_displayed()]
    assert errors and all(row.get_attribute("data-level") == "error" for row in errors)


def save_example_screenshot(driver: Any, workdir: Path, output: Path = SCREENSHOT) -> Path:
    """The example's page (``submissions_example`` against training/v0.7), as docs/images shows it."""
    page = workdir / "example.html"
    review_page(REPO / "submissions_example", page)
    driver.get(page.as_uri())
    output.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(output))
    return output


def test_the_docs_screenshot_is_small(browser: Any, tmp_path: Path) -> None:
    """docs/images/review-page.png is the example's page (regenerate: ``UPDATE_SCREENSHOT=1``)."""
    if os.environ.get("UPDATE_SCREENSHOT") == "1":
        save_example_screenshot(browser, tmp_path)
    assert SCREENSHOT.is_file() and SCREENSHOT.stat().st_size < 150_000
    assert SCREENSHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
