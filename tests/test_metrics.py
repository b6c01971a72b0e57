"""Metric goldens (hand-computed and the models.md §6.1 toy check), the tie rule, aggregation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrepro.evaluation.aggregate import aggregate
from memrepro.evaluation.freeze import FrozenRanking, freeze
from memrepro.evaluation.metrics import compute_metrics, parse_metric
from memrepro.search import Hits
from memrepro.types import Episode, Memory, Query


def q(qid: str, gold: tuple[str, ...], excluded: str | None = None) -> Query:
    return Query(id=qid, text=qid, episode_id="e", gold=gold, category="1", excluded=excluded)


def r(qid: str, ids: list[str]) -> FrozenRanking:
    return FrozenRanking(qid, tuple(ids), tuple(float(len(ids) - i) for i in range(len(ids))))


def test_toy_check_matches_models_md() -> None:
    queries = [q("q1", ("d1", "d3")), q("q2", ("d2",)), q("q3", ("d5",))]
    rankings = {"q1": r("q1", ["d2", "d1", "d4", "d3"]), "q2": r("q2", ["d2", "d1"]),
                "q3": r("q3", ["d1", "d2", "d3"])}
    values = compute_metrics(rankings, queries, ["mrr", "recall@2", "recall@4", "hit@1", "hit@2", "ndcg@10"])
    mean = {m: np.mean([values[x][m] for x in values]) for m in values["q1"]}
    assert mean["mrr"] == pytest.approx(0.5)
    assert mean["recall@2"] == pytest.approx(0.5)
    assert mean["recall@4"] == pytest.approx(0.6667, abs=1e-4)
    assert mean["hit@1"] == pytest.approx(0.3333, abs=1e-4)
    assert mean["hit@2"] == pytest.approx(0.6667, abs=1e-4)
    assert mean["ndcg@10"] == pytest.approx(0.5503, abs=1e-4)


def test_recall_list_counts_duplicate_gold_in_denominator() -> None:
    query = q("conv-50::qa5", ("D4:5", "D4:5", "D5:5"))
    ranking = r(query.id, ["D4:5", "D5:5", "x"])
    values = compute_metrics({query.id: ranking}, [query], ["recall_list@10", "recall@10", "mrr"])[query.id]
    assert values["recall_list@10"] == pytest.approx(2 / 3)  # ConvMemory: can never exceed 2/3 here
    assert values["recall@10"] == 1.0  # ir-measures: de-duplicated set
    assert values["mrr"] == 1.0


def test_empty_ranking_scores_zero_and_stays_in_denominator() -> None:
    queries = [q("a", ("d1",)), q("b", ("d1",))]
    rankings = {"a": r("a", []), "b": r("b", ["d1"])}
    values = compute_metrics(rankings, queries, ["mrr", "hit@1", "recall@5", "ndcg@10", "recall_list@5"])
    assert values["a"] == {"mrr": 0.0, "hit@1": 0.0, "recall@5": 0.0, "ndcg@10": 0.0, "recall_list@5": 0.0}
    assert values["b"]["mrr"] == 1.0


def test_excluded_queries_get_no_metrics() -> None:
    queries = [q("a", ("d1",)), q("b", (), excluded="no_gold")]
    values = compute_metrics({"a": r("a", ["d1"]), "b": r("b", ["d1"])}, queries, ["mrr"])
    assert list(values) == ["a"]


def test_mrr_is_over_the_full_list() -> None:
    ids = [f"m{i}" for i in range(300)]
    query = q("a", ("m250",))
    assert compute_metrics({"a": r("a", ids)}, [query], ["mrr"])["a"]["mrr"] == pytest.approx(1 / 251)


def test_unknown_metric_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown metric 'recal@10'"):
        parse_metric("recal@10")
    with pytest.raises(ValueError, match="needs a cutoff"):
        compute_metrics({"a": r("a", ["d1"])}, [q("a", ("d1",))], ["hit"])


def episode(n: int) -> Episode:
    return Episode("e", tuple(Memory(f"m{i}", f"t{i}", i) for i in range(n)))


def test_freeze_breaks_ties_by_pool_position() -> None:
    hits = Hits(np.array([3, 1, 2, 0]), np.array([0.5, 0.9, 0.5, 0.5], dtype=np.float32))
    frozen = freeze("q", hits, episode(4))
    assert frozen.memory_ids == ("m1", "m0", "m2", "m3")
    native = freeze("q", hits, episode(4), order="native")
    assert native.memory_ids == ("m3", "m1", "m2", "m0")


def test_tied_gold_rank_does_not_depend_on_metric_library() -> None:
    """Gold m2 tied with m0 and m1: the tie rule puts it third, so MRR is 1/3 whatever ir-measures would do."""
    hits = Hits(np.array([2, 1, 0]), np.array([0.7, 0.7, 0.7], dtype=np.float32))
    frozen = freeze("q", hits, episode(3))
    values = compute_metrics({"q": frozen}, [Query("q", "q", "e", ("m2",), "1")], ["mrr", "hit@1"])["q"]
    assert values == {"mrr": pytest.approx(1 / 3), "hit@1": 0.0}


def test_freeze_rejects_nan_and_foreign_positions() -> None:
    with pytest.raises(ValueError, match="NaN"):
        freeze("q", Hits(np.array([0]), np.array([np.nan], dtype=np.float32)), episode(2))
    with pytest.raises(ValueError, match="outside episode"):
        freeze("q", Hits(np.array([5]), np.array([0.1], dtype=np.float32)), episode(2))
    with pytest.raises(ValueError, match="twice"):
        freeze("q", Hits(np.array([1, 1]), np.array([0.1, 0.1], dtype=np.float32)), episode(2))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_metrics_recompute_from_gold_ranks(data) -> None:
    """What queries.jsonl stores (gold ranks + list length) is enough to recompute every metric."""
    n = data.draw(st.integers(0, 30))
    ids = [f"m{i}" for i in range(n)]
    order = data.draw(st.permutations(ids))
    pool = ids + ["absent1", "absent2"]
    gold = tuple(data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=5)))
    query = Query("q", "q", "e", gold, "1")
    names = ["mrr", "hit@1", "hit@10", "recall@5", "recall_list@10", "ndcg@10"]
    original = FrozenRanking("q", tuple(order), tuple(float(n - i) for i in range(n)))
    rebuilt = FrozenRanking.from_gold_ranks("q", original.ranks_of(tuple(dict.fromkeys(gold))), n)
    expected = compute_metrics({"q": original}, [query], names)["q"]
    assert compute_metrics({"q": rebuilt}, [query], names)["q"] == pytest.approx(expected)


def test_aggregate_seed_means_std_and_pooled() -> None:
    rows = [{"split": "s1", "category": "1", "m": 1.0}, {"split": "s1", "category": "2", "m": 0.0},
            {"split": "s2", "category": "1", "m": 1.0}]
    summary = aggregate(rows, ["m"], {"1": "one", "2": "two"})
    assert summary["splits"]["s1"] == {"n": 2, "m": 0.5}
    assert summary["split_mean"]["m"] == pytest.approx(0.75)
    assert summary["split_std"]["m"] == pytest.approx(math.sqrt(((0.5 - 0.75) ** 2 + 0.25 ** 2) / 1))
    assert summary["pooled"]["m"] == pytest.approx(2 / 3)
    assert summary["categories"]["1"]["n"] == 2 and summary["categories"]["1"]["name"] == "one"
    assert summary["categories"]["2"]["pooled"]["m"] == 0.0
    assert aggregate([], ["m"])["n"] == 0


def test_registered_benchmark_metrics() -> None:
    lme = Query("q", "q", "e", ("s1", "s2"), "multi-session")
    ranking = r("q", ["s1", "x", "s2"])
    values = compute_metrics({"q": ranking}, [lme], ["recall_all@2", "recall_all@3", "recall_any@1"])["q"]
    assert values == {"recall_all@2": 0.0, "recall_all@3": 1.0, "recall_any@1": 1.0}
    pb = Query("p", "p", "e", ("a", "b", "c"), "Social_easy", gold_alternatives=(("a", "b"), ("c",)))
    values = compute_metrics({"p": r("p", ["b", "x", "c"])}, [pb], ["pb_recall", "pb_recall@2"])["p"]
    assert values == {"pb_recall": 1.0, "pb_recall@2": 0.5}  # combination (b, c): both in 3, one in the first 2
    with pytest.raises(ValueError, match="gold alternatives"):
        compute_metrics({"q": ranking}, [lme], ["pb_recall"])
