"""Where a sweep's wall time goes (docs/performance.md#where-the-time-goes): runs one Hydra multirun
(`python -m memrepro run -m ...`) into a fresh results folder, times its wall clock from outside, and reads every
point's ``metrics.json`` timings back: retrieval, batch-1 latency, encode/index, scoring, and the rest (process
start, Hydra, writing).

Default: the 36-point α × τ RF-Mem sweep on PersonaBench (mpnet, compiled engine) from cached embeddings, where
retrieval is cheapest next to the per-point overhead. Any other sweep: pass its overrides.

    python scripts/bench_sweep.py
    python scripts/bench_sweep.py dataset=personabench encoder=minilm "retriever.k=5,10,20"
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memrepro.runs.folder import COMPLETE, read_record

DEFAULT = ["dataset=personabench", "encoder=mpnet", "retriever=rfmem_personabench", "retriever.engine=compiled",
           "retriever.recollection.alpha=0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9", "retriever.gate.tau=0.15,0.2,0.25,0.3"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch1", choices=["off", "once", "every"], default="off",
                        help="batch-1 latency: off (latency.batch1_queries=0), once per sweep, or every point")
    parser.add_argument("--sweeper", choices=["memrepro", "basic"], default="memrepro",
                        help="hydra/sweeper: memrepro's (compose once per group choice) or Hydra's basic one")
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


if __name__ == "__main__":
    main()
