"""PersonaBench retrieval metrics (RF-Mem ``personabench_data/eval.py`` = the official ``eval.py``).

Gold is a set of answer *parts*, each with alternative segment ids. A retrieval is scored against every
combination that picks one alternative per part (Cartesian product, part order) and the best combination
counts, separately for recall and for NDCG (docs/benchmarks.md#personabench-metric). The cutoff is the length
of the returned list: "Recall@5" and "Recall@10" in the papers are separate runs with K = 5 and K = 10, so
callers pass the list a K-run returned, never a prefix of a longer one.

Faithful corner cases (kept because the published numbers were computed this way):

* recall uses ``set(returned)``; DCG walks the returned list as is, so a repeated gold id in the returned list
  adds gain twice (NDCG can then exceed 1). Frozen rankings never repeat ids, so this does not arise in
  memrepro runs.
* a combination whose id set is empty (no parts) scores 0; a part with no alternatives yields no combination
  at all, so the query scores 0. Loaders exclude such queries instead (``Query.excluded``).
"""

from __future__ import annotations

import itertools
import math
from typing import Mapping, Sequence, Union

GoldAlternatives = Union[Sequence[Sequence[str]], Mapping[str, Sequence[str]]]

# 5 parts x 4 alternatives (the largest the released gold files hold) is 1,024 combinations; the local data peaks at 24.
MAX_COMBINATIONS = 100_000


def _parts(gold_alternatives: GoldAlternatives) -> list[tuple[str, ...]]:
    """Answer parts as tuples, alternatives de-duplicated (a repeated alternative only repeats combinations)."""
    parts = gold_alternatives.values() if isinstance(gold_alternatives, Mapping) else gold_alternatives
    if isinstance(parts, str):
        raise TypeError("gold_alternatives must be a sequence of alternative lists, not a string")
    out: list[tuple[str, ...]] = []
    for alternatives in parts:
        if isinstance(alternatives, str):
            raise TypeError(f"each answer part must be a list of alternative ids, got the string {alternatives!r}")
        out.append(tuple(dict.fromkeys(alternatives)))
    return out


def gold_combinations(gold_alternatives: GoldAlternatives,
                      max_combinations: int = MAX_COMBINATIONS) -> list[frozenset[str]]:
    """The distinct id sets G = set(C) over all combinations C (one alternative per part).

    Raises ValueError rather than enumerating more than ``max_combinations`` combinations.
    """
    parts = _parts(gold_alternatives)
    count = math.prod(len(p) for p in parts)
    if count > max_combinations:
        raise ValueError(f"{count} gold combinations ({len(parts)} parts) exceed max_combinations="
                         f"{max_combinations}; refusing to enumerate")
    return list(dict.fromkeys(frozenset(c) for c in itertools.product(*parts)))


def _dcg_positions(count: int) -> list[float]:
    return [1.0 / math.log2(i + 2) for i in range(count)]


def _recall(returned_set: set[str], gold_set: frozenset[str]) -> float:
    return len(returned_set & gold_set) / len(gold_set) if gold_set else 0.0


def _ndcg(returned: Sequence[str], gold_set: frozenset[str], gains: list[float]) -> float:
    k = len(returned)
    ideal = sum(gains[: min(len(gold_set), k)])
    if ideal <= 0:
        return 0.0
    dcg = sum(gain for gain, memory_id in zip(gains, returned) if memory_id in gold_set)
    return dcg / ideal


def personabench_scores(returned_ids: Sequence[str], gold_alternatives: GoldAlternatives,
                        max_combinations: int = MAX_COMBINATIONS) -> tuple[float, float]:
    """(recall, ndcg) of one query, each the maximum over gold combinations, with k = len(returned_ids)."""
    returned = list(returned_ids)
    returned_set = set(returned)
    gains = _dcg_positions(len(returned))
    best_recall = best_ndcg = 0.0
    for gold_set in gold_combinations(gold_alternatives, max_combinations):
        best_recall = max(best_recall, _recall(returned_set, gold_set))
        best_ndcg = max(best_ndcg, _ndcg(returned, gold_set, gains))
    return best_recall, best_ndcg


def personabench_recall(returned_ids: Sequence[str], gold_alternatives: GoldAlternatives,
                        max_combinations: int = MAX_COMBINATIONS) -> float:
    """max over combinations C of |set(returned) ∩ set(C)| / |set(C)|."""
    return personabench_scores(returned_ids, gold_alternatives, max_combinations)[0]


def personabench_ndcg(returned_ids: Sequence[str], gold_alternatives: GoldAlternatives,
                      max_combinations: int = MAX_COMBINATIONS) -> float:
    """max over combinations C of binary DCG(returned) / ideal DCG over min(|set(C)|, len(returned)) positions."""
    return personabench_scores(returned_ids, gold_alternatives, max_combinations)[1]

