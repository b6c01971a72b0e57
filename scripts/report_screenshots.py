"""Screenshots of the report for the documentation (docs/images/report-*.png), taken with headless Chromium from a
built report (``python -m memrepro report`` first): the summary, a LoCoMo run page at its miss breakdown with the
explorer open, the cascade-vs-v1 comparison and a sweep.

    python scripts/report_screenshots.py --site results/report --out docs/images
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from memrepro.site.browser import chromium, console_errors, unavailable

WIDTH = 1400


def shoot(driver, page: Path, target: Path, height: int, anchor: str = "", open_explorer: bool = False) -> None:
    driver.set_window_size(WIDTH, height)
    driver.get(page.resolve().as_uri())
    deadline = time.monotonic() + 30
    while not driver.execute_script(
            "return [...document.querySelectorAll('script[data-chart]')].every("
            "s => document.getElementById(s.dataset.chart).querySelector('.main-svg'))"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{page}: charts not drawn")
        time.sleep(0.05)
    if open_explorer:
        driver.execute_script("document.querySelector('details.explorer').open = true")
        while not driver.execute_script("return document.querySelectorAll('.explorer-table tbody tr').length"):
            time.sleep(0.05)
    if anchor:
        driver.execute_script("document.getElementById(arguments[0]).scrollIntoView()", anchor)
        driver.execute_script("window.scrollBy(0, -48)")  # below the sticky header
    time.sleep(0.4)
    errors = console_errors(driver)
    if errors:
        raise SystemExit(f"{page}: console errors: {errors}")
    target.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(target))
    print(f"{target}: {page}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", default="results/report")
    parser.add_argument("--out", default="docs/images")
    parser.add_argument("--comparison", default="locomo_cascade_vs_v1", help="compare/<name>.html to show")
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        raise SystemExit(f"report_screenshots: {reason}")
    site, out = Path(args.site), Path(args.out)
    comparison = site / "compare" / f"{args.comparison}.html"
    # the compared run of the comparison (its second run link) is the run page shown
    runs = re.findall(r'href="\.\./runs/([0-9a-f]{16})\.html"', comparison.read_text(encoding="utf-8"))
    run = site / "runs" / f"{runs[1]}.html"
    sweeps = sorted((site / "sweeps").glob("*alpha-tau*.html")) or sorted((site / "sweeps").glob("*.html"))
    with chromium(WIDTH, 1000) as driver:
        shoot(driver, site / "index.html", out / "report-index.png", 1100)
        shoot(driver, run, out / "report-run.png", 1500, anchor="misses", open_explorer=True)
        shoot(driver, comparison, out / "report-compare.png", 1250)
        shoot(driver, sweeps[0], out / "report-sweep.png", 1150)


if __name__ == "__main__":
    main()
