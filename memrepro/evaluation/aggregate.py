"""Aggregation as the papers report it (docs/protocols.md#aggregation).

Per split: the mean over its scored rows. Across splits (LoCoMo's 5 seeds): the mean and sample std (ddof=1)
of the split means (what ConvMemory prints), and the pooled mean over every (split, query) row. Per category:
the same, each with its n.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd


def aggregate(rows: Sequence[Mapping], metric_names: Sequence[str],
              category_names: Mapping[str, str] | None = None) -> dict:
    """``rows``: one dict per scored (split, query) with ``split``, ``category`` and each metric."""
    if not rows:
        return {"n": 0, "splits": {}, "split_mean": {}, "split_std": {}, "pooled": {}, "categories": {}}
    frame = pd.DataFrame(list(rows))
    metrics = list(metric_names)
    summary = _summarise(frame, metrics)
    categories = {}
    order = list(category_names or {}) + sorted(set(frame["category"]) - set(category_names or {}))
    for code in order:
        part = frame[frame["category"] == code]
        if len(part):
            categories[code] = {"name": (category_names or {}).get(code, code), **_summarise(part, metrics)}
    summary["categories"] = categories
    return summary


def _summarise(frame: pd.DataFrame, metrics: list[str]) -> dict:
    per_split = frame.groupby("split", sort=False)
    split_means = per_split[metrics].mean()
    out = {
        "n": int(len(frame)),
        "splits": {
            split: {"n": int(n), **{m: float(split_means.loc[split, m]) for m in metrics}}
            for split, n in per_split.size().items()
        },
        "split_mean": {m: float(split_means[m].mean()) for m in metrics},
        "split_std": {m: (float(split_means[m].std(ddof=1)) if len(split_means) > 1 else None) for m in metrics},
        "pooled": {m: float(frame[m].mean()) for m in metrics},
    }
    return out
