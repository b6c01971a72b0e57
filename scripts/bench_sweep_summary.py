"""What the sweep summary (memrepro.sweep) adds to a sweep: runs one Hydra multirun (`python -m memrepro run -m
...`) into a temporary folder, then rebuilds its points (each job's overrides from ``<sweep dir>/<n>/.hydra``, its
run from the folder ``sweep.csv`` names) and times the summary as the sweep's process runs it, after importing
what that process has imported: the first call (importing the summary's own modules included), the median of
later calls, and the same at 20× the points. Reported beside the sweep's wall time.

Default: the 6-point α × τ RF-Mem sweep on PersonaBench (MiniLM, compiled engine). Any other sweep: pass its
overrides.

    python scripts/bench_sweep_summary.py
    python scripts/bench_sweep_summary.py dataset=locomo encoder=fake "retriever.k=5,10,20"
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import yaml

DEFAULT = ["dataset=personabench", "encoder=minilm", "retriever=rfmem_personabench", "retriever.engine=compiled",
           "retriever.recollection.alpha=0.1,0.5,0.9", "retriever.gate.tau=0.2,0.3"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="later calls timed (median reported)")
    parser.add_argument("overrides", nargs="*", help=f"the sweep (default: {' '.join(DEFAULT)})")
    args = parser.parse_args()
    import memrepro.cli.run  # noqa: F401  what the sweep's process has imported before its summary
    import memrepro.runner  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="bench_sweep_summary_") as tmp:
        env = {**os.environ, "MEMREPRO_RESULTS_DIR": str(Path(tmp) / "results"),
               "MEMREPRO_LOG_DIR": str(Path(tmp) / "logs")}
        command = [sys.executable, "-m", "memrepro", "run", "-m", *(args.overrides or DEFAULT),
                   "latency.batch1_queries=0", "runtime.progress=false"]
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(f"bench_sweep_summary: the sweep failed ({done.returncode}):\n{done.stderr[-3000:]}")
        [sweep_dir] = [p.parent for p in (Path(tmp) / "logs").rglob("sweep.csv")]
        points = _points(sweep_dir)
        out = Path(tmp) / "summary"
        out.mkdir()

        from memrepro.sweep import write_summary  # timed: the sweep imports it at its end

        start = time.perf_counter()
        write_summary(points, out)
        first = time.perf_counter() - start
        warm = _median(lambda: write_summary(points, out), args.repeats)
        many = [replace(p, overrides=(*p.overrides, f"retriever.note={copy}")) for copy in range(20) for p in points]
        warm_many = _median(lambda: write_summary(many, out), max(3, args.repeats // 4))
    print(f"{len(points)} points, sweep wall {wall:.1f} s, load {os.getloadavg()[0]:.2f}: "
          f"{' '.join(args.overrides or DEFAULT)}")
    print("| summary | s | share of the sweep's wall |")
    print("|---|---|---|")
    for name, seconds in ((f"first call ({len(points)} points, imports included)", first),
                          (f"later calls ({len(points)} points, median of {args.repeats})", warm),
                          (f"later calls ({len(many)} points)", warm_many)):
        print(f"| {name} | {seconds:.3f} | {100 * seconds / wall:.2f} % |")


def _points(sweep_dir: Path) -> list:
    from memrepro.runs.folder import read_record
    from memrepro.sweep import Point

    table = pd.read_csv(sweep_dir / "sweep.csv", dtype=str, keep_default_na=False)
    return [Point(tuple(yaml.safe_load((sweep_dir / str(n) / ".hydra" / "overrides.yaml").read_text())),
                  Path(row["folder"]), read_record(Path(row["folder"])), row["state"])
            for n, row in table.iterrows()]


def _median(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


if __name__ == "__main__":
    main()
