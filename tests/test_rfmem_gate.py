"""RF-Mem familiarity gate (spec retrievers.md §2): the spec's test vectors, every threshold boundary, the
entropy bound, empty and padded probes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrepro.retrievers.rfmem.gate import (
    FAISS_PAD_SCORE, FAMILIARITY, RECOLLECTION, decide, gate_from_top_scores, gate_many, kept_probe_scores, probe_stats,
    run_probe, top_scores_exact)
from memrepro.retrievers.rfmem.params import GateParams

PERSONAMEM = GateParams(probe_k=10, probe_floor=0.0, lam=20.0, eps=1e-12, theta_high=0.60, theta_low=0.30, tau=0.20)
LONGMEMEVAL = GateParams(probe_k=10, probe_floor=0.0, lam=20.0, eps=1e-12, theta_high=0.60, theta_low=0.00, tau=0.10)
PERSONABENCH = GateParams(probe_k=10, probe_floor=0.3, probe_floor_ignored=True, lam=30.0, eps=0.0,
                          theta_high=0.5, theta_low=0.2, tau=0.25)

F, R = FAMILIARITY, RECOLLECTION

# The spec's table (§2): scores, m, H (λ=20, ε=1e-12), H (λ=30, ε=0), PersonaMem / LongMemEval / PersonaBench gate.
SPEC_VECTORS = [
    ([0.50] * 10, 0.5000, 0.230259, 0.230259, R, R, F),
    ([0.55, 0.50, 0.45, 0.40, 0.40, 0.38, 0.35, 0.33, 0.32, 0.31], 0.3990, 0.127178, 0.076599, F, R, F),
    ([0.62, 0.40, 0.38, 0.37, 0.36, 0.35, 0.34, 0.33, 0.32, 0.31], 0.3780, 0.028200, 0.003331, F, F, F),
    ([0.45, 0.44, 0.44, 0.43, 0.43, 0.42, 0.42, 0.41, 0.41, 0.40], 0.4250, 0.225862, 0.220643, R, R, F),
]


@pytest.mark.parametrize("scores,mean,h20,h30,personamem,longmemeval,personabench", SPEC_VECTORS)
def test_spec_test_vectors(scores, mean, h20, h30, personamem, longmemeval, personabench) -> None:
    array = np.array(scores, dtype=np.float32)
    m, h, kept = probe_stats(array, PERSONAMEM)
    assert kept == 10 and round(float(m), 4) == mean and round(h, 6) == h20
    m30, h_30, _ = probe_stats(array, PERSONABENCH)
    assert round(float(m30), 4) == mean and round(h_30, 6) == h30
    assert gate_from_top_scores(array, 10, PERSONAMEM).path == personamem
    assert gate_from_top_scores(array, 10, LONGMEMEVAL).path == longmemeval
    assert gate_from_top_scores(array, 10, PERSONABENCH).path == personabench


def test_entropy_is_order_invariant_and_the_sum_form_is_k_times_the_mean_form() -> None:
    scores = np.array(SPEC_VECTORS[1][0], dtype=np.float32)
    _, h, _ = probe_stats(scores, PERSONAMEM)
    _, h_shuffled, _ = probe_stats(scores[[3, 9, 0, 5, 1, 8, 2, 7, 4, 6]], PERSONAMEM)
    assert h == h_shuffled
    _, h_sum, _ = probe_stats(scores, GateParams(**{**vars(PERSONAMEM), "entropy_form": "shannon_sum"}))
    assert h_sum == pytest.approx(10 * h, rel=1e-6)


def test_uniform_scores_reach_the_bound_ln_k_over_k() -> None:
    for k in (1, 5, 10):
        _, h, kept = probe_stats(np.full(k, 0.4, dtype=np.float32), PERSONABENCH)
        assert kept == k and h == pytest.approx(math.log(k) / k, abs=1e-6)


@given(st.lists(st.floats(-1.0, 1.0, width=32), min_size=1, max_size=12),
       st.sampled_from([PERSONAMEM, PERSONABENCH]))
@settings(max_examples=200, deadline=None)
def test_entropy_never_exceeds_ln_k_over_k(scores, params) -> None:
    _, h, kept = probe_stats(np.array(scores, dtype=np.float32), params)
    assert -1e-6 <= h <= math.log(kept) / kept + 1e-6


# -- decision boundaries (exact binary fractions, so float32 means are exact) ----------------------------

def _params(**overrides) -> GateParams:
    return GateParams(**{**vars(PERSONABENCH), **overrides})


def test_mean_equal_to_theta_high_goes_to_familiarity() -> None:
    path, rule = decide(np.float32(0.5), 0.99, 10, _params(theta_high=0.5, theta_low=0.25, tau=0.0))
    assert (path, rule) == (F, "mean_high")
    below = np.nextafter(np.float32(0.5), np.float32(0))
    assert decide(below, 0.99, 10, _params(theta_high=0.5, theta_low=0.25, tau=0.0))[0] == R


def test_mean_equal_to_theta_low_goes_to_recollection() -> None:
    params = _params(theta_high=0.5, theta_low=0.25, tau=1.0)  # τ=1 would otherwise say Familiarity
    assert decide(np.float32(0.25), 0.0, 10, params) == (R, "mean_low")
    above = np.nextafter(np.float32(0.25), np.float32(1))
    assert decide(above, 0.0, 10, params) == (F, "entropy_low")


def test_theta_high_is_checked_before_theta_low() -> None:
    assert decide(np.float32(0.3), 0.5, 10, _params(theta_high=0.3, theta_low=0.3)) == (F, "mean_high")


def test_entropy_equal_to_tau_goes_to_recollection_strictly_below_to_familiarity() -> None:
    scores = np.array(SPEC_VECTORS[3][0], dtype=np.float32)  # m = 0.425, inside (0.2, 0.5)
    _, h, _ = probe_stats(scores, PERSONABENCH)
    assert gate_from_top_scores(scores, 10, _params(tau=h)).rule == "entropy_high"
    assert gate_from_top_scores(scores, 10, _params(tau=float(np.nextafter(h, 1.0)))).rule == "entropy_low"


def test_decisions_at_each_threshold_through_the_whole_gate() -> None:
    params = _params(probe_k=4, theta_high=0.5, theta_low=0.25, tau=0.2)
    cases = [([0.5, 0.5, 0.5, 0.5], F, "mean_high"),
             ([0.25, 0.25, 0.25, 0.25], R, "mean_low"),
             ([0.75, 0.25, 0.25, 0.25], F, "entropy_low"),   # m = 0.375, one dominant score: low H
             ([0.375, 0.375, 0.375, 0.375], R, "entropy_high")]  # uniform: H = ln4/4 = 0.347 ≥ 0.2
    for scores, path, rule in cases:
        decision = gate_from_top_scores(np.array(scores, dtype=np.float32), 4, params)
        assert (decision.path, decision.rule) == (path, rule), scores
        assert decision.kept == 4 and decision.mean == pytest.approx(sum(scores) / 4)


def test_tau_above_the_entropy_bound_always_says_familiarity_in_the_band() -> None:
    rng = np.random.default_rng(0)
    for k in (5, 10):
        bound = math.log(k) / k
        params = _params(probe_k=k, theta_high=0.9, theta_low=-0.9, tau=bound + 1e-6)
        never = _params(probe_k=k, theta_high=0.9, theta_low=-0.9, tau=0.0)
        for _ in range(200):
            scores = np.sort(rng.uniform(-0.8, 0.8, size=k).astype(np.float32))[::-1]
            assert gate_from_top_scores(scores, k, params).path == F
            assert gate_from_top_scores(scores, k, never).path == R  # τ ≤ 0: rule 3 never fires


# -- probe: floor, padding, empty ------------------------------------------------------------------------

def test_floor_drops_scores_and_empty_probe_is_no_hits() -> None:
    params = GateParams(probe_k=5, probe_floor=0.3, theta_high=0.6, theta_low=0.3, tau=0.2)
    assert list(kept_probe_scores(np.array([0.5, 0.3, 0.29], np.float32), 3, params)) == pytest.approx([0.5, 0.3])
    decision = gate_from_top_scores(np.array([0.29, 0.1], np.float32), 2, params)
    assert (decision.path, decision.rule, decision.kept, decision.mean, decision.entropy) == (
        R, "no_hits", 0, None, None)
    empty = gate_from_top_scores(np.zeros(0, np.float32), 0, params)
    assert (empty.path, empty.rule, empty.kept) == (R, "no_hits", 0)
    assert probe_stats(np.zeros(0, np.float32), params) == (None, None, 0)


def test_ignored_floor_keeps_low_scores() -> None:
    scores = np.array([0.4, 0.1, -0.2], np.float32)
    assert len(kept_probe_scores(scores, 3, _params(probe_k=3))) == 3


def test_ignored_floor_on_a_small_pool_includes_faiss_padding() -> None:
    """PersonaBench: a pool smaller than probe_k contributes FAISS's −3.4e38 padding to the mean."""
    params = _params(probe_k=5, theta_low=0.0)
    kept = kept_probe_scores(np.array([0.9, 0.8], np.float32), 2, params)
    assert len(kept) == 5 and kept[-1] == FAISS_PAD_SCORE
    decision = gate_from_top_scores(np.array([0.9, 0.8], np.float32), 2, params)
    assert (decision.path, decision.rule, decision.kept) == (R, "mean_low", 5)
    assert decision.entropy is None  # 0·ln 0 = NaN in the code; never recorded as NaN
    assert decision.mean is None or decision.mean < -1e30


def test_run_probe_on_a_pool() -> None:
    pool = np.array([[1, 0], [0.6, 0.8], [0, 1], [-1, 0]], dtype=np.float32)
    positions, scores = top_scores_exact(np.array([1, 0], np.float32), pool, 3)
    assert list(positions) == [0, 1, 2] and list(scores) == pytest.approx([1.0, 0.6, 0.0])
    decision = run_probe(np.array([1, 0], np.float32), pool, _params(probe_k=3, theta_high=0.5))
    assert decision.path == F and decision.mean == pytest.approx(1.6 / 3, abs=1e-6)
    assert run_probe(np.array([1, 0], np.float32), np.zeros((0, 2), np.float32),
                     GateParams(probe_k=3)).rule == "no_hits"


def test_trace_has_the_recorded_fields() -> None:
    trace = gate_from_top_scores(np.array(SPEC_VECTORS[1][0], np.float32), 10, PERSONAMEM).trace()
    assert set(trace) == {"path", "rule", "probe_mean", "probe_entropy", "probe_kept"}
    assert trace["path"] == F and trace["probe_kept"] == 10


@pytest.mark.parametrize("params", [
    GateParams(),
    GateParams(probe_k=5, probe_floor=0.3, probe_floor_ignored=True, lam=30.0, eps=0.0, theta_high=0.5,
               theta_low=0.0, tau=0.3),  # PersonaBench: padding scores, ε = 0 (NaN entropies)
    GateParams(probe_floor=None, entropy_form="shannon_sum"),
    GateParams(probe_k=10, probe_floor=0.2),
], ids=["defaults", "personabench", "shannon_no_floor", "floor_0.2"])
def test_gate_many_is_the_per_query_gate_bit_for_bit(params: GateParams) -> None:
    """The compiled engine gates every query in one go; every field must equal the per-query function's."""
    rng = np.random.default_rng(0)
    tops, sizes = [], []
    for _ in range(2000):
        n = int(rng.integers(0, 15))
        scores = np.sort(rng.uniform(-0.2, 0.9, min(n, params.probe_k)).astype(np.float32))[::-1].copy()
        if rng.random() < 0.1 and len(scores) > 1:
            scores[1] = scores[0]  # exact ties
        tops.append(scores)
        sizes.append(n)
    many = gate_many(tops, sizes, params)
    assert len(many) == len(tops)
    if not params.probe_floor_ignored:  # (ignored: every probe is padded to probe_k, one group)
        assert {d.kept for d in many} >= {0, 1, params.probe_k}  # several K′ groups, the empty one included
    for scores, n, decision in zip(tops, sizes, many):
        assert decision == gate_from_top_scores(scores, n, params)
    with pytest.raises(ValueError, match="pool sizes"):
        gate_many(tops, sizes[:-1], params)
