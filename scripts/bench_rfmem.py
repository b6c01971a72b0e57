#!/usr/bin/env python
"""Side-by-side Recollection timing: the compiled engine vs the faithful per-query loop, in one process.

Synthetic pools shaped like the benchmarks the engines serve (docs/retrievers.md#recollection,
docs/retrievers.md#rf-mem-hyper-parameters):

* ``personabench`` — 263 queries over 6 pools of 64–110 memories (PersonaBench, noise 0.0), with the settings
  that reproduce the paper's Recollection R@10 (B=3, F=2, α=0.2, λ_mmr=0.9, K=10, R=10) and R@5 (B=3, F=1,
  α=0.9, K=5, stop after an empty round);
* ``longmemeval`` — 500 queries, each with its own pool of about 50 sessions (LongMemEval-S), Recollection-only
  settings (B=4, F=1, α=0.8, λ_mmr=0.99, K=50, R=50).

Vectors are 768-d unit vectors around a few random "topic" centres per pool, queries near a random memory;
``--duplicates`` copies a share of rows (real pools have duplicate turns/sessions, where KMeans gets empty
clusters). Reports ms/query for each engine, their ratio, and the share of queries whose rankings (and traces)
are identical. Why one process: both engines then see the same data, thread settings and machine load.

    python scripts/bench_rfmem.py --threads 1
    python scripts/bench_rfmem.py --scenario longmemeval --faithful-queries 50
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("all", "personabench", "longmemeval"), default="all")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for BLAS (the faithful engine); 0 leaves the library defaults")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--duplicates", type=float, default=0.0, help="share of pool rows that copy another row")
    parser.add_argument("--faithful-queries", type=int, default=None,
                        help="run the faithful engine on the first N queries only (default: all for "
                             "personabench, 100 for longmemeval); ms/query is per query either way")
    parser.add_argument("--repeat", type=int, default=3, help="compiled runs after one warm-up; the best counts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    return parser.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None and ARGS.threads > 0:  # must precede the NumPy import to reach BLAS and OpenMP
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from memrepro.retrievers.rfmem import compiled  # noqa: E402
from memrepro.retrievers.rfmem.params import RecollectionParams  # noqa: E402
from memrepro.retrievers.rfmem.recollection import recollect_faithful  # noqa: E402

SETTINGS = {
    "personabench": {
        "R@10 (B3 F2 a.2)": RecollectionParams(k=10, beam=3, fanout=2, alpha=0.2, rounds=10, mmr_lambda=0.9,
                                               min_sim=0.0),
        "R@5 (B3 F1 a.9 stop)": RecollectionParams(k=5, beam=3, fanout=1, alpha=0.9, rounds=10, mmr_lambda=0.9,
                                                   min_sim=0.0, after_empty_round="stop"),
    },
    "longmemeval": {
        "S recollection (B4 F1 a.8)": RecollectionParams(k=50, beam=4, fanout=1, alpha=0.8, rounds=50,
                                                         mmr_lambda=0.99, min_sim=0.0),
    },
}


def topic_pool(rng: np.random.Generator, n: int, dim: int, duplicates: float) -> np.ndarray:
    """Unit vectors around 4–8 random topic centres; optionally some rows are exact copies of others."""
    centres = rng.standard_normal((int(rng.integers(4, 9)), dim))
    rows = centres[rng.integers(0, len(centres), n)] + 0.8 * rng.standard_normal((n, dim))
    if duplicates > 0:
        copies = np.flatnonzero(rng.random(n) < duplicates)
        rows[copies] = rows[rng.integers(0, n, len(copies))]
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def near_query(rng: np.random.Generator, pool: np.ndarray) -> np.ndarray:
    q = pool[rng.integers(0, len(pool))] + 1.2 * rng.standard_normal(pool.shape[1]) / np.sqrt(pool.shape[1]) * 8
    return (q / np.linalg.norm(q)).astype(np.float32)


def make_scenario(name: str, rng: np.random.Generator, dim: int, duplicates: float):
    """Returns (query vectors (b, d), padded pools (b, L, d), lengths (b,), per-query NumPy pools)."""
    if name == "personabench":
        pools = [topic_pool(rng, int(rng.integers(64, 111)), dim, duplicates) for _ in range(6)]
        owner = np.sort(rng.integers(0, 6, 263))
    else:
        pools = [topic_pool(rng, int(rng.integers(45, 56)), dim, duplicates) for _ in range(500)]
        owner = np.arange(500)
    q0s = np.stack([near_query(rng, pools[o]) for o in owner])
    width = max(len(p) for p in pools)
    stacked = np.zeros((len(pools), width, dim), dtype=np.float32)
    for i, p in enumerate(pools):
        stacked[i, :len(p)] = p
    lengths = np.array([len(pools[o]) for o in owner])
    return q0s, stacked[owner], lengths, [pools[o] for o in owner]


def bench(name: str, label: str, params: RecollectionParams, data, args: argparse.Namespace) -> dict:
    q0s, padded, lengths, per_query = data
    b = len(q0s)
    compiled.warm_up()  # compile or load the kernels outside the timed calls
    best = float("inf")
    results = None
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        results = compiled.recollect_compiled(q0s, padded, lengths, np.arange(b), params).results
        best = min(best, time.perf_counter() - start)
    n_faithful = min(args.faithful_queries or (b if name == "personabench" else 100), b)
    start = time.perf_counter()
    faithful = [recollect_faithful(q0s[i], per_query[i], params) for i in range(n_faithful)]
    faithful_s = time.perf_counter() - start
    same = [results[i].positions == faithful[i].positions for i in range(n_faithful)]
    same_trace = [results[i].trace == faithful[i].trace for i in range(n_faithful)]
    score_gap = max([float(np.max(np.abs(np.subtract(results[i].scores, faithful[i].scores))))
                     for i in range(n_faithful) if same[i] and faithful[i].scores] or [0.0])
    row = {
        "scenario": name, "setting": label, "threads": args.threads, "queries": b, "faithful_queries": n_faithful,
        "duplicates": args.duplicates, "compiled_ms_per_query": 1000 * best / b,
        "faithful_ms_per_query": 1000 * faithful_s / n_faithful, "identical_rankings": sum(same) / n_faithful,
        "identical_traces": sum(same_trace) / n_faithful, "max_score_gap_when_identical": score_gap,
        "mean_output_length": float(np.mean([len(r.positions) for r in results])),
    }
    row["speedup"] = row["faithful_ms_per_query"] / row["compiled_ms_per_query"]
    return row


def main(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    scenarios = ["personabench", "longmemeval"] if args.scenario == "all" else [args.scenario]
    rows = []
    print(f"threads={args.threads}, dim={args.dim}, duplicates={args.duplicates}")
    header = f"{'scenario':13} {'setting':28} {'compiled ms/q':>13} {'faithful ms/q':>13} {'speedup':>8} " \
             f"{'identical':>10} {'traces':>7}"
    print(header)
    for name in scenarios:
        data = make_scenario(name, rng, args.dim, args.duplicates)
        for label, params in SETTINGS[name].items():
            row = bench(name, label, params, data, args)
            rows.append(row)
            print(f"{name:13} {label:28} {row['compiled_ms_per_query']:13.3f} {row['faithful_ms_per_query']:13.3f} "
                  f"{row['speedup']:8.1f} {row['identical_rankings']:10.1%} {row['identical_traces']:7.1%}",
                  flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main(ARGS)
