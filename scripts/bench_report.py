"""The report's cost: ``python -m memrepro report`` over every run on the machine (results/runs and the kept runs),
the size of the site it writes, and how fast its largest pages become interactive in headless Chromium.

Measured: the build's wall time and CPU time (this process's children: the report and its worker), with the load
average of the machine before and after (other work on a shared CPU stretches wall time); the site's size in
bytes; for the LoCoMo and LongMemEval-S run pages with the most rows, the time from asking for the page to its
charts drawn, and from opening its per-query explorer to the first rows shown (median of ``--repeats``, the
browser already running). Targets: build ≤ 60 s, site ≤ 50 MB, a LoCoMo run page interactive ≤ 2 s.

    python scripts/bench_report.py                   # builds into a temporary folder
    python scripts/bench_report.py --out results/report --repeats 5
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memrepro.site.browser import chromium, console_errors, unavailable

TARGETS = {"build_s": 60.0, "site_mb": 50.0, "page_s": 2.0}


def build(out: Path, results: str, kept: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "memrepro", "report", "--results", results, "--kept", kept,
                           "--out", str(out)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"bench_report: the report failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    print(done.stdout.strip())
    left_out = [line for line in done.stderr.splitlines() if "skipped" in line]
    if left_out:
        print(f"  ({len(left_out)} run folders left out, named by the report)")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def largest_run_page(site: Path, dataset: str) -> tuple[Path, int] | None:
    """The run page of ``dataset`` with the most explorer rows (from the runs list)."""
    best = None
    for page in sorted((site / "runs").glob("*.html")):
        text = page.read_text(encoding="utf-8")
        if f'<p class="subtitle">{dataset} · ' not in text:
            continue
        rows = int(re.search(r'"rows":(\d+)', text).group(1))
        if best is None or rows > best[1]:
            best = (page, rows)
    return best


def interactive(driver, page: Path, repeats: int) -> tuple[float, float, list[str]]:
    """Median seconds to charts drawn, and from opening the explorer to its first rows; console errors seen."""
    loads, explorers, errors = [], [], []
    charts_drawn = ("return [...document.querySelectorAll('script[data-chart]')].every("
                    "s => document.getElementById(s.dataset.chart).querySelector('.main-svg'))")
    for _ in range(repeats):
        driver.get("about:blank")
        start = time.perf_counter()
        driver.get(page.resolve().as_uri())
        wait(lambda: driver.execute_script(charts_drawn))
        loads.append(time.perf_counter() - start)
        start = time.perf_counter()
        driver.execute_script("document.querySelector('details.explorer > summary').click()")
        wait(lambda: driver.execute_script(
            "return document.querySelector('.explorer-status').dataset.matching !== undefined && "
            "document.querySelectorAll('.explorer-table tbody tr').length > 0"))
        explorers.append(time.perf_counter() - start)
        errors += console_errors(driver)
    return statistics.median(loads), statistics.median(explorers), errors


def wait(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the page did not become interactive within 60 s")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=os.environ.get("MEMREPRO_RESULTS_DIR", "results"))
    parser.add_argument("--kept", default=os.environ.get("MEMREPRO_KEPT_DIR", "results/kept"))
    parser.add_argument("--out", default=None, help="the site folder (default: a temporary one, removed after)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    temporary = args.out is None
    out = Path(tempfile.mkdtemp(prefix="memrepro-report-bench-")) / "report" if temporary else Path(args.out)
    try:
        load_before = os.getloadavg()[0]
        wall, cpu = build(out, args.results, args.kept)
        load_after = os.getloadavg()[0]
        megabytes = size(out) / 1e6
        print(f"build: {wall:.1f} s wall, {cpu:.1f} s CPU (report + worker); load average {load_before:.1f} before, "
              f"{load_after:.1f} after, on {os.cpu_count()} CPUs  (target ≤ {TARGETS['build_s']:.0f} s)")
        print(f"site: {megabytes:.1f} MB in {sum(1 for p in out.rglob('*') if p.is_file())} files  "
              f"(target ≤ {TARGETS['site_mb']:.0f} MB)")
        reason = unavailable()
        if reason:
            print(f"pages: not measured: {reason}")
            return
        with chromium(1400, 1000) as driver:
            for dataset in ("locomo", "longmemeval_s"):
                found = largest_run_page(out, dataset)
                if found is None:
                    print(f"pages: no {dataset} run page")
                    continue
                page, rows = found
                load, explorer, errors = interactive(driver, page, args.repeats)
                print(f"{dataset} run page ({rows:,} explorer rows, {page.name}): charts drawn {load:.2f} s, "
                      f"explorer rows shown {explorer:.2f} s after opening it (median of {args.repeats}); "
                      f"{len(errors)} console errors  (target ≤ {TARGETS['page_s']:.0f} s)")
    finally:
        if temporary:
            shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
