"""RF-Mem's familiarity gate (docs/retrievers.md#rf-mem-gate): probe, mean, entropy, ordered rule.

The arithmetic follows the official code operation by operation, in float32, because the published routing
counts depend on it: the mean is NumPy's float32 mean, the softmax exponentials are float32, the entropy is
the *mean* of ``-p·ln(p+ε)`` over the K′ kept scores (nats, not normalised by ln K′), the mean is compared with
θ_high / θ_low in float32 (NumPy 2 casts the Python threshold to the array's dtype) and the entropy, which the
code turns into a Python float, is compared with τ in float64. The rule order is θ_high, then θ_low, then τ,
with ``H == τ`` going to Recollection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from memrepro.retrievers.rfmem.params import GateParams

FAMILIARITY = "familiarity"
RECOLLECTION = "recollection"
GatePath = Literal["familiarity", "recollection"]

# What faiss.IndexFlatIP returns for the slots of a top-k search beyond the pool size (score; the id is -1).
FAISS_PAD_SCORE = np.float32(-3.4028235e38)

# Rule names recorded per query (RF-Mem's own strings are less specific: it calls both low-mean and
# high-entropy Recollection "slow_high_entropy").
RULE_NO_HITS = "no_hits"
RULE_MEAN_HIGH = "mean_high"
RULE_MEAN_LOW = "mean_low"
RULE_ENTROPY_LOW = "entropy_low"
RULE_ENTROPY_HIGH = "entropy_high"


@dataclass(frozen=True)
class GateDecision:
    """One query's gate outcome and the diagnostics recorded per query (docs/retrievers.md#rf-mem-gate)."""

    path: GatePath
    rule: str
    mean: float | None  # None when no probe score was kept
    entropy: float | None  # None when no score was kept, or not finite (FAISS padding with ε = 0)
    kept: int  # K′

    def trace(self) -> dict:
        return {"path": self.path, "rule": self.rule, "probe_mean": self.mean, "probe_entropy": self.entropy,
                "probe_kept": self.kept}


def kept_probe_scores(top_scores: np.ndarray, pool_size: int, params: GateParams) -> np.ndarray:
    """The scores the gate uses, from the probe's top-``probe_k`` real scores (descending, at most pool_size).

    With ``probe_floor_ignored`` (PersonaBench) every one of the ``probe_k`` FAISS slots counts, so a pool smaller
    than ``probe_k`` contributes FAISS's padding score; a floor always removes padding, so it is only materialised
    when the floor is ignored. ``probe_floor=None`` keeps every real score.
    """
    scores = np.asarray(top_scores, dtype=np.float32)[: params.probe_k]
    if params.probe_floor_ignored:
        missing = params.probe_k - len(scores)
        if missing > 0 and pool_size < params.probe_k:
            scores = np.concatenate([scores, np.full(missing, FAISS_PAD_SCORE, dtype=np.float32)])
        return scores
    if params.probe_floor is None:
        return scores
    # The code compares Python floats (float64 of the float32 FAISS score) with the floor.
    return scores[scores.astype(np.float64) >= float(params.probe_floor)]


def probe_stats(scores: np.ndarray, params: GateParams) -> tuple[np.float32 | None, float | None, int]:
    """``(mean, entropy, K′)`` of the already-kept probe scores, as the official code computes them.

    ``entropy_form="code_mean"`` is the code's ``-(1/K′) Σ p ln(p+ε)``; ``"shannon_sum"`` is the textbook
    ``-Σ p ln(p+ε)`` the paper's text implies. The mean is NumPy's float32 mean (returned as ``np.float32`` so
    the threshold comparison happens in float32, as in the code). Both are ``None`` when K′ = 0; the entropy
    is NaN when FAISS padding drives an exponential to zero with ε = 0 (0·ln 0), exactly as in the code.
    """
    kept = np.asarray(scores, dtype=np.float32)
    if kept.size == 0:
        return None, None, 0
    means, entropies = _probe_stats_rows(kept[None, :], params)
    return np.float32(means[0]), float(entropies[0]), int(kept.size)


def _probe_stats_rows(matrix: np.ndarray, params: GateParams) -> tuple[np.ndarray, np.ndarray]:
    """Mean and entropy of each row of ``matrix`` ``(g, K′)``, K′ ≥ 1, in the code's float32 operations.

    Row-wise on a C-contiguous matrix, NumPy reduces each row exactly as it reduces the 1-D array, so one row is
    bit for bit the per-query computation (``tests/test_rfmem_gate.py`` checks ``gate_many`` against it).
    """
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        means = np.mean(matrix, axis=1)  # float32 accumulation, like the code's np.mean on a float32 array
        ordered = np.sort(matrix, axis=1)[:, ::-1]
        x = np.float32(params.lam) * ordered
        z = x - x.max(axis=1, keepdims=True)
        p = np.exp(z).astype(np.float32)
        p = p / (p.sum(axis=1, keepdims=True) + np.float32(params.eps))
        terms = p * np.log(p + np.float32(params.eps))
        if params.entropy_form == "code_mean":
            entropies = -terms.mean(axis=1)
        elif params.entropy_form == "shannon_sum":
            entropies = -terms.sum(axis=1)
        else:
            raise ValueError(f"entropy_form must be 'code_mean' or 'shannon_sum', got {params.entropy_form!r}")
    return means, entropies


def decide(mean: np.floating | float | None, entropy: float | None, kept: int,
           params: GateParams) -> tuple[GatePath, str]:
    """The ordered rule: K′ = 0 → R; m ≥ θ_high → F; m ≤ θ_low → R; H < τ → F; else R.

    The mean is compared in float32 and the entropy in float64, as in the code. A NaN entropy (padding with
    ε = 0) fails ``H < τ`` and so goes to Recollection, as it does there.
    """
    if kept == 0 or mean is None:
        return RECOLLECTION, RULE_NO_HITS
    mean32 = np.float32(mean)
    if mean32 >= np.float32(params.theta_high):
        return FAMILIARITY, RULE_MEAN_HIGH
    if mean32 <= np.float32(params.theta_low):
        return RECOLLECTION, RULE_MEAN_LOW
    if entropy is not None and float(entropy) < float(params.tau):
        return FAMILIARITY, RULE_ENTROPY_LOW
    return RECOLLECTION, RULE_ENTROPY_HIGH


def gate_from_top_scores(top_scores: np.ndarray, pool_size: int, params: GateParams) -> GateDecision:
    """Gate decision from one query's probe result (its top-``probe_k`` real scores, descending)."""
    kept = kept_probe_scores(top_scores, pool_size, params)
    return _decision(*probe_stats(kept, params), params)


def _decision(mean: np.floating | None, entropy: float | None, kept: int, params: GateParams) -> GateDecision:
    """The rule applied to one query's statistics; non-finite statistics are recorded as None."""
    path, rule = decide(mean, entropy, kept, params)
    finite_entropy = entropy if entropy is not None and np.isfinite(entropy) else None
    finite_mean = float(mean) if mean is not None and np.isfinite(mean) else None
    return GateDecision(path, rule, finite_mean, finite_entropy, kept)


def gate_many(top_scores: Sequence[np.ndarray], pool_sizes: Sequence[int], params: GateParams) -> list[GateDecision]:
    """``gate_from_top_scores`` for many queries at once, bit for bit.

    Queries are grouped by K′ and each group's kept scores stacked into a matrix whose rows go through the same
    float32 operations as ``probe_stats`` (NumPy reduces each row of a C-contiguous matrix exactly as it reduces
    the 1-D array; ``tests/test_rfmem_gate.py`` checks every field against the per-query function). Saves the
    ~30 µs of per-query NumPy call overhead that would dominate the compiled engine's gate.
    """
    if len(top_scores) != len(pool_sizes):
        raise ValueError(f"{len(top_scores)} probe results for {len(pool_sizes)} pool sizes")
    kept = [kept_probe_scores(s, n, params) for s, n in zip(top_scores, pool_sizes)]
    decisions: list[GateDecision | None] = [None] * len(kept)
    by_count: dict[int, list[int]] = {}
    for i, scores in enumerate(kept):
        by_count.setdefault(len(scores), []).append(i)
    for count, members in by_count.items():
        if count == 0:
            for i in members:
                decisions[i] = _decision(None, None, 0, params)
            continue
        means, entropies = _probe_stats_rows(np.stack([kept[i] for i in members]).astype(np.float32, copy=False),
                                             params)
        for i, mean, entropy in zip(members, means, entropies.tolist()):
            decisions[i] = _decision(mean, entropy, count, params)
    return decisions  # type: ignore[return-value]


def top_scores_exact(query: np.ndarray, pool: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` inner products in float32, ordered by the project tie rule (score desc, position asc).

    Returns ``(positions, scores)`` with at most ``min(k, len(pool))`` entries; never padding.
    """
    pool32 = np.asarray(pool, dtype=np.float32)
    if pool32.shape[0] == 0 or k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    scores = pool32 @ np.asarray(query, dtype=np.float32)
    order = np.argsort(-scores, kind="stable")[:k]
    return order.astype(np.int64), scores[order].astype(np.float32)


def run_probe(query: np.ndarray, pool: np.ndarray, params: GateParams) -> GateDecision:
    """The whole gate for one query against its pool matrix ``(n, d)`` of unit rows."""
    _, scores = top_scores_exact(query, pool, params.probe_k)
    return gate_from_top_scores(scores, int(np.asarray(pool).shape[0]), params)
