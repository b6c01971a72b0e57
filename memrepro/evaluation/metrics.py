"""Per-query metrics from frozen rankings.

Every metric memrepro reports depends only on where the gold items sit in the frozen ranking (and on the gold
list), so :func:`compute_metrics` reads each query's gold ranks once and computes every metric from them with
NumPy: ``mrr`` (RR over the full list), ``hit@k`` (Success@k), ``recall@k`` (R@k, de-duplicated gold),
``ndcg@k`` (trec_eval's nDCG@k, binary gain), ``recall_list@k`` (ConvMemory: the denominator counts the gold
*list*, duplicates included), LongMemEval's ``recall_all@k`` / ``recall_any@k`` and PersonaBench's
``pb_recall`` / ``pb_ndcg`` (max over gold combinations, from the ranks of every alternative).
:func:`compute_metrics_reference` is the definition they are checked against: the standard measures through
ir-measures (trec_eval-exact) and the benchmark measures through their list-based functions; the tests hold the
two equal to 1e-12 on runs over all four benchmarks. A query with an empty returned list scores 0 on everything
and stays in the denominator. A metric registered with :func:`register_metric` is evaluated per query on the
ranked ids (the reference way).
"""

from __future__ import annotations

import functools
import math
import re
from typing import Callable, Mapping, Sequence

import ir_measures
import numpy as np

from memrepro.evaluation.freeze import FrozenRanking
from memrepro.evaluation.longmemeval_metrics import recall_all_at_k, recall_any_at_k
from memrepro.evaluation.personabench_metrics import gold_combinations, personabench_ndcg, personabench_recall
from memrepro.types import Query

CustomMetric = Callable[[Sequence[str], Query, int | None], float]

# metrics that read only which memories are in the top k, not their order (a reranker inside k cannot move them)
SET_BASES = frozenset({"recall", "recall_list", "hit", "recall_all", "recall_any", "pb_recall"})
# PersonaBench's metrics are defined on the returned list itself (k = its length): never deeper than the list
LIST_DEFINED = frozenset({"pb_recall", "pb_ndcg"})

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
    """Add a metric definition (``base@k`` names become available). A name already defined is refused: what an
    existing metric name computes never depends on what was registered before."""
    if base in _STANDARD:
        raise ValueError(f"{base!r} is an ir-measures metric name")
    if base in CUSTOM:
        raise ValueError(f"metric {base!r} is already defined; register the new definition under another name")
    CUSTOM[base] = function


def parse_metric(name: str) -> tuple[str, int | None]:
    match = _NAME.match(name)
    if not match or (match["base"] not in _STANDARD and match["base"] not in CUSTOM):
        known = sorted([*(f"{b}@k" for b in _STANDARD), "mrr", *(f"{b}[@k]" for b in CUSTOM)])
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(known)}")
    k = int(match["k"]) if match["k"] else None
    if k == 0:  # a cutoff of 0 ranks nothing: every value would be 0
        raise ValueError(f"metric {name!r}: the cutoff after @ must be >= 1")
    if k is None and match["base"] in _STANDARD and match["base"] != "mrr":
        _ir_measure(match["base"], k)  # raises: it needs a cutoff
    return match["base"], k


def _ir_measure(base: str, k: int | None):
    measure = getattr(ir_measures, _STANDARD[base])
    if base == "mrr":
        return measure if k is None else measure @ k
    if k is None:
        raise ValueError(f"metric {base!r} needs a cutoff, e.g. {base}@10")
    return measure @ k


def compute_metrics_reference(rankings: Mapping[str, FrozenRanking], queries: Sequence[Query],
                              names: Sequence[str]) -> dict[str, dict[str, float]]:
    """``{query_id: {metric name: value}}`` for the scored queries: ir-measures and the list-based definitions
    (the cross-check for :func:`compute_metrics`; about 2 ms per LoCoMo row, so not what runs use)."""
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


# Metrics computed from gold ranks here; anything else registered goes through CUSTOM per query.
_FROM_RANKS = {"mrr", "hit", "recall", "ndcg", "recall_list", "recall_all", "recall_any", "pb_recall", "pb_ndcg"}


def _rank_in(memory_ids: Sequence[str], memory_id: str) -> int:
    """1-based rank of ``memory_id`` in a frozen ranking (ids never repeat there), 0 when absent."""
    try:
        return memory_ids.index(memory_id) + 1
    except ValueError:
        return 0


def _ideal_dcg(count: int) -> np.ndarray:
    """``ideal[m]`` = sum of 1/log2(i + 1) over ranks i = 1..m (binary gain), summed in rank order."""
    ideal = np.zeros(count + 1)
    for m in range(1, count + 1):
        ideal[m] = ideal[m - 1] + 1.0 / math.log2(m + 1)
    return ideal


# the same answer parts recur across metrics, cutoffs and sweep points: enumerate their combinations once
_gold_combinations = functools.lru_cache(maxsize=65536)(gold_combinations)


def _personabench_from_ranks(ranks: Mapping[str, int], n_returned: int, k: int | None,
                             alternatives: tuple[tuple[str, ...], ...]) -> tuple[float, float]:
    """``personabench_scores`` from the ranks of every alternative id (0 = not returned): the list scored is the
    first ``k`` returned (all of them when ``k`` is None), so a rank counts when it is ≤ that length; DCG and the
    ideal are summed in rank order, as the list-based code walks the list."""
    length = n_returned if k is None else min(k, n_returned)
    best_recall = best_ndcg = 0.0
    for gold_set in _gold_combinations(alternatives):
        present = sorted(r for r in (ranks.get(g, 0) for g in gold_set) if 0 < r <= length)
        if gold_set:
            best_recall = max(best_recall, len(present) / len(gold_set))
        ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold_set), length)))
        if ideal > 0:
            best_ndcg = max(best_ndcg, sum(1.0 / math.log2(r + 1) for r in present) / ideal)
    return best_recall, best_ndcg


def compute_metrics(rankings: Mapping[str, FrozenRanking], queries: Sequence[Query], names: Sequence[str],
                    gold_ranks: Mapping[str, Mapping[str, int | None]] | None = None) -> dict[str, dict[str, float]]:
    """``{query_id: {metric name: value}}`` for the scored queries, computed from the gold items' ranks.

    ``gold_ranks[query_id]`` (optional: :meth:`FrozenRanking.ranks_of` of the distinct gold ids, as the runner
    already stores them) saves looking the ranks up a second time.

    Equal to :func:`compute_metrics_reference` (tested to 1e-12 on all four benchmarks); about 100× faster
    because no per-document object is built: one ``tuple.index`` per distinct gold id, then array arithmetic.
    """
    scored = [q for q in queries if q.scored]
    parsed = {name: parse_metric(name) for name in names}
    values: dict[str, dict[str, float]] = {q.id: {} for q in scored}
    if not scored or not parsed:
        return values
    for name, (base, k) in parsed.items():  # the same errors as the reference, before any work
        if base in _STANDARD and base != "mrr":
            _ir_measure(base, k)
        elif base in ("recall_all", "recall_any"):
            _needs_cutoff(base, k)

    distinct = [tuple(dict.fromkeys(q.gold)) for q in scored]
    width = max(1, max(len(d) for d in distinct))
    # ranks[i, j]: 1-based rank of query i's j-th distinct gold id; inf when not returned (or no such id)
    ranks = np.full((len(scored), width), np.inf)
    n_returned = np.empty(len(scored), dtype=np.int64)
    for i, (query, gold) in enumerate(zip(scored, distinct)):
        memory_ids = rankings[query.id].memory_ids
        n_returned[i] = len(memory_ids)
        known = gold_ranks.get(query.id) if gold_ranks is not None else None
        for j, memory_id in enumerate(gold):
            rank = (known.get(memory_id) or 0) if known is not None and memory_id in known else \
                _rank_in(memory_ids, memory_id)
            if rank:
                ranks[i, j] = rank
    ranks.sort(axis=1)  # ascending: DCG sums in rank order, as trec_eval does
    n_distinct = np.array([len(d) for d in distinct], dtype=np.int64)
    n_list = np.array([len(q.gold) for q in scored], dtype=np.int64)
    has_gold = n_distinct > 0
    first = ranks[:, 0]
    ideal = None

    columns: dict[str, np.ndarray] = {}
    personabench: dict[int | None, np.ndarray] = {}  # k -> (recall, nDCG) per scored query
    for name, (base, k) in parsed.items():
        if base not in _FROM_RANKS:
            continue
        cut = 1e300 if k is None else k  # finite: a gold id not returned has rank inf
        within = ranks <= cut
        count = within.sum(axis=1)
        if base == "mrr":
            column = np.where(first <= cut, 1.0 / first, 0.0)
        elif base in ("hit", "recall_any"):
            column = (count > 0).astype(np.float64)
        elif base == "recall":
            column = np.where(has_gold, count / np.maximum(n_distinct, 1), 0.0)
        elif base == "recall_list":
            column = count / np.maximum(n_list, 1)
        elif base == "recall_all":
            column = (has_gold & (count == n_distinct)).astype(np.float64)
        elif base == "ndcg":
            if ideal is None or len(ideal) <= k:
                ideal = _ideal_dcg(max(k, width))
            gains = np.where(within, 1.0 / np.log2(np.where(within, ranks, 1.0) + 1.0), 0.0)
            dcg = np.zeros(len(scored))
            for j in range(width):  # left to right: rank order
                dcg = dcg + gains[:, j]
            best = ideal[np.minimum(n_distinct, k)]
            column = np.where(best > 0, dcg / np.where(best > 0, best, 1.0), 0.0)
        else:  # PersonaBench: every alternative's rank, max over combinations (recall and nDCG at k in one pass)
            if k not in personabench:
                personabench[k] = np.empty((len(scored), 2))
                for i, query in enumerate(scored):
                    alternatives = _personabench_alternatives(query)
                    memory_ids = rankings[query.id].memory_ids
                    wanted = {a for part in alternatives for a in part}
                    personabench[k][i] = _personabench_from_ranks({a: _rank_in(memory_ids, a) for a in wanted},
                                                                  len(memory_ids), k, alternatives)
            column = personabench[k][:, 0 if base == "pb_recall" else 1]
        columns[name] = column

    for row, query in enumerate(scored):
        for name, (base, k) in parsed.items():
            if name in columns:
                values[query.id][name] = float(columns[name][row])
            else:
                values[query.id][name] = float(CUSTOM[base](rankings[query.id].memory_ids, query, k))
    return values
