"""The report in a real browser: headless Chromium (Debian's chromium + chromedriver, driven by Selenium) opens every
page of a small fixture site from file:// with no JavaScript console error; the explorer's filter changes the row
count; a chart is drawn; a link from the reproduction summary reaches its table. Where no browser can be had, every
test here skips with the reason (memrepro.site.browser.unavailable)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from report_site import build_site, make_runs

from memrepro.site.browser import chromium, console_errors, unavailable

REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no headless Chromium: {REASON}")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path):
    root = tmp_path_factory.mktemp("report_browser")
    return build_site(make_runs(root, fixtures_dir), fixtures_dir).site


@pytest.fixture(scope="module")
def browser():
    with chromium(1280, 900) as driver:
        yield driver


def _open(driver, page: Path, fragment: str = "") -> None:
    driver.get(page.resolve().as_uri() + (f"#{fragment}" if fragment else ""))


def _wait(condition, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the page")


def test_every_page_loads_from_disk_without_a_console_error(site: Path, browser) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 10  # index, reproduction, runs, 5 run pages, a sweep, a comparison
    console_errors(browser)  # start clean
    for page in pages:
        _open(browser, page)
        _wait(lambda: browser.execute_script("return document.readyState") == "complete")
        # charts are drawn on DOMContentLoaded: every chart's placeholder is replaced by Plotly's SVG
        _wait(lambda: browser.execute_script(
            "return [...document.querySelectorAll('script[data-chart]')].every("
            "s => document.getElementById(s.dataset.chart).querySelector('.main-svg'))"))
        assert console_errors(browser) == [], page


def test_a_chart_is_drawn(site: Path, browser) -> None:
    run = sorted((site / "runs").glob("*.html"))[0]
    _open(browser, run)
    bars = _wait(lambda: browser.execute_script(
        "return document.querySelectorAll('#miss-chart .main-svg .bars path').length"))
    assert bars > 0


def test_the_explorer_filter_changes_the_row_count(site: Path, browser) -> None:
    run = sorted((site / "runs").glob("*.html"))[0]
    _open(browser, run)
    browser.execute_script("document.querySelector('details.explorer > summary').click()")
    status = lambda: browser.execute_script(  # noqa: E731
        "return document.querySelector('.explorer-status').dataset.matching")
    everything = int(_wait(status))
    rows = browser.execute_script("return document.querySelectorAll('.explorer-table tbody tr').length")
    assert everything > 1 and rows == min(everything, 25)
    texts = browser.execute_script("return document.querySelector('.explorer-table tbody .txt').textContent")
    assert texts and not texts.startswith("conv-")  # the query's text, not its id
    options = browser.execute_script("return [...document.querySelectorAll('.f-category option')].map(o => o.value)")
    counts = []
    for value in options[1:]:
        browser.execute_script(
            "const s = document.querySelector('.f-category'); s.value = arguments[0];"
            "s.dispatchEvent(new Event('change'));", value)
        counts.append(int(status()))
        shown = browser.execute_script("return document.querySelectorAll('.explorer-table tbody tr').length")
        assert shown == min(int(status()), 25)
    assert all(count < everything for count in counts) and sum(counts) == everything
    browser.execute_script(
        "const s = document.querySelector('.f-category'); s.value = ''; s.dispatchEvent(new Event('change'));"
        "const q = document.querySelector('.f-search'); q.value = 'zzz-no-such-text';"
        "q.dispatchEvent(new Event('input'));")
    assert int(status()) == 0


def test_a_link_from_the_reproduction_summary_reaches_its_table(site: Path, browser) -> None:
    _open(browser, site / "index.html")
    link = browser.find_element("css selector", "#summary a[href='reproduction.html#fixture_table']")
    link.click()
    _wait(lambda: browser.current_url.endswith("reproduction.html#fixture_table"))
    visible = browser.execute_script(
        "const r = document.getElementById('fixture_table').getBoundingClientRect();"
        "return r.top >= 0 && r.top < window.innerHeight")
    assert visible
    cells = browser.execute_script("return document.querySelectorAll('#fixture_table td.cell').length")
    assert cells == 8


def test_a_page_with_a_script_error_is_caught(tmp_path: Path, browser) -> None:
    """The console check above can fail: a page whose script throws reports a SEVERE message."""
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><html><body><script>notDefinedAnywhere();</script></body></html>")
    console_errors(browser)
    _open(browser, page)
    _wait(lambda: browser.execute_script("return document.readyState") == "complete")
    assert any("notDefinedAnywhere" in message for message in console_errors(browser))
