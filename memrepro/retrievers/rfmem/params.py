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
    kmeans_seed: int = 42  # also the seed of spectral clustering
    # -- Appendix D.8-D.9 alternatives (Tables 15-16). Not in the release: each construction is memrepro's own,
    # documented in recollection.py. The defaults are the released algorithm, unchanged.
    clustering: Literal["kmeans", "dbscan", "spectral"] = "kmeans"  # D.8.1 / D.8.2: replaces KMeans
    dbscan_eps: float = 0.5  # scikit-learn's default radius, Euclidean on unit vectors (≈ cosine ≥ 0.875)
    dbscan_min_samples: int = 2  # the smallest value that still leaves noise (scikit-learn's default is 5)
    dbscan_noise: Literal["singleton", "drop"] = "singleton"  # a noise point is its own cluster / joins none
    spectral_gamma: float = 1.0  # RBF affinity exp(-γ‖x−y‖²), scikit-learn's default
    mixing: Literal["alpha", "gated"] = "alpha"  # D.8.3: weight σ(⟨x_b, g⟩) in place of α
    expansion: Literal["cluster", "graph_bfs"] = "cluster"  # D.8.4: kNN graph + breadth-first search
    graph_k: int | None = None  # out-degree of the kNN graph; None = the fanout F
    graph_min_sim: float | None = 0.0  # keep a kNN edge only if its cosine >= this; None = keep all k
    full_exploration: bool = False  # D.9: no early stop at K; all R rounds, then a dense re-rank to q0, cut to K


@dataclass(frozen=True)
class FamiliarityParams:
    """The Familiarity path (§1): dense top-K with a floor."""

    k: int = 10
    min_sim: float | None = 0.0
