"""Agreement and speed of two runs of the same configuration that differ only in ``retriever.engine``.

Pairs every complete run under ``--results`` whose config differs only by the engine, then prints per pair the
share of identical rankings (top-N lists as stored), the delta of every primary metric, and the ratio of the
batched retrieval wall time (``timings.retrieve_s``, same process conditions) — the numbers issue #4 asks for.
Example: ``python scripts/compare_engines.py --results /tmp/sweep_results``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import yaml

from memrepro.results import COMPLETE, read_queries


def key(folder: Path) -> str:
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    retriever = dict(cfg["retriever"])
    retriever.pop("engine", None)
    return json.dumps({"dataset": cfg["dataset"], "encoder": cfg["encoder"].get("model"), "retriever": retriever},
                      sort_keys=True, default=str)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", default="results")
    args = parser.parse_args()
    runs: dict[str, dict[str, Path]] = {}
    for marker in Path(args.results).rglob(COMPLETE):
        folder = marker.parent
        engine = yaml.safe_load((folder / "config.yaml").read_text())["retriever"].get("engine")
        if engine:
            runs.setdefault(key(folder), {})[engine] = folder
    pairs = [(v["faithful"], v["batched"]) for v in runs.values() if {"faithful", "batched"} <= set(v)]
    if not pairs:
        raise SystemExit("no faithful/batched pairs found")
    same_share, speedups, deltas = [], [], []
    for faithful, batched in sorted(pairs):
        a, b = read_queries(faithful), read_queries(batched)
        same = statistics.fmean(float([m for m, _ in x["top"]] == [m for m, _ in y["top"]]) for x, y in zip(a, b))
        ma, mb = (json.loads((f / "metrics.json").read_text()) for f in (faithful, batched))
        primary = ma["primary"][0]
        delta = mb["summary"]["pooled"][primary] - ma["summary"]["pooled"][primary]
        speedup = ma["timings"]["retrieve_s"] / max(1e-9, mb["timings"]["retrieve_s"])
        same_share.append(same)
        speedups.append(speedup)
        deltas.append(delta)
        print(f"{faithful.name} vs {batched.name}: identical rankings {same:.2%}, Δ{primary} {delta:+.4f}, "
              f"retrieval {ma['timings']['retrieve_s']:.2f}s vs {mb['timings']['retrieve_s']:.2f}s ({speedup:.1f}x)")
    print(f"\n{len(pairs)} pairs: identical rankings mean {statistics.fmean(same_share):.2%} (min "
          f"{min(same_share):.2%}); |Δ| max {max(abs(d) for d in deltas):.4f}; batched speed-up median "
          f"{statistics.median(speedups):.1f}x (min {min(speedups):.1f}x, max {max(speedups):.1f}x)")


if __name__ == "__main__":
    main()
