"""Parameters of the RF-Mem family, one frozen dataclass per component (``../shared/specs/retrievers.md`` §2-5).

Field names follow the spec; every switch the spec names is here so a faithful and a clean run differ only in
configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class GateParams:
    """The familiarity gate (§2): probe top-``probe_k``, mean and entropy, ordered threshold rule."""

    probe_k: int = 10
    probe_floor: float | None = 0.0  # keep probe scores >= floor; None = keep all
    probe_floor_ignored: bool = False  # PersonaBench: all probe_k scores used, padding included
    lam: float = 20.0  # softmax temperature λ
    eps: float = 1e-12  # ε in the softmax denominator and the log (PersonaBench: 0)
    theta_high: float = 0.60
    theta_low: float = 0.30
    tau: float = 0.20
    entropy_form: Literal["code_mean", "shannon_sum"] = "code_mean"


@dataclass(frozen=True)
class RecollectionParams:
    """Recollection (§3, ``retrieve_pyramid_v2`` with "mean_group" expansion)."""

    k: int = 10  # items to return (out_k)
    beam: int = 3  # B
    fanout: int = 2  # F
    alpha: float = 0.8  # weight of the branch query in the child query
    rounds: int = 10  # R (depth)
    mmr_lambda: float = 0.95
    min_sim: float | None = 0.0  # candidate floor (the code's "tau", unrelated to the gate's τ)
    after_empty_round: Literal["continue", "stop"] = "continue"  # PersonaBench: stop
    dead_branch_policy: Literal["keep", "drop"] = "keep"  # empty KMeans cluster → NaN centroid
    final_rerank: Literal["none", "dense"] = "none"  # D.9 "full exploration" re-ranks by cosine to q0
    kmeans_seed: int = 42


@dataclass(frozen=True)
class FamiliarityParams:
    """The Familiarity path (§1): dense top-K with a floor."""

    k: int = 10
    min_sim: float | None = 0.0
