"""Paired bootstrap: alignment, determinism, sanity against known shifts."""

from __future__ import annotations

import numpy as np
import pytest

from memrepro.evaluation.significance import aligned_differences, paired_bootstrap


def test_misaligned_units_are_refused() -> None:
    with pytest.raises(ValueError, match="misaligned"):
        aligned_differences({"a": 1.0, "b": 0.0}, {"a": 1.0, "c": 0.0})


def test_bootstrap_is_seeded_and_detects_a_shift() -> None:
    rng = np.random.default_rng(0)
    base = {f"q{i}": float(rng.random()) for i in range(400)}
    better = {k: v + 0.1 + 0.05 * float(rng.standard_normal()) for k, v in base.items()}
    first = paired_bootstrap(better, base, resamples=2000, seed=17)
    assert first == paired_bootstrap(better, base, resamples=2000, seed=17)
    assert first.delta == pytest.approx(np.mean([better[k] - base[k] for k in base]))
    assert first.ci_low < first.delta < first.ci_high and first.ci_low > 0.09
    assert first.p_value == 0.0


def test_no_difference_gives_p_one() -> None:
    same = {f"q{i}": float(i % 3) for i in range(50)}
    result = paired_bootstrap(same, same, resamples=500)
    assert (result.delta, result.p_value) == (0.0, 1.0)
    noisy = {k: v + (0.01 if i % 2 else -0.01) for i, (k, v) in enumerate(same.items())}
    assert paired_bootstrap(noisy, same, resamples=2000).p_value > 0.5


def test_p_text_and_significance_mark() -> None:
    from memrepro.evaluation.significance import PairedResult

    never_crossed = PairedResult(0.1, 0.05, 0.15, 0.0, 30, 10_000, 13)
    assert never_crossed.p_text() == "p<0.0001" and never_crossed.significant
    borderline = PairedResult(0.1, -0.01, 0.2, 0.05, 30, 500, 13)
    assert borderline.p_text() == "p=0.0500" and not borderline.significant  # strictly below 0.05
