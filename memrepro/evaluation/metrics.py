"""Per-query metrics from frozen rankings.

Standard measures come from ir-measures (trec_eval-exact): ``mrr`` (RR over the full list), ``hit@k``
(Success@k), ``recall@k`` (R@k, de-duplicated gold), ``ndcg@k``. Benchmark-defined measures are own code with
golden tests: ``recall_list@k`` (ConvMemory: the denominator counts the gold *list*, duplicates included).
A query with an empty returned list scores 0 on everything and stays in the denominator.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

import ir_measures

from memrepro.evaluation.freeze import FrozenRanking
from memrepro.evaluation.longmemeval_metrics import recall_all_at_k, recall_any_at_k
from memrepro.evaluation.personabench_metrics import personabench_ndcg, personabench_recall
from memrepro.types import Query

CustomMetric = Callable[[Sequence[str], Query, int | None], float]

_STANDARD = {"mrr": "RR", "hit": "Success", "recall": "R", "ndcg": "nDCG"}
_NAME = re.compile(r"^(?P<base>[a-z_]+)(?:@(?P<k>\d+))?$")


def recall_list_at_k(ranked_ids: Sequence[str], query: Query, k: int | None) -> float:
    """ConvMemory ``metrics.py``: ``|set(top-k) ∩ set(gold)| / max(1, len(gold_list))``."""
    top = set(ranked_ids[:k] if k is not None else ranked_ids)
    return len(top & set(query.gold)) / max(1, len(query.gold))


def _needs_cutoff(name: str, k: int | None) -> int:
    if k is None:
        raise ValueError(f"metric {name!r} needs a cutoff, e.g. {name}@10")
    return k


def _personabench_alternatives(query: Query) -> tuple[tuple[str, ...], ...]:
    if query.gold_alternatives is None:
        raise ValueError(f"query {query.id!r}: PersonaBench metrics need gold alternatives")
    return query.gold_alternatives


CUSTOM: dict[str, CustomMetric] = {
    "recall_list": recall_list_at_k,
    # LongMemEval (RF-Mem Table 3 reports recall_all@k on prefixes of one K=50 list)
    "recall_all": lambda ids, q, k: recall_all_at_k(ids, q.gold, _needs_cutoff("recall_all", k)),
    "recall_any": lambda ids, q, k: recall_any_at_k(ids, q.gold, _needs_cutoff("recall_any", k)),
    # PersonaBench: k is the length of the returned list (separate K=5 / K=10 runs), so no cutoff is taken
    "pb_recall": lambda ids, q, k: personabench_recall(ids[:k] if k else ids, _personabench_alternatives(q)),
    "pb_ndcg": lambda ids, q, k: personabench_ndcg(ids[:k] if k else ids, _personabench_alternatives(q)),
}


def register_metric(base: str, function: CustomMetric) -> None:
    """Benchmark modules add their own definitions here (``base@k`` names become available)."""
    if base in _STANDARD:
        raise ValueError(f"{base!r} is an ir-measures metric name")
    CUSTOM[base] = function


def parse_metric(name: str) -> tuple[str, int | None]:
    match = _NAME.match(name)
    if not match or (match["base"] not in _STANDARD and match["base"] not in CUSTOM):
        known = sorted([*(f"{b}@k" for b in _STANDARD), "mrr", *(f"{b}[@k]" for b in CUSTOM)])
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(known)}")
    return match["base"], int(match["k"]) if match["k"] else None


def _ir_measure(base: str, k: int | None):
    measure = getattr(ir_measures, _STANDARD[base])
    if base == "mrr":
        return measure if k is None else measure @ k
    if k is None:
        raise ValueError(f"metric {base!r} needs a cutoff, e.g. {base}@10")
    return measure @ k


def compute_metrics(rankings: Mapping[str, FrozenRanking], queries: Sequence[Query],
                    names: Sequence[str]) -> dict[str, dict[str, float]]:
    """``{query_id: {metric name: value}}`` for the scored queries."""
    scored = [q for q in queries if q.scored]
    parsed = {name: parse_metric(name) for name in names}
    values: dict[str, dict[str, float]] = {q.id: {} for q in scored}

    standard = {name: _ir_measure(base, k) for name, (base, k) in parsed.items() if base in _STANDARD}
    if standard and scored:
        qrels = [ir_measures.Qrel(q.id, doc, 1) for q in scored for doc in dict.fromkeys(q.gold)]
        run = [
            ir_measures.ScoredDoc(q.id, doc, float(len(ranking.memory_ids) - rank))
            for q in scored
            for ranking in (rankings[q.id],)
            for rank, doc in enumerate(ranking.memory_ids)
        ]
        by_measure = {measure: name for name, measure in standard.items()}
        for result in ir_measures.iter_calc(list(standard.values()), qrels, run):
            values[result.query_id][by_measure[result.measure]] = float(result.value)
        for q in scored:  # ir-measures yields nothing for a query with an empty run: it scores 0
            for name in standard:
                values[q.id].setdefault(name, 0.0)

    for name, (base, k) in parsed.items():
        if base in CUSTOM:
            for q in scored:
                values[q.id][name] = float(CUSTOM[base](rankings[q.id].memory_ids, q, k))
    return values
