"""Parameters of the RF-Mem family, one dataclass per component (docs/retrievers.md#rf-mem-gate,
docs/retrievers.md#recollection, docs/retrievers.md#rf-mem-hyper-parameters).

These dataclasses are *the* schema: the engines take them whole, and ``memrepro/config.py`` nests them into the
Hydra retriever configs (``retriever.recollection.alpha=0.3``, ``retriever.gate.tau=0.3``), so a default is written
once, here. The defaults are the PersonaMem column of docs/retrievers.md#rf-mem-hyper-parameters (the official
run.sh and call-site values), which is what ``retriever=recollection`` / ``retriever=rfmem`` run; the per-benchmark
presets in ``conf/retriever/`` state only what differs. Field names follow docs/retrievers.md; every switch it names
is here so a faithful and a clean run differ only in configuration. Not frozen: OmegaConf makes a frozen dataclass a
read-only node, which no override could change.

Choice-valued fields are ``str`` (OmegaConf has no ``Literal``); the allowed values are checked by
``validate_recollection`` / ``validate_gate`` and, with the config key named, by ``memrepro.validate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, TypeVar


@dataclass
class GateParams:
    """The familiarity gate (docs/retrievers.md#rf-mem-gate): probe top-``probe_k``, mean and entropy, ordered
    threshold rule."""

    probe_k: int = 10
    probe_floor: Optional[float] = 0.0  # keep probe scores >= floor; None = keep all
    probe_floor_ignored: bool = False  # PersonaBench: all probe_k scores used, padding included
    lam: float = 20.0  # softmax temperature λ
    eps: float = 1e-12  # ε in the softmax denominator and the log (PersonaBench: 0)
    theta_high: float = 0.60
    theta_low: float = 0.30
    tau: float = 0.20
    entropy_form: str = "code_mean"  # code_mean (the code's −(1/K′)Σp ln p) | shannon_sum


@dataclass
class RecollectionParams:
    """Recollection (docs/retrievers.md#recollection: ``retrieve_pyramid_v2`` with "mean_group" expansion)."""

    k: int = 10  # items to return (out_k)
    beam: int = 3  # B
    fanout: int = 2  # F
    alpha: float = 0.8  # weight of the branch query in the child query
    rounds: int = 10  # R (depth)
    mmr_lambda: float = 0.95
    min_sim: Optional[float] = 0.3  # candidate floor (the code's "tau", unrelated to the gate's τ); None = none
    after_empty_round: str = "continue"  # continue | stop (PersonaBench)
    dead_branch_policy: str = "keep"  # keep | drop: an empty KMeans cluster → NaN centroid
    final_rerank: str = "none"  # none | dense: re-rank everything emitted by cosine to q0
    kmeans_seed: int = 42  # also the seed of spectral clustering
    # -- Appendix D.8-D.9 alternatives (Tables 15-16). Not in the release: each construction is memrepro's own,
    # documented in recollection.py. The defaults are the released algorithm, unchanged.
    clustering: str = "kmeans"  # kmeans | dbscan (D.8.1) | spectral (D.8.2): replaces KMeans
    dbscan_eps: float = 0.5  # scikit-learn's default radius, Euclidean on unit vectors (≈ cosine ≥ 0.875)
    dbscan_min_samples: int = 2  # the smallest value that still leaves noise (scikit-learn's default is 5)
    dbscan_noise: str = "singleton"  # singleton | drop: a noise point is its own cluster / joins none
    spectral_gamma: float = 1.0  # RBF affinity exp(-γ‖x−y‖²), scikit-learn's default
    mixing: str = "alpha"  # alpha | gated (D.8.3: weight σ(⟨x_b, g⟩) in place of α)
    expansion: str = "cluster"  # cluster | graph_bfs (D.8.4: kNN graph + breadth-first search)
    graph_k: Optional[int] = None  # out-degree of the kNN graph; None = the fanout F
    graph_min_sim: Optional[float] = 0.0  # keep a kNN edge only if its cosine >= this; None = keep all k
    full_exploration: bool = False  # D.9: no early stop at K; all R rounds, then a dense re-rank to q0, cut to K


@dataclass
class FamiliarityParams:
    """The Familiarity path (docs/retrievers.md#familiarity): dense top-K with a floor."""

    k: Optional[int] = None  # None: the Recollection K
    min_sim: Optional[float] = 0.3


# The allowed values of every choice-valued field above, of the retrievers' engine and of their latency scope:
# checked here at construction and, naming the config key, by memrepro.validate (which must not load torch).
CHOICES: Mapping[str, tuple[str, ...]] = {
    "entropy_form": ("code_mean", "shannon_sum"),
    "after_empty_round": ("continue", "stop"),
    "dead_branch_policy": ("keep", "drop"),
    "final_rerank": ("none", "dense"),
    "clustering": ("kmeans", "dbscan", "spectral"),
    "dbscan_noise": ("singleton", "drop"),
    "mixing": ("alpha", "gated"),
    "expansion": ("cluster", "graph_bfs"),
}
ENGINES = ("faithful", "compiled")  # per-query reference | numba
LATENCY_SCOPES = ("path_only", "gate_plus_path")

# The D.8 constructions exist in the faithful engine only; the compiled engine runs the released algorithm,
# D.9 full exploration and the dense re-rank.
FAITHFUL_ONLY_DEFAULTS: Mapping[str, Any] = {"clustering": "kmeans", "mixing": "alpha", "expansion": "cluster"}
# Every switch away from the released algorithm, at its released value (tables pin the ones a row does not set).
VARIANT_DEFAULTS: Mapping[str, Any] = {**FAITHFUL_ONLY_DEFAULTS, "full_exploration": False, "final_rerank": "none"}

P = TypeVar("P", GateParams, RecollectionParams, FamiliarityParams)


def as_params(kind: type[P], value: P | Mapping[str, Any] | None) -> P:
    """``value`` as a ``kind``: itself, the defaults for None, or built from a mapping (a Hydra config node)."""
    if value is None:
        return kind()
    if isinstance(value, kind):
        return value
    if isinstance(value, Mapping):
        return kind(**{str(name): value[name] for name in value})
    raise TypeError(f"expected {kind.__name__} or a mapping of its fields, got {type(value).__name__}")


def refuse_faithful_only_variants(params: RecollectionParams, engine: str) -> None:
    """Raise, naming each switch, if ``params`` asks ``engine`` for a D.8 construction only the faithful engine has."""
    unsupported = [f"{name}={getattr(params, name)!r}" for name, default in FAITHFUL_ONLY_DEFAULTS.items()
                   if getattr(params, name) != default]
    if unsupported:
        raise ValueError(f"the {engine} engine runs the released algorithm only; {', '.join(unsupported)} needs "
                         "engine='faithful'")


def check_choice(name: str, value: Any, allowed: tuple[str, ...] | None = None) -> None:
    """Raise unless ``value`` is one of ``allowed`` (default: ``CHOICES[name]``)."""
    allowed = CHOICES[name] if allowed is None else allowed
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def validate_recollection(params: RecollectionParams) -> None:
    """Reject settings the algorithm has no meaning for, with the offending field named."""
    if params.k < 1:
        raise ValueError(f"recollection k must be >= 1, got {params.k}")
    if params.beam < 1 or params.fanout < 1:
        raise ValueError(f"recollection beam and fanout must be >= 1, got B={params.beam}, F={params.fanout}")
    if params.rounds < 1:
        raise ValueError(f"recollection rounds must be >= 1, got {params.rounds}")
    check_choice("after_empty_round", params.after_empty_round)
    check_choice("dead_branch_policy", params.dead_branch_policy)
    check_choice("final_rerank", params.final_rerank)
    check_choice("clustering", params.clustering)
    check_choice("mixing", params.mixing)
    check_choice("expansion", params.expansion)
    if not isinstance(params.full_exploration, bool):
        raise ValueError(f"full_exploration must be a bool, got {params.full_exploration!r}")
    if params.clustering == "dbscan":
        if not params.dbscan_eps > 0:
            raise ValueError(f"dbscan_eps must be > 0, got {params.dbscan_eps}")
        if params.dbscan_min_samples < 1:
            raise ValueError(f"dbscan_min_samples must be >= 1, got {params.dbscan_min_samples}")
        check_choice("dbscan_noise", params.dbscan_noise)
    if params.clustering == "spectral" and not params.spectral_gamma > 0:
        raise ValueError(f"spectral_gamma must be > 0, got {params.spectral_gamma}")
    if params.expansion == "graph_bfs":
        if params.graph_k is not None and params.graph_k < 1:
            raise ValueError(f"graph_k must be >= 1 or None, got {params.graph_k}")
        if params.clustering != "kmeans" or params.mixing != "alpha":
            raise ValueError("expansion='graph_bfs' replaces clustering and mixing: leave clustering='kmeans' and "
                             f"mixing='alpha', got clustering={params.clustering!r}, mixing={params.mixing!r}")


def validate_gate(params: GateParams) -> None:
    if params.probe_k < 1:
        raise ValueError(f"probe_k must be >= 1, got {params.probe_k}")
    check_choice("entropy_form", params.entropy_form)


def validate_familiarity(params: FamiliarityParams) -> None:
    if params.k is not None and params.k < 1:
        raise ValueError(f"familiarity k must be >= 1, got {params.k}")


# Retriever configs recorded before the parameters were nested held every field flat;
# ``familiarity_k`` / ``familiarity_min_sim`` were the Familiarity block's ``k`` / ``min_sim``.
_FLAT_FAMILIARITY = {"familiarity_k": "k", "familiarity_min_sim": "min_sim"}


def nest_flat_config(retriever: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded RF-Mem retriever config in the nested form (``recollection`` / ``gate`` / ``familiarity``
    blocks): flat records (runs made before the nesting) are converted field by field; anything else (nested
    records, other retrievers) is returned as it is. Tables read old and new runs through this."""
    target = str(retriever.get("_target_", ""))
    if not target.endswith(("RecollectionRetriever", "RFMemRetriever")) or "recollection" in retriever:
        return dict(retriever)
    blocks: dict[str, dict[str, Any]] = {"recollection": {}}
    if target.endswith("RFMemRetriever"):
        blocks.update(gate={}, familiarity={})
    fields = {name: block for block, kind in (("recollection", RecollectionParams), ("gate", GateParams))
              for name in kind.__dataclass_fields__}
    nested: dict[str, Any] = {}
    for name, value in retriever.items():
        if name in _FLAT_FAMILIARITY and "familiarity" in blocks:
            blocks["familiarity"][_FLAT_FAMILIARITY[name]] = value
        elif fields.get(name) in blocks:
            blocks[fields[name]][name] = value
        else:
            nested[name] = value
    return {**nested, **blocks}
