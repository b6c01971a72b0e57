"""Recollection, faithful engine (spec retrievers.md §3): hand-built geometries whose output can be worked out
on paper, the spec's corollaries, and the degenerate inputs (duplicates, empty, zero vectors)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrepro.retrievers.rfmem.params import RecollectionParams
from memrepro.retrievers.rfmem.recollection import recollect_faithful


def unit(*components: float) -> np.ndarray:
    v = np.array(components, dtype=np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


def along(cosine: float, axis: int, dim: int = 4) -> np.ndarray:
    """Unit vector at the given cosine to e0, tilted towards e_axis."""
    v = np.zeros(dim)
    v[0], v[axis] = cosine, math.sqrt(1 - cosine ** 2)
    return v.astype(np.float32)


def params(**overrides) -> RecollectionParams:
    base = dict(k=10, beam=3, fanout=1, alpha=0.8, rounds=10, mmr_lambda=1.0, min_sim=0.0,
                after_empty_round="continue")
    return RecollectionParams(**{**base, **overrides})


def random_pool(seed: int, n: int = 30, dim: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pool = rng.normal(size=(n, dim))
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    query = rng.normal(size=dim)
    return (query / np.linalg.norm(query)).astype(np.float32), pool.astype(np.float32)


def dense_order(query: np.ndarray, pool: np.ndarray) -> list[int]:
    return list(np.argsort(-(pool @ query), kind="stable"))


Q0 = unit(1, 0, 0, 0)


# -- round 0 ---------------------------------------------------------------------------------------------

def test_round0_is_dense_top_bf_regrouped_by_cluster_and_ranked_by_score_sum() -> None:
    """B=2, F=2 → round 0 retrieves the dense top-4 = a1 (0.95) and b1, b2, b3 (0.60, 0.58, 0.56).

    KMeans splits {a1} from {b1, b2, b3}; cluster sums (λ_mmr = 1 → scores are cosines) are 0.95 and 1.74, so
    the b cluster wins the first beam slot even though a1 is the best single hit: the output is b1, b2, b3, a1,
    not the dense order a1, b1, b2, b3. K = 4 ≤ B·F, so round 0 is the only round.
    """
    pool = np.stack([along(0.10, 3), along(0.60, 2), along(0.95, 1), along(0.58, 2), along(0.56, 2),
                     along(-0.5, 3)])
    result = recollect_faithful(Q0, pool, params(k=4, beam=2, fanout=2))
    assert result.positions == [1, 3, 4, 2]
    assert result.scores == pytest.approx([0.60, 0.58, 0.56, 0.95], abs=1e-6)
    assert dense_order(Q0, pool)[:4] == [2, 1, 3, 4]
    assert result.trace["rounds"] == 1 and result.trace["items_per_round"] == [4]
    assert result.trace["candidates_per_round"] == [4] and result.trace["stop_reason"] == "k_reached"


@pytest.mark.parametrize("seed", range(5))
def test_fanout_1_and_mmr_lambda_1_make_round0_the_dense_top_b(seed: int) -> None:
    query, pool = random_pool(seed)
    result = recollect_faithful(query, pool, params(beam=3, fanout=1, rounds=1, min_sim=None))
    assert result.positions == dense_order(query, pool)[:3]
    assert result.scores == pytest.approx(list((pool @ query)[result.positions]), abs=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_round0_emits_every_candidate_when_k_le_bf(seed: int) -> None:
    query, pool = random_pool(seed)
    result = recollect_faithful(query, pool, params(k=6, beam=3, fanout=2, mmr_lambda=0.9, min_sim=None))
    assert sorted(result.positions) == sorted(dense_order(query, pool)[:6])
    assert result.trace["rounds"] == 1


def test_mmr_replaces_the_carried_score_but_not_the_order() -> None:
    """One cluster (B=1), F=3: the carried score is λ·s_i − (1−λ)·max_j⟨v_i,v_j⟩; order stays by cosine."""
    v0, v1, v2 = unit(0.9, 0.4359, 0), unit(0.85, 0.5268, 0), unit(0.8, 0, 0.6)
    pool = np.stack([v0, v1, v2, unit(-1, 0, 0)])
    q0 = unit(1, 0, 0)
    result = recollect_faithful(q0, pool, params(beam=1, fanout=3, rounds=1, mmr_lambda=0.5))
    d01, d02, d12 = float(v0 @ v1), float(v0 @ v2), float(v1 @ v2)
    c0, c1, c2 = (float(v @ q0) for v in (v0, v1, v2))
    expected = [0.5 * c0 - 0.5 * max(d01, d02), 0.5 * c1 - 0.5 * max(d01, d12), 0.5 * c2 - 0.5 * max(d02, d12)]
    assert result.positions == [0, 1, 2]
    assert result.scores == pytest.approx(expected, abs=1e-6)
    assert expected[2] > expected[0]  # MMR would prefer v2, yet it stays third


def test_single_candidate_has_no_redundancy_penalty() -> None:
    pool = np.stack([unit(0.8, 0.6, 0), unit(-1, 0, 0)])
    result = recollect_faithful(unit(1, 0, 0), pool, params(beam=1, fanout=1, rounds=1, mmr_lambda=0.9))
    assert result.positions == [0] and result.scores == pytest.approx([0.9 * 0.8], abs=1e-6)


# -- later rounds ----------------------------------------------------------------------------------------

def test_dedup_against_earlier_rounds_and_insertion_order() -> None:
    """B=1, F=1 on an arc of angles 0.1 < 0.2 < 0.3 < 0.4 from q0: every child query stays between q0 and the
    last emitted item, so round r searches the top (1+r) and the only unseen candidate is the next on the arc."""
    pool = np.stack([unit(math.cos(t), math.sin(t)) for t in (0.3, 0.1, 0.4, 0.2)])
    result = recollect_faithful(unit(1, 0), pool, params(k=3, beam=1, fanout=1, alpha=0.5))
    assert result.positions == [1, 3, 0]
    assert result.trace["items_per_round"] == [1, 1, 1] and result.trace["candidates_per_round"] == [1, 1, 1]


def test_r_equal_1_returns_round0_only() -> None:
    query, pool = random_pool(3)
    one = recollect_faithful(query, pool, params(k=10, beam=3, fanout=2, rounds=1, mmr_lambda=0.9))
    many = recollect_faithful(query, pool, params(k=10, beam=3, fanout=2, rounds=10, mmr_lambda=0.9))
    assert one.trace["rounds"] == 1 and len(one.positions) <= 6
    assert many.positions[:len(one.positions)] == one.positions  # insertion order: round 0 comes first
    assert len(many.positions) == 10


@pytest.mark.parametrize("seed", range(8))
def test_stop_output_is_a_prefix_of_continue_output(seed: int) -> None:
    query, pool = random_pool(seed, n=40, dim=4)
    setting = dict(k=15, beam=3, fanout=1, mmr_lambda=0.9, min_sim=0.3, alpha=0.5)
    stop = recollect_faithful(query, pool, params(after_empty_round="stop", **setting))
    cont = recollect_faithful(query, pool, params(after_empty_round="continue", **setting))
    assert cont.positions[:len(stop.positions)] == stop.positions


def test_continue_after_an_empty_round_can_find_more_than_stop() -> None:
    """Search random low-dimensional pools for a case where a round is empty but a later, wider one is not."""
    for seed in range(300):
        query, pool = random_pool(seed, n=40, dim=3)
        setting = dict(k=20, beam=3, fanout=1, mmr_lambda=0.9, min_sim=0.2, alpha=0.5)
        stop = recollect_faithful(query, pool, params(after_empty_round="stop", **setting))
        cont = recollect_faithful(query, pool, params(after_empty_round="continue", **setting))
        if len(cont.positions) > len(stop.positions):
            assert stop.trace["stop_reason"] == "empty_round"
            assert 0 in cont.trace["items_per_round"]
            return
    pytest.fail("no pool with an empty round followed by a productive one")


# -- short outputs ---------------------------------------------------------------------------------------

def test_floor_can_leave_the_output_short() -> None:
    pool = np.stack([along(0.9, 1), along(0.7, 2), along(0.0, 3), along(-0.3, 1), along(-0.5, 2)])
    result = recollect_faithful(Q0, pool, params(k=5, beam=2, fanout=2, min_sim=0.5, after_empty_round="stop"))
    assert sorted(result.positions) == [0, 1]
    assert result.trace["stop_reason"] == "empty_round"


def test_exhausted_pool_and_k_larger_than_the_episode() -> None:
    query, pool = random_pool(1, n=5)
    for policy in ("stop", "continue"):
        result = recollect_faithful(query, pool, params(k=10, beam=2, fanout=2, min_sim=None,
                                                        after_empty_round=policy))
        assert sorted(result.positions) == [0, 1, 2, 3, 4]
    assert result.trace["stop_reason"] == "rounds_exhausted"


def test_empty_pool() -> None:
    result = recollect_faithful(Q0, np.zeros((0, 4), np.float32), params())
    assert result.positions == [] and result.scores == []


def test_fewer_candidates_than_clusters() -> None:
    pool = np.stack([along(0.9, 1), along(0.8, 2)])
    result = recollect_faithful(Q0, pool, params(k=5, beam=3, fanout=2))
    assert sorted(result.positions) == [0, 1]


# -- degenerate vectors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["keep", "drop"])
def test_duplicate_vectors_make_dead_branches_without_nan(policy: str) -> None:
    dup = along(0.6, 1)
    pool = np.stack([dup, dup, dup, dup, along(0.2, 2)])  # two distinct points for three clusters
    result = recollect_faithful(Q0, pool, params(k=10, beam=3, fanout=2, mmr_lambda=0.9,
                                                 dead_branch_policy=policy))
    assert result.trace["dead_branches_per_round"][0] == 1
    assert all(math.isfinite(s) for s in result.scores)
    assert sorted(result.positions) == [0, 1, 2, 3, 4]


def test_dead_branch_keeps_the_parent_score_sum_and_can_hold_a_beam_slot() -> None:
    """Four identical vectors and B=3: KMeans leaves clusters empty; with 'keep' they still become children."""
    dup = along(0.6, 1)
    pool = np.stack([dup] * 4)
    kept = recollect_faithful(Q0, pool, params(k=10, beam=3, fanout=2, mmr_lambda=0.9, rounds=2))
    dropped = recollect_faithful(Q0, pool, params(k=10, beam=3, fanout=2, mmr_lambda=0.9, rounds=2,
                                                  dead_branch_policy="drop"))
    assert kept.positions == dropped.positions == [0, 1, 2, 3]
    assert kept.trace["dead_branches_per_round"][0] == 2


def test_zero_norm_query_and_zero_vectors_give_finite_output() -> None:
    pool = np.stack([along(0.9, 1), np.zeros(4, np.float32), along(0.5, 2), np.zeros(4, np.float32)])
    for query in (np.zeros(4, np.float32), Q0):
        result = recollect_faithful(query, pool, params(k=4, beam=2, fanout=2, mmr_lambda=0.9))
        assert all(math.isfinite(s) for s in result.scores)
        assert len(set(result.positions)) == len(result.positions) <= 4


def test_nan_query_is_refused() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        recollect_faithful(np.full(4, np.nan, np.float32), np.stack([Q0]), params())


# -- variants and invariants -----------------------------------------------------------------------------

def test_final_dense_rerank_sorts_the_collected_items_by_cosine_to_the_query() -> None:
    pool = np.stack([along(0.10, 3), along(0.60, 2), along(0.95, 1), along(0.58, 2), along(0.56, 2)])
    result = recollect_faithful(Q0, pool, params(k=4, beam=2, fanout=2, final_rerank="dense"))
    assert result.positions == [2, 1, 3, 4]
    assert result.scores == pytest.approx([0.95, 0.60, 0.58, 0.56], abs=1e-6)


def test_invalid_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="after_empty_round"):
        recollect_faithful(Q0, np.stack([Q0]), params(after_empty_round="halt"))
    with pytest.raises(ValueError, match="fanout"):
        recollect_faithful(Q0, np.stack([Q0]), params(fanout=0))


@given(seed=st.integers(0, 10_000), k=st.integers(1, 12), beam=st.integers(1, 4), fanout=st.integers(1, 3),
       rounds=st.integers(1, 4), n=st.integers(0, 25), duplicates=st.booleans(),
       floor=st.sampled_from([None, 0.0, 0.3]), policy=st.sampled_from(["stop", "continue"]))
@settings(max_examples=60, deadline=None)
def test_output_invariants(seed, k, beam, fanout, rounds, n, duplicates, floor, policy) -> None:
    rng = np.random.default_rng(seed)
    pool = rng.normal(size=(n, 5)).astype(np.float32)
    if duplicates and n > 2:
        pool[: n // 2] = pool[0]
    pool /= np.linalg.norm(pool, axis=1, keepdims=True) + 1e-12
    query = unit(*rng.normal(size=5))
    result = recollect_faithful(query, pool, RecollectionParams(
        k=k, beam=beam, fanout=fanout, rounds=rounds, alpha=0.5, mmr_lambda=0.9, min_sim=floor,
        after_empty_round=policy))
    assert len(result.positions) == len(result.scores) <= k
    assert len(set(result.positions)) == len(result.positions)
    assert all(0 <= p < n for p in result.positions) and all(math.isfinite(s) for s in result.scores)
    assert result.trace["rounds"] <= rounds
    assert sum(result.trace["items_per_round"]) >= len(result.positions)
    if floor is not None:  # round 0 emits only items that pass the floor against q0
        first = result.positions[: result.trace["items_per_round"][0]] if result.trace["items_per_round"] else []
        assert all(float(pool[p] @ query) >= floor for p in first)


def test_top_n_scores_duplicate_rows_identically() -> None:
    """A matrix-vector product can score identical rows a few ulps apart; duplicates must tie exactly."""
    from memrepro.retrievers.rfmem.recollection import _top_n

    rng = np.random.default_rng(3)
    for _ in range(20):
        pool = rng.standard_normal((110, 768)).astype(np.float32)
        pool /= np.linalg.norm(pool, axis=1, keepdims=True)
        pool[[17, 50, 77, 109]] = pool[0]
        order, scores = _top_n(rng.standard_normal(768).astype(np.float32), pool, 110)
        where = [list(order).index(p) for p in (0, 17, 50, 77, 109)]
        assert where == sorted(where) and len({float(scores[w]) for w in where}) == 1
