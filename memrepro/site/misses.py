"""The miss breakdown: where each scored query's best gold memory ranked, in buckets.

A query's *best gold rank* is the smallest rank any of its gold memories got in the run's frozen ranking
(``gold_ranks`` of its ``queries.jsonl`` row; ``None`` where a gold memory was not returned). The buckets separate
a near miss (6-10: just past a top-5 cutoff, 11-50: within a re-ranker's reach) from a memory the retriever never
returned at all, which no cutoff recovers. Rows a benchmark does not score (``excluded``) are not counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterable, Mapping, Sequence

# (label, lowest rank, highest rank); the last bucket's upper end is the run's deepest returned rank
EDGES: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 5), (6, 10), (11, 50), (51, None))
NOT_RETRIEVED = "not retrieved"


def best_gold_rank(row: Mapping[str, Any]) -> int | None:
    """The smallest rank of a gold memory in ``row`` (None when no gold memory was returned, or there is none)."""
    ranks = [rank for rank in (row.get("gold_ranks") or {}).values() if rank is not None]
    return min(ranks) if ranks else None


def depth(rows: Iterable[Mapping[str, Any]]) -> int:
    """The deepest rank a run returned (its largest ``n_returned``): how far the last bucket reaches."""
    return max((int(row.get("n_returned") or 0) for row in rows), default=0)


@dataclass(frozen=True)
class Buckets:
    """The buckets of one run: those a rank of this run can fall in (a run returning 10 items has no 11-50)."""

    deepest: int

    @cached_property
    def edges(self) -> list[tuple[int, int]]:
        out = []
        for low, high in EDGES:
            if low > max(self.deepest, 1):
                break
            out.append((low, high if high is not None else max(self.deepest, low)))
        return out

    @cached_property
    def labels(self) -> list[str]:
        return [str(low) if low == high else f"{low}–{high}" for low, high in self.edges] + [NOT_RETRIEVED]

    def of(self, rank: int | None) -> int:
        """The index of the bucket ``rank`` falls in (the last index: not retrieved)."""
        if rank is not None:
            for i, (low, high) in enumerate(self.edges):
                if low <= rank <= high or (i == len(self.edges) - 1 and rank >= low):
                    return i
        return len(self.edges)


@dataclass(frozen=True)
class Breakdown:
    labels: list[str]
    groups: list[str]  # "all", then each category's name
    counts: list[list[int]]  # per group, per bucket
    excluded: dict[str, int]  # rows not scored, by reason

    def table(self) -> list[dict[str, Any]]:
        """Per group: its n, then count and share of each bucket."""
        out = []
        for group, counts in zip(self.groups, self.counts):
            n = sum(counts)
            out.append({"group": group, "n": n,
                        "cells": [(c, c / n if n else 0.0) for c in counts]})
        return out


def breakdown(rows: Sequence[Mapping[str, Any]], category_names: Mapping[str, str],
              buckets: Buckets | None = None) -> Breakdown:
    """Counts per bucket over the scored rows, overall and per category (in ``category_names`` order, then any
    category the rows have that the record does not name)."""
    buckets = buckets or Buckets(depth(rows))
    scored = [row for row in rows if row.get("excluded") is None]
    codes = list(category_names) + sorted({str(r.get("category")) for r in scored} - set(category_names))
    per_group: dict[str, Counter] = {"all": Counter()}
    for code in codes:
        per_group[code] = Counter()
    for row in scored:
        index = buckets.of(best_gold_rank(row))
        per_group["all"][index] += 1
        per_group[str(row.get("category"))][index] += 1
    width = len(buckets.labels)
    groups = ["all", *codes]
    return Breakdown(labels=buckets.labels,
                     groups=["all"] + [category_names.get(code) or code for code in codes],
                     counts=[[per_group[g][i] for i in range(width)] for g in groups],
                     excluded=dict(Counter(str(r["excluded"]) for r in rows if r.get("excluded") is not None)))
