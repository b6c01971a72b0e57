"""Engine conformance: every Recollection engine (``faithful``, ``compiled``) answers the same questions the same way.

The algorithm: docs/retrievers.md#recollection; the engines: docs/retrievers.md#engines. Hand-checkable cases use
3-d vectors whose clusters are obvious; the other cases use seeded random pools, and where an expectation is not
hand-checkable the faithful engine (the reference that mirrors the official code) is the expectation. The compiled
engine replays the faithful one step for step except for summation order, so agreement is expected on every query
here (a ranking could only differ at a float32 near-tie). Engine-specific internals (the compiled engine's KMeans
replay and its fallback) are tested in ``test_rfmem_compiled.py``.
"""

from __future__ import annotations

import math
import zlib
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrepro.retrievers.rfmem.compiled import recollect_compiled
from memrepro.retrievers.rfmem.params import RecollectionParams
from memrepro.retrievers.rfmem.recollection import recollect_faithful
from memrepro.retrievers.rfmem.result import RecollectionResult

Run = Callable[[np.ndarray, np.ndarray, RecollectionParams], RecollectionResult]
RunMany = Callable[[np.ndarray, list, RecollectionParams], list]


def unit(rows) -> np.ndarray:
    v = np.asarray(rows, dtype=np.float32)
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


def _padded(pools: list[np.ndarray], dim: int) -> np.ndarray:
    padded = np.zeros((len(pools), max([len(p) for p in pools] + [1]), dim), dtype=np.float32)
    for i, pool in enumerate(pools):
        padded[i, :len(pool)] = pool
    return padded


def compiled_many(q0s: np.ndarray, pools: list[np.ndarray], params: RecollectionParams) -> list[RecollectionResult]:
    """Many queries, each with its own pool, padded into one (E, L, d) array."""
    return recollect_compiled(q0s, _padded(pools, q0s.shape[1]), np.array([len(p) for p in pools]),
                              np.arange(len(pools)), params).results


def faithful_many(q0s: np.ndarray, pools: list[np.ndarray], params: RecollectionParams) -> list[RecollectionResult]:
    return [recollect_faithful(q0, pool, params) for q0, pool in zip(q0s, pools)]


MANY: dict[str, RunMany] = {"faithful": faithful_many, "compiled": compiled_many}


@pytest.fixture(params=sorted(MANY))
def engine(request) -> str:
    return request.param


@pytest.fixture
def run_many(engine: str) -> RunMany:
    return MANY[engine]


@pytest.fixture
def run(run_many: RunMany) -> Run:
    """One query through the engine under test."""
    return lambda q0, pool, params: run_many(np.asarray(q0, np.float32)[None], [pool], params)[0]


def dense_order(q0: np.ndarray, pool: np.ndarray) -> list[int]:
    scores = pool @ q0
    return sorted(range(len(pool)), key=lambda i: (-scores[i], i))


def random_pool(rng: np.random.Generator, n: int, dim: int, centres: int = 4, noise: float = 0.6,
                duplicates: float = 0.0) -> np.ndarray:
    """Unit vectors around a few random centres (topic-like), optionally with exact duplicate rows."""
    c = rng.standard_normal((centres, dim))
    v = c[rng.integers(0, centres, n)] + noise * rng.standard_normal((n, dim))
    if duplicates and n > 1:
        copies = rng.random(n) < duplicates
        v[copies] = v[rng.integers(0, n, copies.sum())]
    return unit(v)


def random_query(rng: np.random.Generator, pool: np.ndarray, noise: float = 0.8) -> np.ndarray:
    base = pool[rng.integers(0, len(pool))] if len(pool) else np.ones(pool.shape[1], np.float32)
    return unit(base + noise * rng.standard_normal(pool.shape[1]) / math.sqrt(pool.shape[1]) * 4)


# ---------------------------------------------------------------------------------------------------------------
# hand-checkable cases

# q0 = e1. Two obvious groups: {a, d} on the +y side, {b, c} on the +z side; cosines a .70 > b .65 > c .60 > d .50.
Q0 = np.array([1.0, 0.0, 0.0], dtype=np.float32)
A, B_, C_, D = unit([0.7, 0.714, 0.0]), unit([0.65, 0.0, 0.76]), unit([0.6, 0.0, 0.8]), unit([0.5, 0.866, 0.0])
FAR = unit([[-0.9, 0.3, 0.3], [-0.8, -0.6, 0.0], [-0.5, 0.0, -0.866]])  # negative cosines: below the 0 floor
HAND_POOL = np.vstack([A, B_, C_, D, FAR]).astype(np.float32)  # positions a=0, b=1, c=2, d=3


def test_round0_groups_by_cluster_and_ranks_by_score_sum(run) -> None:
    # B=2, F=2: round 0 retrieves the top 4 (a, b, c, d), KMeans(2) groups {a, d} and {b, c}; with λ_mmr = 1
    # the carried score is the cosine, sums are 1.20 vs 1.25, so {b, c} leads: insertion order b, c, a, d,
    # which is *not* the dense order a, b, c, d.
    params = RecollectionParams(k=4, beam=2, fanout=2, alpha=0.5, rounds=3, mmr_lambda=1.0, min_sim=0.0)
    result = run(Q0, HAND_POOL, params)
    assert result.positions == [1, 2, 0, 3]
    assert result.scores == pytest.approx([0.65, 0.6, 0.7, 0.5], abs=2e-3)
    assert result.trace["rounds"] == 1 and result.trace["stop_reason"] == "k_reached"
    assert result.trace["items_per_round"] == [4] and result.trace["candidates_per_round"] == [4]


def test_round0_is_dense_top_b_times_f_regrouped(run) -> None:
    rng = np.random.default_rng(11)
    for beam, fanout in [(2, 2), (3, 2), (3, 3), (4, 1)]:
        pool = random_pool(rng, 40, 16)
        q0 = random_query(rng, pool)
        params = RecollectionParams(k=50, beam=beam, fanout=fanout, rounds=1, min_sim=None)
        result = run(q0, pool, params)
        assert sorted(result.positions) == sorted(dense_order(q0, pool)[: beam * fanout])


def test_fanout_one_and_lambda_one_gives_dense_top_b_in_order(run) -> None:
    rng = np.random.default_rng(5)
    for beam in (2, 3, 4, 5):
        pool = random_pool(rng, 30, 12)
        q0 = random_query(rng, pool)
        params = RecollectionParams(k=beam, beam=beam, fanout=1, rounds=4, mmr_lambda=1.0, min_sim=None)
        result = run(q0, pool, params)
        assert result.positions == dense_order(q0, pool)[:beam]
        assert result.trace["rounds"] == 1


def test_mmr_score_is_carried_but_does_not_reorder(run) -> None:
    # λ = 0.5 on the hand pool: mmr_i = 0.5·cos_i − 0.5·max_j⟨v_i, v_j⟩ over the branch's four candidates.
    params = RecollectionParams(k=4, beam=2, fanout=2, rounds=1, mmr_lambda=0.5, min_sim=0.0)
    result = run(Q0, HAND_POOL, params)
    top4 = HAND_POOL[:4]
    gram = top4 @ top4.T
    np.fill_diagonal(gram, -np.inf)
    expected = {i: 0.5 * float(top4[i] @ Q0) - 0.5 * float(gram[i].max()) for i in range(4)}
    assert sorted(result.positions) == [0, 1, 2, 3]
    for position, score in zip(result.positions, result.scores):
        assert score == pytest.approx(expected[position], abs=1e-6)
    # within a cluster, members keep cosine order even if their MMR scores say otherwise
    for first, second in [(1, 2), (0, 3)]:
        assert result.positions.index(first) < result.positions.index(second)


def test_no_item_twice_and_later_rounds_never_repeat_earlier_ones(run) -> None:
    rng = np.random.default_rng(3)
    pool = random_pool(rng, 60, 16)
    q0 = random_query(rng, pool)
    params = RecollectionParams(k=60, beam=3, fanout=2, rounds=10, mmr_lambda=0.9, min_sim=None)
    result = run(q0, pool, params)
    assert len(set(result.positions)) == len(result.positions)
    assert sum(result.trace["items_per_round"]) >= len(result.positions)
    # the first round's block is exactly round 0's dense top-(B·F)
    first = result.trace["items_per_round"][0]
    assert sorted(result.positions[:first]) == sorted(dense_order(q0, pool)[:6])


def test_output_is_insertion_order_not_score_order(run) -> None:
    rng = np.random.default_rng(8)
    found = False
    for _ in range(20):
        pool = random_pool(rng, 50, 16)
        q0 = random_query(rng, pool)
        result = run(q0, pool, RecollectionParams(k=10, beam=3, fanout=2, mmr_lambda=0.9, min_sim=None))
        cosines = [float(pool[p] @ q0) for p in result.positions]
        found |= cosines != sorted(cosines, reverse=True)
    assert found, "insertion order should differ from dense order on some pools"


def test_floor_gives_short_output(run) -> None:
    # only a, b, c, d have cosine >= 0.3; K = 10 cannot be reached
    params = RecollectionParams(k=10, beam=2, fanout=2, rounds=5, mmr_lambda=1.0, min_sim=0.3)
    result = run(Q0, HAND_POOL, params)
    assert sorted(result.positions) == [0, 1, 2, 3]
    assert result.trace["stop_reason"] == "rounds_exhausted" and result.trace["rounds"] == 5
    assert result.trace["items_per_round"][1:] == [0, 0, 0, 0]


def test_after_empty_round_stop(run) -> None:
    params = RecollectionParams(k=10, beam=2, fanout=2, rounds=5, mmr_lambda=1.0, min_sim=0.3,
                                after_empty_round="stop")
    result = run(Q0, HAND_POOL, params)
    assert sorted(result.positions) == [0, 1, 2, 3]
    assert result.trace["stop_reason"] == "empty_round" and result.trace["rounds"] == 2


def test_fewer_candidates_than_clusters(run) -> None:
    pool = unit([[1.0, 0.1, 0.0], [0.9, 0.0, 0.3]])
    params = RecollectionParams(k=5, beam=3, fanout=2, rounds=3, mmr_lambda=0.9, min_sim=0.0)
    result = run(Q0, pool, params)
    assert sorted(result.positions) == [0, 1]
    assert result.trace["dead_branches_per_round"][0] == 0  # k = min(B, n) = 2: no empty cluster


def test_duplicate_embeddings_make_dead_branches_never_nan(run) -> None:
    """Five copies of one vector and one other: k = 3 > 2 distinct points, so one cluster is empty."""
    v, w = unit([0.8, 0.6, 0.0]), unit([0.6, 0.0, 0.8])
    pool = np.vstack([v, v, v, w, v, v]).astype(np.float32)
    for policy in ("keep", "drop"):
        params = RecollectionParams(k=6, beam=3, fanout=2, rounds=4, mmr_lambda=0.9, min_sim=0.0,
                                    dead_branch_policy=policy)
        result = run(Q0, pool, params)
        assert sorted(result.positions) == list(range(6))
        assert all(math.isfinite(s) for s in result.scores)
        assert result.trace["dead_branches_per_round"][0] == 1
        reference = recollect_faithful(Q0, pool, params)
        assert (result.positions, result.trace) == (reference.positions, reference.trace)


def test_identical_pool_only_duplicates(run) -> None:
    """Seven copies of one vector: every KMeans with k > 1 has empty clusters; all seven come out, in the faithful
    engine's order, never NaN."""
    pool = np.repeat(unit([[0.6, 0.8, 0.0]]), 7, axis=0)
    params = RecollectionParams(k=7, beam=4, fanout=2, rounds=6, mmr_lambda=0.9, min_sim=0.0)
    result = run(Q0, pool, params)
    assert sorted(result.positions) == list(range(7))
    assert all(math.isfinite(s) for s in result.scores)
    assert result.positions == recollect_faithful(Q0, pool, params).positions


def test_k_larger_than_pool(run) -> None:
    """K = 10 over 5 memories: all five, and a trace of all R rounds (every round after the pool is exhausted is
    empty; an engine may stop searching but must report them as the faithful engine does)."""
    rng = np.random.default_rng(2)
    pool = random_pool(rng, 5, 8)
    q0 = random_query(rng, pool)
    params = RecollectionParams(k=10, beam=3, fanout=2, rounds=10, min_sim=None)
    result = run(q0, pool, params)
    assert sorted(result.positions) == [0, 1, 2, 3, 4]
    assert result.trace["rounds"] == 10 and result.trace["stop_reason"] == "rounds_exhausted"
    assert result.trace == recollect_faithful(q0, pool, params).trace


def test_zero_norm_vectors_and_zero_query(run) -> None:
    pool = np.vstack([HAND_POOL[:4], np.zeros((2, 3), np.float32)]).astype(np.float32)
    params = RecollectionParams(k=6, beam=2, fanout=2, rounds=4, mmr_lambda=0.9, min_sim=0.0)
    result = run(Q0, pool, params)
    assert sorted(result.positions) == list(range(6))  # zero vectors score 0 >= floor 0
    assert all(math.isfinite(s) for s in result.scores)
    zero_query = run(np.zeros(3, np.float32), pool, params)
    assert all(math.isfinite(s) for s in zero_query.scores)
    assert len(set(zero_query.positions)) == len(zero_query.positions)
    assert result.positions == recollect_faithful(Q0, pool, params).positions
    assert zero_query.positions == recollect_faithful(np.zeros(3, np.float32), pool, params).positions


def test_padding_is_never_emitted(run_many) -> None:
    rng = np.random.default_rng(9)
    pools = [random_pool(rng, n, 8) for n in (3, 9, 1, 6)]
    q0s = np.stack([random_query(rng, p) for p in pools])
    params = RecollectionParams(k=20, beam=3, fanout=2, rounds=10, min_sim=None)  # no floor to hide padding
    for pool, result in zip(pools, run_many(q0s, pools, params)):
        assert sorted(result.positions) == list(range(len(pool)))


def test_empty_pool(run) -> None:
    result = run(Q0, np.zeros((0, 3), np.float32), RecollectionParams(k=5))
    assert result.positions == [] and result.scores == []
    assert result.trace["items_per_round"] == [0] * 10


def test_batch_equals_one_at_a_time(run, run_many) -> None:
    rng = np.random.default_rng(21)
    pools = [random_pool(rng, n, 16, duplicates=0.1 if i % 3 == 0 else 0.0)
             for i, n in enumerate([12, 40, 7, 33, 25, 2, 18])]
    q0s = np.stack([random_query(rng, p) for p in pools])
    for params in [RecollectionParams(k=10, beam=3, fanout=2, alpha=0.2, mmr_lambda=0.9),
                   RecollectionParams(k=5, beam=3, fanout=1, alpha=0.9, mmr_lambda=0.9, after_empty_round="stop"),
                   RecollectionParams(k=12, beam=4, fanout=3, alpha=0.5, mmr_lambda=0.99, min_sim=0.1)]:
        together = run_many(q0s, pools, params)
        for q0, pool, result in zip(q0s, pools, together):
            alone = run(q0, pool, params)
            # BLAS blocking depends on the padded shapes, so scores may differ in the last float32 bit
            assert alone.positions == result.positions
            assert np.allclose(alone.scores, result.scores, rtol=0, atol=1e-6)
            assert alone.trace == result.trace


def test_final_rerank_dense_sorts_everything_emitted_by_cosine(run) -> None:
    params = RecollectionParams(k=3, beam=2, fanout=2, rounds=3, mmr_lambda=1.0, min_sim=0.0,
                                final_rerank="dense")
    result = run(Q0, HAND_POOL, params)
    assert result.positions == [0, 1, 2]  # emitted b, c, a, d; re-ranked by cosine, then truncated
    assert result.scores == pytest.approx([0.7, 0.65, 0.6], abs=2e-3)


def test_full_exploration_runs_every_round_then_reranks(run) -> None:
    rng = np.random.default_rng(12)
    pool = random_pool(rng, 40, 16)
    q0 = random_query(rng, pool)
    params = RecollectionParams(k=5, beam=3, fanout=2, rounds=4, mmr_lambda=0.9, min_sim=None,
                                full_exploration=True)
    result = run(q0, pool, params)
    assert result.trace["rounds"] == 4 and result.trace["collected"] >= 5
    cosines = [float(pool[p] @ q0) for p in result.positions]
    assert cosines == sorted(cosines, reverse=True) and len(result.positions) == 5


def test_rejects_a_non_finite_query(run) -> None:
    with pytest.raises(ValueError, match="non-finite"):
        run(np.array([np.nan, 0, 0], np.float32), HAND_POOL, RecollectionParams())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(0, 25), beam=st.integers(1, 4), fanout=st.integers(1, 3),
       k=st.integers(1, 12), floor=st.sampled_from([None, 0.0, 0.2]), dup=st.sampled_from([0.0, 0.3]))
def test_invariants(run, seed, n, beam, fanout, k, floor, dup) -> None:
    rng = np.random.default_rng(seed)
    pool = random_pool(rng, n, 6, duplicates=dup) if n else np.zeros((0, 6), np.float32)
    q0 = random_query(rng, pool) if n else unit(rng.standard_normal(6))
    params = RecollectionParams(k=k, beam=beam, fanout=fanout, rounds=6, mmr_lambda=0.9, min_sim=floor)
    result = run(q0, pool, params)
    assert len(result.positions) == len(set(result.positions)) <= k
    assert all(0 <= p < n for p in result.positions)
    assert all(math.isfinite(s) for s in result.scores)
    # (the floor applies to the cosine with the *branch* query, so no per-item check against q0 here)
    assert len(result.trace["items_per_round"]) == result.trace["rounds"] <= params.rounds



AGREEMENT_SETTINGS = {
    "personabench_r5": RecollectionParams(k=5, beam=3, fanout=1, alpha=0.9, rounds=10, mmr_lambda=0.9,
                                          min_sim=0.0, after_empty_round="stop"),
    "personabench_r10": RecollectionParams(k=10, beam=3, fanout=2, alpha=0.2, rounds=10, mmr_lambda=0.9,
                                           min_sim=0.0),
    "personamem": RecollectionParams(k=10, beam=3, fanout=2, alpha=0.8, rounds=10, mmr_lambda=0.95, min_sim=0.3),
    "longmemeval": RecollectionParams(k=20, beam=4, fanout=1, alpha=0.8, rounds=20, mmr_lambda=0.99,
                                      min_sim=0.0),
    "wide_fanout": RecollectionParams(k=12, beam=4, fanout=3, alpha=0.5, rounds=6, mmr_lambda=0.9, min_sim=0.0),
    "drop_dead_dense_rerank": RecollectionParams(k=10, beam=3, fanout=2, alpha=0.5, rounds=8, mmr_lambda=0.9,
                                                 min_sim=0.0, dead_branch_policy="drop", final_rerank="dense"),
    "full_exploration": RecollectionParams(k=8, beam=3, fanout=2, alpha=0.8, rounds=6, mmr_lambda=0.95,
                                           min_sim=0.0, full_exploration=True),
}
