"""Statistical power and ties (memrepro/evaluation/power.py): the minimum detectable difference is the paired t
approximation, Holm's correction is Holm's, and a leaderboard column ties the systems it cannot separate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from memrepro.evaluation.power import holm, minimum_detectable_difference, power_of, standings


def test_mdd_is_the_paired_t_approximation() -> None:
    rng = np.random.default_rng(3)
    d = rng.normal(0.1, 0.4, size=200)
    power = power_of(d)
    expected = (stats.t.ppf(0.975, 199) + stats.t.ppf(0.8, 199)) * d.std(ddof=1) / math.sqrt(200)
    assert power.mdd == pytest.approx(expected, rel=1e-12) and power.n == 200
    # four times the queries: half the detectable difference (same spread)
    assert power_of(np.tile(d, 4)).mdd == pytest.approx(power.mdd / 2, rel=0.02)
    assert math.isinf(power_of(np.array([0.3])).mdd) and power_of(np.zeros(5)).mdd == 0.0


def test_mdd_pairs_by_unit_and_refuses_misaligned_inputs() -> None:
    a = {"s::q1": 1.0, "s::q2": 0.0, "s::q3": 0.5}
    b = {"s::q3": 0.5, "s::q1": 0.0, "s::q2": 0.0}
    assert minimum_detectable_difference(a, b).n == 3
    with pytest.raises(ValueError, match="misaligned"):
        minimum_detectable_difference(a, {"s::q1": 0.0})


def test_verdict_says_not_distinguishable_only_below_the_mdd() -> None:
    power = power_of(np.array([0.1, -0.1] * 50))
    assert power.verdict(power.mdd / 2) == "not distinguishable at n = 100"
    assert power.verdict(power.mdd * 2) == ""


def test_holm_step_down() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # monotone and capped at 1
    assert holm([]) == []


def test_standings_tie_what_the_table_cannot_separate() -> None:
    rng = np.random.default_rng(7)
    base = rng.random(400)
    units = [f"all::q{i}" for i in range(400)]
    noise = rng.normal(0, 0.05, 400)
    close = base + noise - noise.mean() - 0.001  # a hair below the best: tied
    worse = np.clip(base - 0.3, 0, 1)
    column = {"best": dict(zip(units, base)), "close": dict(zip(units, close)), "worse": dict(zip(units, worse))}
    table = standings({"metric": column}, resamples=2000)
    ranked = {s.system: s for s in table["metric"]}
    assert table["metric"][0].system == "best" and ranked["best"].text(2000) == "1 (best)"
    assert ranked["close"].tied and ranked["close"].text(2000).startswith("tied with the best (Δ")
    assert not ranked["worse"].tied and ranked["worse"].rank == 2 and ranked["worse"].text(2000).startswith("2 (Δ")
    assert ranked["worse"].p_holm >= ranked["worse"].p and "MDD" in ranked["worse"].text(2000)


def test_holm_runs_across_the_whole_table() -> None:
    """A difference significant on its own can be tied once the table's other tests share the error budget."""
    rng = np.random.default_rng(11)
    n = 300
    units = [f"all::q{i}" for i in range(n)]
    base = rng.random(n)
    nudged = base - 0.03 + rng.normal(0, 0.2, n)  # p around 0.01-0.05 alone
    one = standings({"c0": {"a": dict(zip(units, base)), "b": dict(zip(units, nudged))}}, resamples=4000)
    many = {f"c{i}": {"a": dict(zip(units, base)), "b": dict(zip(units, nudged))} for i in range(10)}
    table = standings(many, resamples=4000)
    alone = one["c0"][1]
    assert alone.p_holm == alone.p  # one test: Holm changes nothing
    assert table["c0"][1].p_holm == pytest.approx(min(1.0, 10 * alone.p))
