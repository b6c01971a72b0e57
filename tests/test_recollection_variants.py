"""RF-Mem Appendix D.8-D.9 recollection alternatives (paper Tables 15-16), faithful engine.

The release has none of these variants; the constructions are memrepro's own (``recollection.py`` docstring).
Tests: each variant on hand-built geometries whose output can be worked out on paper, the invariants every
variant keeps (unique ids, ≤ K, finite scores, deterministic), and that the defaults still give the released
algorithm's output bit for bit (golden outputs computed with the code as it was before the variants existed).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from memrepro.retrievers.rfmem.params import RecollectionParams
from memrepro.retrievers.rfmem.recollection import gated_weight, knn_neighbours, recollect_faithful
from memrepro.retrievers.rfmem.retriever import RecollectionRetriever, RFMemRetriever


def params(**overrides) -> RecollectionParams:
    base = dict(k=10, beam=3, fanout=1, alpha=0.8, rounds=10, mmr_lambda=1.0, min_sim=0.0,
                after_empty_round="continue")
    return RecollectionParams(**{**base, **overrides})


def random_case(seed: int, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pool = rng.normal(size=(n, dim))
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    query = rng.normal(size=dim)
    return (query / np.linalg.norm(query)).astype(np.float32), pool.astype(np.float32)


def angle(degrees: float) -> np.ndarray:
    return np.array([math.cos(math.radians(degrees)), math.sin(math.radians(degrees))], dtype=np.float32)


def near(base: np.ndarray, axis: int, tilt: float) -> np.ndarray:
    """``base`` tilted slightly towards ``e_axis``, renormalised."""
    v = base.astype(np.float64).copy()
    v[axis] += tilt
    return (v / np.linalg.norm(v)).astype(np.float32)


def rerank(positions: list[int], q0: np.ndarray, pool: np.ndarray) -> list[int]:
    cos = pool[positions] @ q0
    return [positions[i] for i in np.lexsort((np.array(positions), -cos.astype(np.float64)))]


VARIANTS = {
    "dbscan": dict(clustering="dbscan"),
    "dbscan_drop": dict(clustering="dbscan", dbscan_noise="drop"),
    "spectral": dict(clustering="spectral"),
    "gated": dict(mixing="gated"),
    "graph_bfs": dict(expansion="graph_bfs"),
    "graph_bfs_k3": dict(expansion="graph_bfs", graph_k=3, graph_min_sim=None),
    "full_exploration": dict(full_exploration=True),
    "graph_bfs_full": dict(expansion="graph_bfs", full_exploration=True),
    "spectral_gated_full": dict(clustering="spectral", mixing="gated", full_exploration=True),
}


# -- defaults unchanged ----------------------------------------------------------------------------------

# (seed, n, dim, params) → positions, float.hex of the carried scores, trace; computed with recollection.py
# before the D.8-D.9 switches were added (the last case has duplicate vectors, so dead branches).
GOLDEN = [
    (0, 40, 8, dict(k=10, beam=3, fanout=2, alpha=0.8, rounds=10, mmr_lambda=0.95, min_sim=0.0),
     [25, 37, 17, 20, 12, 31, 18, 16, 7, 27],
     ['0x1.6d56437ffffffp-1', '0x1.ee0211cccccccp-2', '0x1.0089c87333333p-1', '0x1.5650ecb333332p-1',
      '0x1.b95994fffffffp-2', '0x1.6b002c1999999p-2', '0x1.27fc534ccccccp-2', '0x1.231e8e6666665p-2',
      '0x1.1ab5e7e666666p-2', '0x1.03351e9000000p-2'],
     {'rounds': 3, 'items_per_round': [6, 2, 2], 'candidates_per_round': [6, 6, 6],
      'dead_branches_per_round': [0, 0, 0], 'stop_reason': 'k_reached'}),
    (1, 30, 8, dict(k=5, beam=3, fanout=1, alpha=0.9, rounds=10, mmr_lambda=0.9, min_sim=0.0,
                    after_empty_round="stop"),
     [13, 0, 10, 15, 21],
     ['0x1.38e22accccccdp-1', '0x1.2fe45e999999ap-1', '0x1.76456d999999ap-2', '0x1.bea8ee0000000p-2',
      '0x1.9c18b13333333p-2'],
     {'rounds': 3, 'items_per_round': [3, 1, 1], 'candidates_per_round': [3, 3, 3],
      'dead_branches_per_round': [0, 0, 0], 'stop_reason': 'k_reached'}),
    (2, 60, 16, dict(k=10, beam=4, fanout=1, alpha=0.2, rounds=10, mmr_lambda=0.9, min_sim=None),
     [55, 48, 52, 46, 22, 4, 26, 42, 54, 0],
     ['0x1.ea64773333335p-2', '0x1.91f3880000001p-2', '0x1.5914023333333p-2', '0x1.3e121dccccccdp-2',
      '0x1.96420b999999ap-2', '0x1.6977c2ccccccdp-2', '0x1.4f30380000000p-2', '0x1.a2593accccccdp-2',
      '0x1.2c27d8999999ap-2', '0x1.4d1eb4999999ap-2'],
     {'rounds': 3, 'items_per_round': [4, 3, 3], 'candidates_per_round': [4, 5, 5],
      'dead_branches_per_round': [0, 0, 0], 'stop_reason': 'k_reached'}),
    (3, 25, 6, dict(k=8, beam=2, fanout=3, alpha=0.5, rounds=4, mmr_lambda=1.0, min_sim=0.0, final_rerank="dense"),
     [9, 8, 12, 0, 6, 4, 11, 14],
     ['0x1.810d2e0000000p-1', '0x1.fbdf2e0000000p-2', '0x1.4514f60000000p-2', '0x1.12cbba0000000p-2',
      '0x1.07bffa0000000p-2', '0x1.eec8460000000p-3', '0x1.1c662a0000000p-3', '0x1.763be00000000p-4'],
     {'rounds': 2, 'items_per_round': [6, 3], 'candidates_per_round': [6, 6], 'dead_branches_per_round': [0, 0],
      'stop_reason': 'k_reached'}),
    ("duplicates", 20, 5, dict(k=12, beam=3, fanout=2, alpha=0.8, rounds=6, mmr_lambda=0.95, min_sim=0.0),
     [0, 1, 2, 3, 4, 19, 5, 6, 7, 12, 13, 16],
     ['0x1.1d0101b333333p-1'] * 5 + ['0x1.3c50ece666666p-1'] + ['0x1.39cf3bb333333p-1'] * 3
     + ['0x1.1373731999999p-1', '0x1.76d92c8000000p-2', '0x1.c4e46d6666665p-3'],
     {'rounds': 4, 'items_per_round': [6, 3, 1, 2], 'candidates_per_round': [6, 5, 1, 2],
      'dead_branches_per_round': [1, 3, 0, 0], 'stop_reason': 'k_reached'}),
]


def golden_inputs(seed, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    if seed == "duplicates":
        rng = np.random.default_rng(7)
        pool = rng.normal(size=(n, dim))
        pool[:8] = pool[0]
        pool /= np.linalg.norm(pool, axis=1, keepdims=True)
        query = pool[0] + 0.3 * rng.normal(size=dim)
    else:
        rng = np.random.default_rng(seed)
        pool = rng.normal(size=(n, dim))
        pool /= np.linalg.norm(pool, axis=1, keepdims=True)
        query = rng.normal(size=dim)
    return (query / np.linalg.norm(query)).astype(np.float32), pool.astype(np.float32)


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: str(c[0]))
def test_default_params_reproduce_the_pre_variant_output_bit_for_bit(case) -> None:
    seed, n, dim, kwargs, positions, scores, trace = case
    q0, pool = golden_inputs(seed, n, dim)
    for p in (RecollectionParams(**kwargs),  # implicit defaults, and the same defaults spelled out
              RecollectionParams(**kwargs, clustering="kmeans", mixing="alpha", expansion="cluster",
                                 full_exploration=False)):
        result = recollect_faithful(q0, pool, p)
        assert result.positions == positions
        # The goldens were computed with a matrix-vector product; the engine now scores with row-wise products
        # (so duplicate rows tie exactly), which moves the last float32 bits of the carried scores only.
        assert result.scores == pytest.approx([float.fromhex(h) for h in scores], abs=1e-6, rel=0)
        assert result.trace == trace  # no variant keys added on the default path


def test_variant_knobs_are_inert_while_their_switch_is_off() -> None:
    """DBSCAN / spectral / graph parameters change nothing unless their method is selected."""
    q0, pool = random_case(4, 30, 6)
    base = recollect_faithful(q0, pool, params(fanout=2))
    knobs = recollect_faithful(q0, pool, params(fanout=2, dbscan_eps=0.1, dbscan_min_samples=7, dbscan_noise="drop",
                                                spectral_gamma=9.0, graph_k=1, graph_min_sim=0.99))
    assert (knobs.positions, knobs.scores, knobs.trace) == (base.positions, base.scores, base.trace)


# -- invariants of every variant ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("seed", [0, 1])
def test_every_variant_keeps_the_output_invariants(name: str, seed: int) -> None:
    q0, pool = random_case(seed, 40, 8)
    pool[5:12] = pool[5]  # duplicates (empty KMeans clusters inside spectral; DBSCAN density)
    pool[20] = 0.0  # a zero vector
    for k, beam, fanout, rounds, floor in [(5, 3, 1, 10, 0.0), (10, 3, 2, 10, 0.0), (7, 2, 3, 3, None)]:
        p = params(k=k, beam=beam, fanout=fanout, rounds=rounds, min_sim=floor, mmr_lambda=0.9,
                   after_empty_round="stop", **VARIANTS[name])
        first = recollect_faithful(q0, pool, p)
        again = recollect_faithful(q0, pool, p)
        assert (first.positions, first.scores, first.trace) == (again.positions, again.scores, again.trace)
        assert len(first.positions) == len(set(first.positions)) <= k
        assert all(0 <= i < len(pool) for i in first.positions)
        assert all(math.isfinite(s) for s in first.scores)
        assert len(first.positions) == len(first.scores)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_handles_empty_and_tiny_pools(name: str) -> None:
    q0 = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    p = params(k=5, **VARIANTS[name])
    assert recollect_faithful(q0, np.zeros((0, 3), dtype=np.float32), p).positions == []
    single = recollect_faithful(q0, np.array([[0.6, 0.8, 0.0]], dtype=np.float32), p)
    assert single.positions == ([] if name == "dbscan_drop" else [0])  # a lone point is DBSCAN noise
    twins = recollect_faithful(q0, np.array([[0.6, 0.8, 0.0]] * 2, dtype=np.float32), p)
    assert sorted(twins.positions) == [0, 1]


# -- DBSCAN (D.8.1) ---------------------------------------------------------------------------------------

def dbscan_geometry() -> tuple[np.ndarray, np.ndarray]:
    """q0 = e0; two tight pairs and one isolated point, all with cosine > 0.5 to q0.

    a1, a2: around e0+e1 (cos 0.99 between them); b1, b2: around e0+e2; c: towards e3. Pairwise Euclidean
    distance within a pair ≈ 0.14 < eps = 0.5, between groups ≈ 1 > eps.
    """
    q0 = np.array([1, 0, 0, 0], dtype=np.float32)
    a = np.array([1, 1, 0, 0]) / math.sqrt(2)
    b = np.array([1, 0, 1, 0]) / math.sqrt(2)
    c = np.array([1, 0, 0, 1]) / math.sqrt(2)
    pool = np.stack([near(a, 2, 0.05), near(b, 1, 0.05), near(a, 3, 0.10), near(c, 1, -0.3),
                     near(b, 3, 0.10)])  # a1, b1, a2, c, b2
    return q0, pool.astype(np.float32)


def test_dbscan_groups_the_pairs_and_makes_the_noise_point_a_singleton_child() -> None:
    q0, pool = dbscan_geometry()
    candidates = list(np.argsort(-(pool @ q0), kind="stable"))
    result = recollect_faithful(q0, pool, params(k=5, beam=3, fanout=2, rounds=1, clustering="dbscan"))
    # round 0 searches B·F = 6 ≥ 5: all five are candidates; 2 clusters + 1 noise child = 3 ≤ B all survive.
    assert sorted(result.positions) == [0, 1, 2, 3, 4]
    assert result.trace["noise_per_round"] == [1]
    # each pair is emitted contiguously (one child each), and the pair children outrank the lone noise child
    order = result.positions
    assert abs(order.index(0) - order.index(2)) == 1 and abs(order.index(1) - order.index(4)) == 1
    assert order[-1] == 3
    assert candidates[0] in order  # nothing dropped


def test_dbscan_drop_leaves_noise_points_out() -> None:
    q0, pool = dbscan_geometry()
    result = recollect_faithful(q0, pool, params(k=5, beam=3, fanout=2, rounds=1, clustering="dbscan",
                                                 dbscan_noise="drop"))
    assert sorted(result.positions) == [0, 1, 2, 4]  # c (3) is noise: no child, never emitted
    assert result.trace["noise_per_round"] == [1]


def test_dbscan_all_noise_makes_every_candidate_its_own_child_and_the_beam_prunes_them() -> None:
    """Orthogonal candidates are all noise: 4 singleton children, only the best B = 2 survive round 0."""
    q0 = np.array([1, 0, 0, 0, 0], dtype=np.float32)
    pool = np.stack([near(np.eye(5)[0], axis, 1.0) for axis in (1, 2, 3, 4)])  # cos 0.707 each, mutually 0.5
    pool[0] = near(pool[0], 0, 0.2)  # make the cosines to q0 distinct: pool[0] best, then ties by position
    result = recollect_faithful(q0, pool, params(k=2, beam=2, fanout=2, rounds=1, clustering="dbscan"))
    assert result.trace["noise_per_round"] == [4]
    assert result.positions == [0, 1]  # singleton children ranked by their cosine; stable ties keep order
    with_kmeans = recollect_faithful(q0, pool, params(k=4, beam=2, fanout=2, rounds=1))
    assert sorted(with_kmeans.positions) == [0, 1, 2, 3]  # KMeans (k = B = 2) keeps every candidate


def test_dbscan_min_samples_1_has_no_noise() -> None:
    q0, pool = dbscan_geometry()
    result = recollect_faithful(q0, pool, params(k=5, beam=3, fanout=2, rounds=1, clustering="dbscan",
                                                 dbscan_min_samples=1))
    assert result.trace["noise_per_round"] == [0]
    assert sorted(result.positions) == [0, 1, 2, 3, 4]


# -- spectral (D.8.2) -------------------------------------------------------------------------------------

def test_spectral_separates_two_well_separated_groups() -> None:
    q0 = np.array([1, 0, 0, 0], dtype=np.float32)
    a = np.array([1, 1, 0, 0]) / math.sqrt(2)
    b = np.array([1, 0, 0, 1]) / math.sqrt(2)
    pool = np.stack([near(a, 2, 0.02), near(b, 2, 0.02), near(a, 2, -0.03), near(b, 2, 0.05),
                     near(a, 3, 0.04), near(b, 1, 0.03)])  # a: 0, 2, 4; b: 1, 3, 5
    result = recollect_faithful(q0, pool, params(k=6, beam=2, fanout=3, rounds=1, clustering="spectral"))
    assert sorted(result.positions) == list(range(6))
    groups = {frozenset(result.positions[:3]), frozenset(result.positions[3:])}
    assert groups == {frozenset({0, 2, 4}), frozenset({1, 3, 5})}


def test_spectral_with_fewer_points_than_clusters_puts_each_point_alone() -> None:
    """B = 4 but 2 candidates: k = min(B, n) = 2 = n, so two singleton children (no spectral embedding)."""
    q0 = np.array([1, 0, 0], dtype=np.float32)
    pool = np.array([[0.6, 0.8, 0.0], [0.8, 0.0, 0.6]], dtype=np.float32)
    result = recollect_faithful(q0, pool, params(k=5, beam=4, fanout=2, rounds=3, clustering="spectral"))
    assert result.positions == [1, 0]  # singleton children ranked by cosine: 0.8 then 0.6
    assert result.trace["items_per_round"][0] == 2


def test_spectral_on_duplicates_never_builds_a_nan_query() -> None:
    q0 = np.array([1, 0, 0], dtype=np.float32)
    pool = np.array([[0.6, 0.8, 0.0]] * 6 + [[0.0, 0.6, 0.8]], dtype=np.float32)
    result = recollect_faithful(q0, pool, params(k=7, beam=3, fanout=2, clustering="spectral"))
    assert sorted(result.positions) == list(range(7))
    assert all(math.isfinite(s) for s in result.scores)


# -- gated mixing (D.8.3) ---------------------------------------------------------------------------------

def test_gate_is_the_logistic_of_the_query_centroid_cosine() -> None:
    e0, e1 = np.eye(3, dtype=np.float32)[:2]
    assert gated_weight(e0, e1) == 0.5
    assert gated_weight(e0, e0) == pytest.approx(1 / (1 + math.exp(-1)))
    assert gated_weight(e0, -e0) == pytest.approx(1 / (1 + math.exp(1)))
    assert gated_weight(e0, np.zeros(3, dtype=np.float32)) == 0.5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gates_lie_in_the_unit_interval_and_round0_gates_match_the_formula(seed: int) -> None:
    q0, pool = random_case(seed, 40, 8)
    p = params(k=12, beam=3, fanout=2, mmr_lambda=0.95, mixing="gated")
    result = recollect_faithful(q0, pool, p)
    gates = [g for round_gates in result.trace["gates_per_round"] for g in round_gates]
    assert gates and all(1 / (1 + math.e) <= g <= 1 / (1 + math.exp(-1)) for g in gates)
    assert all(0.0 <= g <= 1.0 for g in gates)
    # round 0 has one branch (q0) and its children are the round-0 clusters, emitted in full
    round0 = result.positions[: result.trace["items_per_round"][0]]
    assert len(result.trace["gates_per_round"][0]) <= 3 and len(round0) == 6


def test_gated_and_alpha_mixing_agree_on_round0_and_differ_later() -> None:
    q0, pool = random_case(5, 60, 8)
    alpha = recollect_faithful(q0, pool, params(k=20, fanout=2, alpha=0.9))
    gated = recollect_faithful(q0, pool, params(k=20, fanout=2, alpha=0.9, mixing="gated"))
    n0 = alpha.trace["items_per_round"][0]
    assert gated.positions[:n0] == alpha.positions[:n0]  # mixing only shapes the children's queries
    assert gated.positions != alpha.positions


def test_gated_mixing_ignores_alpha() -> None:
    q0, pool = random_case(6, 40, 8)
    runs = [recollect_faithful(q0, pool, params(k=10, fanout=2, alpha=a, mixing="gated")) for a in (0.1, 0.9)]
    assert runs[0].positions == runs[1].positions and runs[0].scores == runs[1].scores


# -- graph + BFS (D.8.4) ----------------------------------------------------------------------------------

# In the plane, q0 at 0°: A 0°, B 10°, C −20°, D 30°, E 55°, F 90°. With 2 out-edges per node:
#   A → B (10°), C (20°); B → A (10°), D (20°); C → A, B; D → B (20°), E (25°); E → D, F (35°); F → E, D.
# BFS from the seed A: level 0 [A], level 1 [B, C], level 2 [D], level 3 [E], level 4 [F], level 5 nothing.
PLANE = np.stack([angle(a) for a in (0, 10, -20, 30, 55, 90)])  # A B C D E F = positions 0..5
Q_PLANE = angle(0)
GRAPH = dict(beam=1, fanout=1, expansion="graph_bfs", graph_k=2, graph_min_sim=None, min_sim=None)


def test_knn_neighbours_in_descending_similarity_without_self() -> None:
    assert [p for p, _ in knn_neighbours(0, PLANE, 2, None)] == [1, 2]
    assert [p for p, _ in knn_neighbours(3, PLANE, 2, None)] == [1, 4]
    assert [p for p, _ in knn_neighbours(4, PLANE, 2, 0.85)] == [3]  # E–F is 35°: cos 0.819 < 0.85


def test_graph_bfs_visits_levels_and_neighbours_in_order() -> None:
    result = recollect_faithful(Q_PLANE, PLANE, params(k=10, **GRAPH))
    assert result.positions == [0, 1, 2, 3, 4, 5]
    assert result.trace["items_per_round"] == [1, 2, 1, 1, 1, 0]
    assert result.trace["stop_reason"] == "empty_round"
    assert result.scores == pytest.approx([float(PLANE[i] @ Q_PLANE) for i in range(6)])


def test_graph_bfs_stops_at_k_after_a_level_and_at_r_levels() -> None:
    early = recollect_faithful(Q_PLANE, PLANE, params(k=2, **GRAPH))
    assert early.positions == [0, 1] and early.trace["stop_reason"] == "k_reached"
    assert early.trace["items_per_round"] == [1, 2]  # level 1 ran whole; the output is cut to K
    shallow = recollect_faithful(Q_PLANE, PLANE, params(k=10, rounds=3, **GRAPH))
    assert shallow.positions == [0, 1, 2, 3] and shallow.trace["stop_reason"] == "rounds_exhausted"


def test_graph_edge_threshold_cuts_the_traversal() -> None:
    """graph_min_sim 0.92 (≈ 23.1°) drops D–E (25°) and keeps A–C, B–D (20°): BFS ends after D."""
    result = recollect_faithful(Q_PLANE, PLANE, params(k=10, **{**GRAPH, "graph_min_sim": 0.92}))
    assert result.positions == [0, 1, 2, 3]
    assert result.trace["stop_reason"] == "empty_round"


def test_graph_seeds_are_the_round0_candidates_and_respect_the_floor() -> None:
    seeds = recollect_faithful(Q_PLANE, PLANE, params(k=10, rounds=1, **{**GRAPH, "beam": 3, "fanout": 1}))
    assert seeds.positions == [0, 1, 2]  # dense top-B·F in cosine order
    floored = recollect_faithful(Q_PLANE, PLANE, params(k=10, **{**GRAPH, "min_sim": 0.99}))
    assert floored.trace["candidates_per_round"][0] == 1 and floored.positions[0] == 0
    nothing = recollect_faithful(-Q_PLANE, PLANE[:4], params(k=10, **{**GRAPH, "min_sim": 0.0}))
    assert nothing.positions == [] and nothing.trace["stop_reason"] == "empty_round"


def test_graph_default_out_degree_is_the_fanout() -> None:
    """graph_k = None → F = 1: a chain A → B → A (visited): BFS ends after B."""
    result = recollect_faithful(Q_PLANE, PLANE, params(k=10, **{**GRAPH, "graph_k": None}))
    assert result.positions == [0, 1]


# -- full exploration (D.9) -------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", [{}, {"expansion": "graph_bfs", "graph_k": 3}, {"clustering": "dbscan"},
                                     {"mixing": "gated"}])
@pytest.mark.parametrize("seed", [0, 3])
def test_full_exploration_returns_the_k_best_by_cosine_among_everything_collected(variant, seed: int) -> None:
    """Everything collected = the output of the same search with K large enough never to stop early."""
    q0, pool = random_case(seed, 80, 8)
    base = dict(beam=3, fanout=2, rounds=6, mmr_lambda=0.9, after_empty_round="stop", **variant)
    collected = recollect_faithful(q0, pool, params(k=len(pool), **base)).positions
    for k in (5, 10):
        full = recollect_faithful(q0, pool, params(k=k, full_exploration=True, **base))
        assert full.positions == rerank(collected, q0, pool)[:k]
        assert full.scores == pytest.approx([float(pool[i] @ q0) for i in full.positions], abs=1e-6)
        assert full.trace["collected"] == len(collected) > k
        assert full.trace["stop_reason"] != "k_reached"
        early = recollect_faithful(q0, pool, params(k=k, **base))
        assert early.trace["stop_reason"] == "k_reached"


def test_full_exploration_runs_every_round_when_nothing_stops_it() -> None:
    q0, pool = random_case(1, 200, 8)
    result = recollect_faithful(q0, pool, params(k=5, fanout=2, rounds=4, full_exploration=True))
    assert result.trace["rounds"] == 4 and result.trace["stop_reason"] == "rounds_exhausted"
    cos = pool[result.positions] @ q0
    assert list(cos) == sorted(cos, reverse=True)


def test_full_exploration_ignores_final_rerank_none() -> None:
    q0, pool = random_case(2, 60, 8)
    a = recollect_faithful(q0, pool, params(k=6, fanout=2, full_exploration=True))
    b = recollect_faithful(q0, pool, params(k=6, fanout=2, full_exploration=True, final_rerank="dense"))
    assert a.positions == b.positions and a.scores == b.scores


# -- validation and the retrievers ------------------------------------------------------------------------

@pytest.mark.parametrize("bad, field", [
    (dict(clustering="hdbscan"), "clustering"), (dict(mixing="attention"), "mixing"),
    (dict(expansion="dfs"), "expansion"), (dict(clustering="dbscan", dbscan_eps=0.0), "dbscan_eps"),
    (dict(clustering="dbscan", dbscan_min_samples=0), "dbscan_min_samples"),
    (dict(clustering="dbscan", dbscan_noise="merge"), "dbscan_noise"),
    (dict(clustering="spectral", spectral_gamma=-1.0), "spectral_gamma"),
    (dict(expansion="graph_bfs", graph_k=0), "graph_k"),
    (dict(expansion="graph_bfs", clustering="dbscan"), "graph_bfs"),
    (dict(expansion="graph_bfs", mixing="gated"), "graph_bfs"),
])
def test_invalid_variant_settings_name_the_field(bad: dict, field: str) -> None:
    q0, pool = random_case(0, 10, 4)
    with pytest.raises(ValueError, match=field):
        recollect_faithful(q0, pool, params(**bad))
    with pytest.raises(ValueError, match=field):
        RecollectionRetriever(params(**bad))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_compiled_engine_refuses_the_d8_constructions_and_runs_full_exploration(name: str) -> None:
    """D.8 (clustering, mixing, expansion) is the faithful engine's only; D.9 full exploration runs in both."""
    d8 = any(key in ("clustering", "mixing", "expansion") for key in VARIANTS[name])
    for make in (lambda engine: RecollectionRetriever(params(**VARIANTS[name]), engine=engine),
                 lambda engine: RFMemRetriever(recollection=params(**VARIANTS[name]), engine=engine)):
        if d8:
            with pytest.raises(ValueError, match="needs engine='faithful'"):
                make("compiled")
        else:
            assert make("compiled").recollection.full_exploration is True
        described = make("faithful").describe()["recollection"]  # the faithful engine takes them all
        assert all(described[key] == value for key, value in VARIANTS[name].items())
