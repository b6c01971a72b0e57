"""Paired significance over the same query units (docs/protocols.md#paired-significance).

Units are aligned by id (``"{split}::{query_id}"``) and misaligned inputs are refused. The paired bootstrap is
ConvMemory's: resample units with replacement, CI = 2.5 / 97.5 percentiles of the resampled mean differences,
two-sided p = 2·min(P(boot ≤ 0), P(boot ≥ 0)) capped at 1, delta = the pooled mean of the differences. The
resampling itself is scipy's (``scipy.stats.bootstrap``), seeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
from scipy import stats


SIGNIFICANCE_LEVEL = 0.05  # tables mark a difference whose two-sided p is below it


@dataclass(frozen=True)
class PairedResult:
    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    resamples: int
    seed: int

    @property
    def significant(self) -> bool:
        return self.p_value < SIGNIFICANCE_LEVEL

    def p_text(self) -> str:
        """``p=0.0123``, or ``p<0.0001`` when no resample crossed zero (the bootstrap's resolution is 1/resamples)."""
        return f"p<{1 / self.resamples:.4f}" if self.p_value == 0 else f"p={self.p_value:.4f}"


def aligned_differences(a: Mapping[str, float], b: Mapping[str, float]) -> np.ndarray:
    """``a - b`` per unit; both must hold exactly the same unit ids."""
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b))[:3], sorted(set(b) - set(a))[:3]
        raise ValueError(f"paired test on misaligned units: {len(set(a) ^ set(b))} differ "
                         f"(only in first: {only_a}, only in second: {only_b})")
    keys = sorted(a)
    return np.array([a[k] - b[k] for k in keys], dtype=np.float64)


def paired_bootstrap(a: Mapping[str, float], b: Mapping[str, float], resamples: int = 10_000,
                     seed: int = 13) -> PairedResult:
    d = aligned_differences(a, b)
    if len(d) == 0:
        raise ValueError("paired test on zero units")
    if np.all(d == d[0]):  # no variance: every resample equals the mean
        p = 1.0 if d[0] == 0 else 0.0
        return PairedResult(float(d[0]), float(d[0]), float(d[0]), p, len(d), resamples, seed)
    result = stats.bootstrap((d,), np.mean, n_resamples=resamples, confidence_level=0.95, method="percentile",
                             rng=np.random.default_rng(seed))
    boot = result.bootstrap_distribution
    p = min(1.0, 2.0 * min(float(np.mean(boot <= 0)), float(np.mean(boot >= 0))))
    return PairedResult(float(d.mean()), float(result.confidence_interval.low),
                        float(result.confidence_interval.high), p, len(d), resamples, seed)
