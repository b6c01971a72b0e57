"""Parameters of the RF-Mem family, one dataclass per component (docs/retrievers.md#rf-mem-gate,
docs/retrievers.md#recollection, docs/retrievers.md#rf-mem-hyper-parameters).

These dataclasses are *the* schema: the engines take them whole, and ``memrepro/config.py`` nests them into the
Hydra retriever configs (``retriever.recollection.alpha=0.3``, ``retriever.gate.tau=0.3``). Each field is declared
once, here: its default and the values it allows (``param``, checked by ``memrepro.parameters`` for a composed config
and for a retriever built in Python alike, and listed in docs/parameters.md). The defaults are the PersonaMem column
of docs/retrievers.md#rf-mem-hyper-parameters (the official run.sh and call-site values), which is what
``retriever=recollection`` / ``retriever=rfmem`` run; the per-benchmark presets in ``conf/retriever/`` state only
what differs. Field names follow docs/retrievers.md; every switch it names is here so a faithful and a clean run
differ only in configuration. Not frozen: OmegaConf makes a frozen dataclass a read-only node, which no override
could change. Choice-valued fields are ``str`` (OmegaConf has no ``Literal``) with a ``one_of`` rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, TypeVar

from memrepro.errors import ConfigError
from memrepro.parameters import check_params, integer_at_least, number_above, number_in, one_of, param

COSINE = number_in(-1.0, 1.0)  # a floor or threshold on cosine similarity


@dataclass
class GateParams:
    """The familiarity gate (docs/retrievers.md#rf-mem-gate): probe top-``probe_k``, mean and entropy, ordered
    threshold rule."""

    probe_k: int = param(10, integer_at_least(1))
    probe_floor: Optional[float] = param(0.0, COSINE)  # keep probe scores >= floor; None = keep all
    probe_floor_ignored: bool = False  # PersonaBench: all probe_k scores used, padding included
    lam: float = param(20.0, number_above(0.0))  # softmax temperature λ
    # ε in the softmax denominator and the log (PersonaBench: 0)
    eps: float = param(1e-12, number_above(0.0, inclusive=True))
    theta_high: float = param(0.60, COSINE)  # threshold on the probe's mean cosine
    theta_low: float = param(0.30, COSINE)  # threshold on the probe's mean cosine, <= theta_high
    tau: float = param(0.20, number_above(0.0, inclusive=True), label="τ (tau)")  # entropy threshold (nats)
    # code_mean (the code's −(1/K′)Σp ln p) | shannon_sum
    entropy_form: str = param("code_mean", one_of("code_mean", "shannon_sum"))

    @staticmethod
    def check_together(values: Mapping[str, Any], prefix: str) -> None:
        low, high = values["theta_low"], values["theta_high"]
        if low > high:
            raise ConfigError(f"{prefix}.theta_low", low, f"a number <= {prefix}.theta_high ({high})")


@dataclass
class RecollectionParams:
    """Recollection (docs/retrievers.md#recollection: ``retrieve_pyramid_v2`` with "mean_group" expansion)."""

    k: int = param(10, integer_at_least(1), label="K")  # items to return (out_k)
    beam: int = param(3, integer_at_least(1), label="beam B")  # B
    fanout: int = param(2, integer_at_least(1), label="fanout F")  # F
    # weight of the branch query in the child query
    alpha: float = param(0.8, number_in(0.0, 1.0), label="α (alpha)")
    rounds: int = param(10, integer_at_least(1))  # R (depth)
    mmr_lambda: float = param(0.95, number_in(0.0, 1.0))
    # candidate floor (the code's "tau", unrelated to the gate's τ); None = none
    min_sim: Optional[float] = param(0.3, COSINE)
    after_empty_round: str = param("continue", one_of("continue", "stop"))  # continue | stop (PersonaBench)
    # keep | drop: an empty KMeans cluster → NaN centroid
    dead_branch_policy: str = param("keep", one_of("keep", "drop"))
    # none | dense: re-rank everything emitted by cosine to q0
    final_rerank: str = param("none", one_of("none", "dense"))
    kmeans_seed: int = param(42, integer_at_least(0))  # also the seed of spectral clustering
    # -- Appendix D.8-D.9 alternatives (Tables 15-16). Not in the release: each construction is memrepro's own,
    # documented in recollection.py. The defaults are the released algorithm, unchanged.

    # kmeans | dbscan | spectral: replaces KMeans (the RF-Mem paper's appendix D.8.1 / D.8.2;
    # docs/retrievers.md#recollection-variants)
    clustering: str = param("kmeans", one_of("kmeans", "dbscan", "spectral"))
    # scikit-learn's default radius, Euclidean on unit vectors (≈ cosine ≥ 0.875)
    dbscan_eps: float = param(0.5, number_above(0.0))
    # the smallest value that still leaves noise (scikit-learn's default is 5)
    dbscan_min_samples: int = param(2, integer_at_least(1))
    # singleton | drop: a noise point is its own cluster / joins none
    dbscan_noise: str = param("singleton", one_of("singleton", "drop"))
    spectral_gamma: float = param(1.0, number_above(0.0))  # RBF affinity exp(-γ‖x−y‖²), scikit-learn's default
    # alpha | gated: weight σ(⟨x_b, g⟩) in place of α (the RF-Mem paper's appendix D.8.3;
    # docs/retrievers.md#recollection-variants)
    mixing: str = param("alpha", one_of("alpha", "gated"))
    # cluster | graph_bfs: kNN graph + breadth-first search (the RF-Mem paper's appendix D.8.4;
    # docs/retrievers.md#recollection-variants)
    expansion: str = param("cluster", one_of("cluster", "graph_bfs"))
    graph_k: Optional[int] = param(None, integer_at_least(1))  # out-degree of the kNN graph; None = the fanout F
    # keep a kNN edge only if its cosine >= this; None = keep all k
    graph_min_sim: Optional[float] = param(0.0, COSINE)
    # no early stop at K; all R rounds, then a dense re-rank to q0, cut to K (the RF-Mem paper's appendix D.9;
    # docs/retrievers.md#recollection-variants)
    full_exploration: bool = False

    @staticmethod
    def check_together(values: Mapping[str, Any], prefix: str) -> None:
        clustering, mixing = values["clustering"], values["mixing"]
        if values["expansion"] == "graph_bfs" and (clustering != "kmeans" or mixing != "alpha"):
            raise ConfigError(f"{prefix}.expansion", "graph_bfs",
                              f"cluster while {prefix}.clustering={clustering!r} and {prefix}.mixing={mixing!r} "
                              "(graph_bfs replaces clustering and mixing: leave them kmeans and alpha)")


@dataclass
class FamiliarityParams:
    """The Familiarity path (docs/retrievers.md#familiarity): dense top-K with a floor."""

    k: Optional[int] = param(None, integer_at_least(1))  # None: the Recollection K
    min_sim: Optional[float] = param(0.3, COSINE)


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


def refuse_faithful_only_variants(params: RecollectionParams | Mapping[str, Any] | None, engine: str,
                                  prefix: str = "recollection") -> None:
    """Raise :class:`ConfigError`, naming the switch, if ``params`` asks ``engine`` for a D.8 construction only the
    faithful engine has."""
    values = vars(params) if isinstance(params, RecollectionParams) else dict(params or {})
    for name, default in FAITHFUL_ONLY_DEFAULTS.items():
        value = values.get(name, default)
        if value != default:
            raise ConfigError(f"{prefix}.{name}", value, f"{default!r}: the {engine} engine runs the released "
                              f"algorithm only; {name}={value!r} needs engine='faithful'")


def validate_recollection(params: RecollectionParams) -> None:
    """Refuse, naming the field, settings the algorithm has no meaning for (the declarations above)."""
    check_params(params, "recollection")
