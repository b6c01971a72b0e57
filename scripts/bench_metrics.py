"""Metric scoring speed, side by side in one process (``make bench``; docs/performance.md#benchmarks).

Retrieves one benchmark once (default LoCoMo raw dense, every split: 4,955 rows), then times, interleaved
``--repeats`` times on the same frozen rankings:

* ``reference``: :func:`compute_metrics_reference` (ir-measures + the list-based definitions, what runs used);
* ``from ranks``: :func:`compute_metrics` (NumPy from gold ranks, what runs use now);
* ``metrics phase``: the runner's whole scoring phase as a run times it (``timings.metrics_s``: rows, gold
  ranks, metrics, aggregation).

Every metric value is checked equal (≤ 1e-12) before a number is printed. Embeddings come from the cache
(``--encoder mpnet`` needs them encoded once); ``--encoder fake`` needs no model.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import memrepro.config  # noqa: F401
from memrepro import stages
from memrepro.evaluation.freeze import freeze
from memrepro.evaluation.metrics import compute_metrics, compute_metrics_reference

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def compose_cfg(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def frozen_rankings(cfg: DictConfig):
    benchmark, _ = stages.load_benchmark(cfg.dataset)
    encoder = stages.build(cfg.encoder)
    retriever = stages.build(cfg.retriever)
    index, query_vectors, _ = stages.encode_and_index(benchmark, encoder, Path(cfg.paths.cache_dir), "cpu",
                                                      False, {})
    rankings = {}
    for split in benchmark.splits:
        queries = list(benchmark.split_queries(split))
        if not queries:  # a split without test questions (small fixtures)
            continue
        vectors = np.stack([query_vectors[q.id] for q in queries])
        for q, r in zip(queries, retriever.retrieve(stages.retrieval_inputs(queries), vectors, index)):
            rankings[(split.name, q.id)] = freeze(q.id, r.hits, benchmark.episodes[q.episode_id], retriever.order)
    return benchmark, rankings


def per_split(benchmark, rankings, names, fn):
    out = {}
    for split in benchmark.splits:
        queries = list(benchmark.split_queries(split))
        values = fn({q.id: rankings[(split.name, q.id)] for q in queries}, queries, names)
        out.update({(split.name, k): v for k, v in values.items()})
    return out


def metrics_phase(benchmark, rankings, names):
    return stages.score_rankings(benchmark, rankings, {}, names, {}, 100)[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", default="locomo")
    parser.add_argument("--encoder", default="mpnet")
    parser.add_argument("--retriever", default="dense")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    args = parser.parse_args()
    cfg = compose_cfg([f"dataset={args.dataset}", f"encoder={args.encoder}", f"retriever={args.retriever}",
                       *args.overrides])
    benchmark, rankings = frozen_rankings(cfg)
    names = list(cfg.metrics.names) or list(benchmark.protocol.metrics)
    rows = sum(1 for split in benchmark.splits for q in benchmark.split_queries(split) if q.scored)

    fast = per_split(benchmark, rankings, names, compute_metrics)
    slow = per_split(benchmark, rankings, names, compute_metrics_reference)
    worst = max((abs(fast[key][m] - slow[key][m]) for key in slow for m in names), default=0.0)
    assert fast.keys() == slow.keys() and worst <= 1e-12, f"metrics differ by {worst}"

    methods = {
        "reference (ir-measures)": lambda: per_split(benchmark, rankings, names, compute_metrics_reference),
        "from ranks (NumPy)": lambda: per_split(benchmark, rankings, names, compute_metrics),
        "metrics phase (run timing)": lambda: metrics_phase(benchmark, rankings, names),
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.repeats):  # interleaved: every method once per round
        for name, fn in methods.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["reference (ir-measures)"])
    print(f"{args.dataset} / {args.retriever} / {args.encoder}: {rows} scored rows, {len(names)} metrics "
          f"({', '.join(names)}); max |Δ| vs reference = {worst:.1e}; {args.repeats} interleaved repeats, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| method | median s | min s | reference / method |")
    print("|---|---|---|---|")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"| {name} | {med:.3f} | {min(values):.3f} | {base / med:.1f}× |")


if __name__ == "__main__":
    main()
