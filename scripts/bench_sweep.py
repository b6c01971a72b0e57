"""Where a sweep's wall time goes (docs/performance.md#where-the-time-goes): runs one Hydra multirun
(`python -m memrepro run -m ...`) into a fresh results folder, times its wall clock from outside, and reads every
point's ``metrics.json`` timings back: retrieval, batch-1 latency, encode/index, scoring, and the rest (process
start, Hydra, writing). Then the sweep summary printed at its end (memrepro.sweep), timed as the sweep's process
runs it on the sweep's own points (each job's overrides from ``<sweep dir>/<n>/.hydra``, its run from the folder
``sweep.csv`` names): the first call with its imports, the median of later calls, and at 20× the points.

Default: the 36-point α × τ RF-Mem sweep on PersonaBench (mpnet, compiled engine) from cached embeddings, where
retrieval is cheapest next to the per-point overhead. Any other sweep: pass its overrides.

    python scripts/bench_sweep.py
    python scripts/bench_sweep.py dataset=personabench encoder=minilm "retriever.k=5,10,20"
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

from memrepro.runs.folder import COMPLETE, read_record

DEFAULT = ["dataset=personabench", "encoder=mpnet", "retriever=rfmem_personabench", "retriever.engine=compiled",
           "retriever.recollection.alpha=0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9", "retriever.gate.tau=0.15,0.2,0.25,0.3"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch1", choices=["off", "once", "every"], default="off",
                        help="batch-1 latency: off (latency.batch1_queries=0), once per sweep, or every point")
    parser.add_argument("--sweeper", choices=["memrepro", "basic"], default="memrepro",
                        help="hydra/sweeper: memrepro's (compose once per group choice) or Hydra's basic one")
    parser.add_argument("--repeats", type=int, default=20, help="later calls of the sweep summary timed (median)")
    parser.add_argument("overrides", nargs="*", help=f"the sweep (default: {' '.join(DEFAULT)})")
    args = parser.parse_args()
    latency = {"off": ["latency.batch1_queries=0"], "once": ["latency.batch1_once=true"], "every": []}[args.batch1]
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        env = {**os.environ, "MEMREPRO_RESULTS_DIR": str(Path(tmp) / "results"),
               "MEMREPRO_LOG_DIR": str(Path(tmp) / "logs")}
        command = [sys.executable, "-m", "memrepro", "run", "-m", f"hydra/sweeper={args.sweeper}",
                   *(args.overrides or DEFAULT), *latency,
                   "runtime.progress=false"]
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(f"bench_sweep: the sweep failed ({done.returncode}):\n{done.stderr[-3000:]}")
        # read back as every reader does: complete runs only, metrics.json validated field by field
        records = [read_record(marker.parent) for marker in (Path(tmp) / "results").rglob(COMPLETE)]
        summary = _time_summary(Path(tmp), args.repeats) if records else {}
    if not records:
        raise SystemExit("bench_sweep: the sweep wrote no complete run")
    total = lambda key: sum(float(r.timings.get(key) or 0.0) for r in records)  # noqa: E731
    batch1 = [r.latency.batch1 for r in records]
    setup = {k for r in records for k in r.timings if k.endswith("_s")} - {"retrieve_s", "metrics_s"}
    parts = {"retrieval (batched)": total("retrieve_s"),
             # the timed calls only (warm-up calls are not recorded)
             "batch-1 latency pass": sum(b.get("n", 0) * (b.get("mean_ms") or 0.0) for b in batch1) / 1000.0,
             f"setup ({', '.join(sorted(k.removesuffix('_s') for k in setup))})": sum(map(total, setup)),
             "scoring": total("metrics_s")}
    parts["rest (process, Hydra, writing)"] = wall - sum(parts.values())
    print(f"{len(records)} points, wall {wall:.1f} s, sweeper {args.sweeper}, batch-1 {args.batch1}, "
          f"load {os.getloadavg()[0]:.2f}: {' '.join(args.overrides or DEFAULT)}")
    print("| part | s | share of wall |")
    print("|---|---|---|")
    for name, seconds in parts.items():
        print(f"| {name} | {seconds:.2f} | {100 * seconds / wall:.1f} % |")
    if summary:
        print("\n| sweep summary at the end (memrepro.sweep) | s | share of wall |")
        print("|---|---|---|")
    for name, seconds in summary.items():
        print(f"| {name} | {seconds:.3f} | {100 * seconds / wall:.2f} % |")


def _time_summary(tmp: Path, repeats: int) -> dict[str, float]:
    """The summary of the sweep under ``tmp`` timed as the sweep's process runs it, after what that process has
    imported by then (empty when the sweep wrote none: ``hydra/sweeper=basic``)."""
    import memrepro.cli.run  # noqa: F401
    import memrepro.runner  # noqa: F401

    found = [p.parent for p in (tmp / "logs").rglob("sweep.csv")]
    if not found:
        return {}
    began = time.perf_counter()
    from memrepro.sweep import Point, write_summary  # the sweep imports it at its end

    imports = time.perf_counter() - began
    table = pd.read_csv(found[0] / "sweep.csv", dtype=str, keep_default_na=False)
    points = [Point(tuple(yaml.safe_load((found[0] / str(n) / ".hydra" / "overrides.yaml").read_text())),
                    Path(row["folder"]), read_record(Path(row["folder"])), row["state"])
              for n, row in table.iterrows()]
    out = tmp / "summary"
    out.mkdir()
    many = [replace(p, overrides=(*p.overrides, f"retriever.note={copy}")) for copy in range(20) for p in points]
    first = imports + _median(lambda: write_summary(points, out), 1)
    return {f"first call ({len(points)} points, imports included)": first,
            f"later calls ({len(points)} points, median of {repeats})": _median(lambda: write_summary(points, out),
                                                                             repeats),
            f"later calls ({len(many)} points)": _median(lambda: write_summary(many, out), max(3, repeats // 4))}


def _median(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


if __name__ == "__main__":
    main()
