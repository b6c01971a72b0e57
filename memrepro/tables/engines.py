"""Faithful vs batched Recollection engines: agreement and speed, from pairs of runs that differ only in the engine.

A pair is two complete runs whose dataset, encoder and retriever settings are equal except ``engine``. Per pair:
the share of queries with identical stored top-N lists, the delta of every primary metric (pooled), and the
retrieval wall time of each (``timings.retrieve_s``, the whole query set through ``retrieve``) with their ratio.
The two runs of a pair ran in separate processes, usually one after the other; the ratio is a measurement of
this machine under its load at the time, not a constant.
"""

from __future__ import annotations

import json
import statistics
from typing import Any, Sequence

import pandas as pd

from memrepro.tables.runs import Run

SETTING_KEYS = ("k", "beam", "fanout", "alpha", "tau")


def _key(run: Run) -> str:
    retriever = dict(run.retriever)
    for ignored in ("engine", "chunk_bytes", "latency_scope"):
        retriever.pop(ignored, None)
    return json.dumps({"dataset": run.config["dataset"], "encoder": run.config["encoder"].get("model"),
                       "retriever": retriever}, sort_keys=True, default=str)


def engine_pairs(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """``(faithful, batched)`` pairs, newest run of each engine per configuration."""
    groups: dict[str, dict[str, Run]] = {}
    for run in runs:
        engine = run.retriever.get("engine")
        if engine not in ("faithful", "batched"):
            continue
        slot = groups.setdefault(_key(run), {})
        if engine not in slot or run.metrics["provenance"].get("created", "") > \
                slot[engine].metrics["provenance"].get("created", ""):
            slot[engine] = run
    return [(g["faithful"], g["batched"]) for _, g in sorted(groups.items()) if {"faithful", "batched"} <= set(g)]


def compare(faithful: Run, batched: Run) -> dict[str, Any]:
    a, b = faithful.rows, batched.rows
    same = statistics.fmean(float([m for m, _ in x["top"]] == [m for m, _ in y["top"]]) for x, y in zip(a, b))
    primary = faithful.metrics["primary"][0]
    delta = batched.metrics["summary"]["pooled"][primary] - faithful.metrics["summary"]["pooled"][primary]
    slow, fast = faithful.metrics["timings"]["retrieve_s"], batched.metrics["timings"]["retrieve_s"]
    settings = ", ".join(f"{k}={faithful.retriever[k]}" for k in SETTING_KEYS if k in faithful.retriever)
    return {"dataset": faithful.dataset, "encoder": faithful.folder.parts[-2], "retriever": faithful.folder.parts[-3],
            "settings": settings, "queries": len(a), "identical rankings": same, "metric": primary,
            "Δ (batched − faithful)": delta, "faithful retrieve (s)": slow, "batched retrieve (s)": fast,
            "speed-up": slow / max(fast, 1e-9)}


def agreement_table(runs: Sequence[Run]) -> tuple[pd.DataFrame, list[str]]:
    """Display frame (one row per pair) and summary lines."""
    rows = [compare(f, b) for f, b in engine_pairs(runs)]
    if not rows:
        return pd.DataFrame(), ["no faithful/batched pairs among the runs"]
    frame = pd.DataFrame(rows)
    ratios = frame["speed-up"].tolist()
    summary = [f"{len(rows)} pairs: identical rankings mean {frame['identical rankings'].mean():.2%} (min "
               f"{frame['identical rankings'].min():.2%}); "
               f"max |Δ| {frame['Δ (batched − faithful)'].abs().max():.4f}; "
               f"speed-up median {statistics.median(ratios):.1f}x (min {min(ratios):.1f}x, max {max(ratios):.1f}x)"]
    shown = frame.assign(**{
        "identical rankings": frame["identical rankings"].map(lambda v: f"{v:.2%}"),
        "Δ (batched − faithful)": frame["Δ (batched − faithful)"].map(lambda v: f"{v:+.4f}"),
        "faithful retrieve (s)": frame["faithful retrieve (s)"].map(lambda v: f"{v:.2f}"),
        "batched retrieve (s)": frame["batched retrieve (s)"].map(lambda v: f"{v:.2f}"),
        "speed-up": frame["speed-up"].map(lambda v: f"{v:.1f}x")})
    return shown.astype(str), summary
