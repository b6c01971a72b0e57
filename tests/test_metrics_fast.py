"""Metrics from gold ranks (NumPy) against the reference definitions (ir-measures + list-based code).

Random cases (hypothesis) and runs over the real benchmarks' gold (LoCoMo, LongMemEval oracle, PersonaBench;
PersonaMem from its fixture, which has no gold): every metric equal to 1e-12.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrepro.evaluation import metrics as metrics_module
from memrepro.evaluation.freeze import FrozenRanking, freeze
from memrepro.evaluation.metrics import compute_metrics, compute_metrics_reference
from memrepro.retrievers.dense import DenseRetriever
from memrepro.retrievers.base import RetrievalInput
from memrepro.search import build_index
from memrepro.types import Query

STANDARD = ["mrr", "mrr@10", "hit@1", "hit@3", "hit@10", "recall@1", "recall@5", "recall@10", "ndcg@1", "ndcg@3",
            "ndcg@10", "recall_list@5", "recall_list@10", "recall_list", "recall_all@3", "recall_all@10",
            "recall_any@5"]
PERSONABENCH = ["pb_recall", "pb_recall@3", "pb_recall@5", "pb_ndcg", "pb_ndcg@3", "pb_ndcg@5"]


def assert_equal(rankings, queries, names, **kwargs) -> None:
    fast = compute_metrics(rankings, queries, names, **kwargs)
    slow = compute_metrics_reference(rankings, queries, names)
    assert fast.keys() == slow.keys()
    for query_id, values in slow.items():
        assert fast[query_id].keys() == values.keys()
        for name, value in values.items():
            assert abs(fast[query_id][name] - value) <= 1e-12, (query_id, name, fast[query_id][name], value)


@st.composite
def cases(draw):
    universe = [f"m{i}" for i in range(30)]
    queries, rankings = [], {}
    for i in range(draw(st.integers(1, 12))):
        returned = draw(st.permutations(universe))[: draw(st.integers(0, 30))]
        gold = tuple(draw(st.lists(st.sampled_from(universe), min_size=0, max_size=5)))
        excluded = draw(st.sampled_from([None, None, "excluded"]))  # a scored query may have no gold
        parts = draw(st.lists(st.lists(st.sampled_from(universe), min_size=1, max_size=3), min_size=1, max_size=3))
        queries.append(Query(id=f"q{i}", text="", episode_id="e", gold=gold, category="c", excluded=excluded,
                             gold_alternatives=tuple(tuple(p) for p in parts)))
        rankings[f"q{i}"] = FrozenRanking(f"q{i}", tuple(returned), tuple(float(len(returned) - r)
                                                                           for r in range(len(returned))))
    return rankings, queries


@settings(max_examples=150, deadline=None)
@given(cases())
def test_from_ranks_equals_reference_on_random_cases(case) -> None:
    rankings, queries = case
    assert_equal(rankings, queries, STANDARD + PERSONABENCH)
    stored = {q.id: rankings[q.id].ranks_of(tuple(dict.fromkeys(q.gold))) for q in queries}
    assert_equal(rankings, queries, STANDARD, gold_ranks=stored)  # the runner passes the ranks it stores


def test_errors_match_the_reference() -> None:
    ranking = {"a": FrozenRanking("a", ("d1",), (1.0,))}
    query = [Query(id="a", text="", episode_id="e", gold=("d1",), category="c")]
    for name in ("hit", "recall", "ndcg", "recall_all", "recall_any"):
        with pytest.raises(ValueError, match="needs a cutoff"):
            compute_metrics(ranking, query, [name])
    with pytest.raises(ValueError, match="unknown metric"):
        compute_metrics(ranking, query, ["recal@10"])


def test_a_registered_metric_is_computed_and_a_defined_name_is_not_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "CUSTOM", dict(metrics_module.CUSTOM))  # the registration ends with the test
    metrics_module.register_metric("quarter", lambda ids, q, k: 0.25)
    ranking = {"a": FrozenRanking("a", ("d1",), (1.0,))}
    query = [Query(id="a", text="", episode_id="e", gold=("d1",), category="c")]
    assert compute_metrics(ranking, query, ["quarter@10", "recall_list@10", "mrr"])["a"] == {
        "quarter@10": 0.25, "recall_list@10": 1.0, "mrr": 1.0}
    for name in ("recall_list", "quarter", "ndcg"):
        with pytest.raises(ValueError, match="already defined|ir-measures"):
            metrics_module.register_metric(name, lambda ids, q, k: 0.0)


def _real_rankings(benchmark, dim: int = 32, k: int | None = None, min_sim: float | None = None):
    """Rankings of a real benchmark's queries by dense search over seeded random vectors (the gold, pools and
    list lengths are the benchmark's own; what is measured is the metric code, not a model)."""
    rng = np.random.default_rng(0)
    vectors = {}
    for episode_id, episode in benchmark.episodes.items():
        block = rng.standard_normal((len(episode), dim)).astype(np.float32)
        vectors[episode_id] = block / np.linalg.norm(block, axis=1, keepdims=True)
    index = build_index(benchmark.episodes, vectors, dim=dim)
    queries = list(benchmark.queries)
    query_vectors = rng.standard_normal((len(queries), dim)).astype(np.float32)
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    retriever = DenseRetriever(mode="full" if k is None else "topk", k=k, min_sim=min_sim)
    retrieved = retriever.retrieve([RetrievalInput(q.id, q.text, q.episode_id) for q in queries], query_vectors,
                                   index)
    return {q.id: freeze(q.id, r.hits, benchmark.episodes[q.episode_id]) for q, r in zip(queries, retrieved)}


def _need(root: Path, relative: str) -> None:
    if not (root / relative).exists():
        pytest.skip(f"{relative} not under {root}")


@pytest.mark.real_data
@pytest.mark.parametrize("k, min_sim", [(None, None), (10, 0.1)])
def test_real_locomo(real_data_dir: Path, k, min_sim) -> None:
    from memrepro.datasets.locomo import load_locomo

    _need(real_data_dir, "locomo/locomo10.json")
    benchmark = load_locomo(real_data_dir)
    rankings = _real_rankings(benchmark, k=k, min_sim=min_sim)
    names = list(benchmark.protocol.metrics) + ["mrr@10", "ndcg@5", "recall@5", "hit@3"]
    assert sum(q.scored for q in benchmark.queries) == 1977
    assert_equal(rankings, list(benchmark.queries), names)


@pytest.mark.real_data
def test_real_longmemeval_oracle(real_data_dir: Path) -> None:
    from memrepro.datasets.longmemeval import load_longmemeval

    _need(real_data_dir, "longmemeval/longmemeval_oracle.reassembled.json")
    benchmark = load_longmemeval(real_data_dir, variant="oracle")
    rankings = _real_rankings(benchmark, k=50, min_sim=None)
    assert_equal(rankings, list(benchmark.queries), list(benchmark.protocol.metrics) + ["recall_all@1", "mrr"])


@pytest.mark.real_data
@pytest.mark.parametrize("k", [5, 10])
def test_real_personabench(real_data_dir: Path, k: int) -> None:
    from memrepro.datasets.personabench import load_personabench

    _need(real_data_dir, "personabench/eval_data/eval_data_v1")
    benchmark = load_personabench(real_data_dir)
    rankings = _real_rankings(benchmark, k=k, min_sim=0.0)
    assert sum(q.scored for q in benchmark.queries) == 230
    assert_equal(rankings, list(benchmark.queries), list(benchmark.protocol.metrics) + ["mrr", "hit@5"])


def test_personamem_has_no_gold_to_score(fixtures_dir: Path) -> None:
    from memrepro.datasets.personamem import load_personamem

    benchmark = load_personamem(fixtures_dir)
    rankings = _real_rankings(benchmark, k=10)
    assert compute_metrics(rankings, list(benchmark.queries), list(benchmark.protocol.metrics)) == \
        compute_metrics_reference(rankings, list(benchmark.queries), list(benchmark.protocol.metrics))
