"""How small a difference a paired comparison can detect, and which systems a table cannot tell apart
(docs/checks.md#power-and-ties).

**Minimum detectable difference (MDD).** For two runs paired over the same query units, the smallest true mean
difference a two-sided paired test at level α detects with probability ``power``: the paired t approximation,
``(t[1-α/2, n-1] + t[power, n-1]) · sd(d) / √n`` over the per-unit differences ``d`` (quantiles from
``scipy.stats.t``). Two runs whose observed difference is below it are "not distinguishable at n = …": no claim that
one is better can rest on that benchmark.

**Ties.** A leaderboard column tests each system against the column's best with the paired bootstrap of
:mod:`memrepro.evaluation.significance`; the p-values of the whole table are Holm-corrected together
(:func:`holm`), and a system whose corrected p is not below α is *tied* with the best, not ranked below it.
Systems below the best group are ranked by mean; their differences from each other are not tested.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

from memrepro.evaluation.significance import SIGNIFICANCE_LEVEL, aligned_differences, paired_bootstrap

POWER = 0.8


@dataclass(frozen=True)
class Power:
    """The MDD of one paired comparison: its size, the units, the spread of their differences and the levels."""

    mdd: float
    n: int
    sd: float
    alpha: float = SIGNIFICANCE_LEVEL
    power: float = POWER

    def detects(self, delta: float) -> bool:
        """Whether an observed difference ``delta`` is at least the MDD (no difference never is)."""
        return delta != 0 and abs(delta) >= self.mdd

    def text(self) -> str:
        return f"MDD {self.mdd:.4f} (n = {self.n:,})" if math.isfinite(self.mdd) else f"MDD undefined (n = {self.n})"

    def verdict(self, delta: float) -> str:
        """``""`` when ``delta`` reaches the MDD, else ``not distinguishable at n = …``."""
        return "" if self.detects(delta) else f"not distinguishable at n = {self.n:,}"


def minimum_detectable_difference(a: Mapping[str, float], b: Mapping[str, float], alpha: float = SIGNIFICANCE_LEVEL,
                                  power: float = POWER) -> Power:
    """The MDD of comparing ``a`` with ``b``, paired over the same unit ids (misaligned inputs are refused)."""
    return power_of(aligned_differences(a, b), alpha, power)


def power_of(differences: np.ndarray, alpha: float = SIGNIFICANCE_LEVEL, power: float = POWER) -> Power:
    """The MDD from paired per-unit differences (infinite with fewer than two units)."""
    d = np.asarray(differences, dtype=np.float64)
    n = len(d)
    if n < 2:
        return Power(math.inf, n, math.nan, alpha, power)
    sd = float(d.std(ddof=1))
    quantiles = stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)
    return Power(float(quantiles * sd / math.sqrt(n)), n, sd, alpha, power)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (family-wise error), in their order: the i-th smallest is
    multiplied by (m − i), made monotone, capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Standing:
    """One system in one column: its mean over the column's units, its difference from the best (None for the
    best), the raw and Holm-corrected p of that difference, the MDD of that comparison, and whether it is tied."""

    system: str
    mean: float
    delta: float | None = None
    p: float | None = None
    p_holm: float | None = None
    power: Power | None = None
    tied: bool = False
    rank: int = 1

    def text(self, resamples: int) -> str:
        """The rank cell: ``1 (best)``, ``tied with the best (…)``, ``2 (…)``."""
        if self.delta is None:
            return "1 (best)"
        p = f"p<{1 / resamples:.4f}" if self.p_holm == 0 else f"p = {self.p_holm:.4f}"
        detail = f"Δ {self.delta:+.4f}, Holm {p}; {self.power.text()}"
        return f"tied with the best ({detail})" if self.tied else f"{self.rank} ({detail})"


def standings(columns: Mapping[str, Mapping[str, Mapping[str, float]]], resamples: int = 10_000, seed: int = 13,
              alpha: float = SIGNIFICANCE_LEVEL) -> dict[str, list[Standing]]:
    """``{column: standings, best first}`` from ``{column: {system: {unit: value}}}`` (every system of a column
    over the same units). Each system is tested against its column's best (paired bootstrap); the p-values of
    every column are Holm-corrected together."""
    raw: dict[str, list[Standing]] = {}
    for column, systems in columns.items():
        means = {name: float(np.mean(list(values.values()))) for name, values in systems.items() if values}
        if not means:
            continue
        order = sorted(means, key=lambda name: (-means[name], name))
        best = order[0]
        rows = [Standing(best, means[best])]
        for name in order[1:]:
            test = paired_bootstrap(systems[name], systems[best], resamples=resamples, seed=seed)
            rows.append(Standing(name, means[name], test.delta, test.p_value,
                                 power=minimum_detectable_difference(systems[name], systems[best])))
        raw[column] = rows
    tested = [(column, i) for column, rows in raw.items() for i in range(1, len(rows))]
    adjusted = holm([raw[column][i].p for column, i in tested])
    out: dict[str, list[Standing]] = {}
    for column, rows in raw.items():
        fixed, rank = [rows[0]], 1
        for i, standing in enumerate(rows[1:], start=1):
            p_holm = adjusted[tested.index((column, i))]
            tied = p_holm >= alpha
            if not tied:
                rank += 1
            fixed.append(Standing(standing.system, standing.mean, standing.delta, standing.p, p_holm, standing.power,
                                  tied, 1 if tied else rank))
        out[column] = fixed
    return out
