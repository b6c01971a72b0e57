"""Dataclass schemas for every config group, registered in Hydra's ConfigStore.

Each YAML file of a group lists its schema first in its defaults (``defaults: [<schema>, _self_]``), so a
typo'd key or a wrong type fails at composition time with Hydra's own message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from memrepro.datasets.locomo import SPLIT_SEEDS
from memrepro.limits import DEFAULT_CHUNK_BYTES
from memrepro.retrievers.rfmem.params import FamiliarityParams, GateParams, RecollectionParams
from memrepro.training.recipes import CrossEncoderRecipe, V1Recipe


@dataclass
class LocomoDatasetConfig:
    _target_: str = "memrepro.datasets.locomo.load_locomo"
    data_dir: Optional[str] = None
    allow_unverified: bool = False  # run on a file whose sha256 is not the pinned one (labelled)
    file: str = "locomo/locomo10.json"
    evidence_rule: str = "exact"
    seeds: List[int] = field(default_factory=lambda: list(SPLIT_SEEDS))


@dataclass
class LongMemEvalDatasetConfig:
    _target_: str = "memrepro.datasets.longmemeval.load_longmemeval"
    data_dir: Optional[str] = None
    allow_unverified: bool = False  # run on a file whose sha256 is not the pinned one (labelled)
    variant: str = "s"
    source: Optional[str] = None
    granularity: str = "session"
    gold: str = "rfmem"
    limit: Optional[int] = None


@dataclass
class PersonaBenchDatasetConfig:
    _target_: str = "memrepro.datasets.personabench.load_personabench"
    data_dir: Optional[str] = None
    allow_unverified: bool = False  # run on a file whose sha256 is not the pinned one (labelled)
    noise: str = "0.0"
    communities: List[str] = field(default_factory=lambda: ["community_0", "community_1"])
    people_per_community: int = 3


@dataclass
class PersonaMemDatasetConfig:
    _target_: str = "memrepro.datasets.personamem.load_personamem"
    data_dir: Optional[str] = None
    allow_unverified: bool = False  # run on a file whose sha256 is not the pinned one (labelled)
    size: str = "32k"
    slice_context: bool = False
    unit: str = "pair"
    label_map: str = "rfmem"


@dataclass
class SentenceTransformerEncoderConfig:
    _target_: str = "memrepro.models.encoder.SentenceTransformerEncoder"
    model: str = MISSING
    path: Optional[str] = None
    allow_substitute: bool = False
    max_seq_length: Optional[int] = None
    batch_size: int = 64
    query_prefix: str = ""
    document_prefix: str = ""
    device: str = "auto"
    show_progress: bool = True


@dataclass
class FakeEncoderConfig:
    _target_: str = "memrepro.models.encoder.FakeEncoder"
    dim: int = 64
    seed: int = 0


@dataclass
class DenseRetrieverConfig:
    _target_: str = "memrepro.retrievers.dense.DenseRetriever"
    mode: str = "full"
    k: Optional[int] = None
    min_sim: Optional[float] = None
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    name: str = "dense"


@dataclass
class RecollectionRetrieverConfig:
    """RF-Mem Recollection alone (docs/retrievers.md#recollection): ``retriever.recollection.<field>``; the
    parameters and their defaults are ``RecollectionParams``'s (one place), which the engines take whole."""

    _target_: str = "memrepro.retrievers.rfmem.retriever.RecollectionRetriever"
    engine: str = "faithful"  # faithful (per-query reference) | compiled (numba)
    recollection: RecollectionParams = field(default_factory=RecollectionParams)
    latency_scope: str = "path_only"  # path_only | gate_plus_path


@dataclass
class RFMemRetrieverConfig(RecollectionRetrieverConfig):
    """RF-Mem (docs/retrievers.md#rf-mem): familiarity gate (``retriever.gate``) → dense top-K
    (``retriever.familiarity``) or Recollection (``retriever.recollection``)."""

    _target_: str = "memrepro.retrievers.rfmem.retriever.RFMemRetriever"
    gate: GateParams = field(default_factory=GateParams)
    familiarity: FamiliarityParams = field(default_factory=FamiliarityParams)
    chunk_bytes: int = DEFAULT_CHUNK_BYTES  # memory bound of the faithful engine's Familiarity-path search


@dataclass
class V1ModelsConfig:
    _target_: str = "memrepro.training.convmemory_v1.V1Models"
    recipe: V1Recipe = field(default_factory=V1Recipe)
    path: Optional[str] = None  # explicit checkpoint folder or template with {seed}
    published: Optional[str] = None  # e.g. Purdy0228/ConvMemory-LoCoMo-MPNet (online; one model for all seeds)
    train_on_demand: bool = True
    pool: int = 500
    raw_weight: float = 0.025
    router_block_size: int = 32
    lexical_features: bool = True


@dataclass
class ConvMemoryV1RetrieverConfig:
    _target_: str = "memrepro.retrievers.convmemory_v1.ConvMemoryV1Retriever"
    model: V1ModelsConfig = field(default_factory=V1ModelsConfig)
    window_mode: str = "candidate_local"  # candidate_local (the paper's headline) | full (the package default)


@dataclass
class TrainedCrossEncodersConfig:
    """One cross-encoder per split seed: path/template → published → recipe hash → trained on demand."""

    _target_: str = "memrepro.training.cross_encoder.TrainedCrossEncoders"
    recipe: CrossEncoderRecipe = field(default_factory=CrossEncoderRecipe)
    base_model: str = "cross-encoder/ms-marco-MiniLM-L-6-v2"  # the published base (online or local path)
    fallback_base_model: str = "sentence-transformers/all-MiniLM-L6-v2"  # offline: bi-encoder backbone, labelled
    record_stage: Any = None  # the retriever whose top-10 the records hold; None: the owning cascade's first stage
    path: Optional[str] = None  # explicit folder or template with {seed}
    published: Optional[str] = None  # e.g. Purdy0228/ConvMemory-v2-Evidence-Reranker (online, one for all seeds)
    train_on_demand: bool = True
    max_length: Optional[int] = 256
    batch_size: int = 32
    activation: str = "logit"
    device: str = "auto"


@dataclass
class CascadeRetrieverConfig:
    _target_: str = "memrepro.retrievers.cascade.CascadeRetriever"
    first_stage: Any = MISSING  # any retriever config (v1 by default; dense; rfmem)
    cross_encoder: Any = MISSING  # TrainedCrossEncoders (per split seed) or one CrossEncoderScorer
    protected: int = 10
    arm: str = "full_text"  # one of memrepro.retrievers.arms.ARMS
    arm_seed: int = 0


@dataclass
class FullPoolRetrieverConfig:
    _target_: str = "memrepro.retrievers.fullpool.FullPoolRetriever"
    first_stage: Any = MISSING
    cross_encoder: Any = MISSING
    pool: int = 500


@dataclass
class BM25RetrieverConfig:
    _target_: str = "memrepro.retrievers.bm25.BM25Retriever"
    mode: str = "full"
    k: Optional[int] = None
    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stopwords: Optional[str] = "en"
    stemmer: Optional[str] = None
    name: str = "bm25"


@dataclass
class ExternalRetrieverConfig:
    """``retriever=external retriever.target=my_pkg.MyRetriever``: any object with the public Retriever Protocol."""

    _target_: str = "memrepro.retrievers.external.ExternalRetriever"
    target: str = MISSING
    params: Any = field(default_factory=dict)
    name: Optional[str] = None
    order: Optional[str] = None


@dataclass
class MetricsConfig:
    names: List[str] = field(default_factory=list)  # empty: the benchmark protocol's metrics
    extra: List[str] = field(default_factory=list)  # added to the protocol's


@dataclass
class PathsConfig:
    data_dir: str = MISSING
    results_dir: str = MISSING
    cache_dir: str = MISSING
    log_dir: str = "outputs"
    models_dir: str = "models"
    kept_dir: str = "results/kept"  # committed copies of expensive runs (memrepro/kept_runs.py)


@dataclass
class RuntimeConfig:
    device: str = "auto"
    torch_threads: Optional[int] = None
    progress: bool = True
    batch_size: int = 1024  # queries per retriever call in the batched pass
    checkpoint_every_s: float = 60.0  # finished batches are saved at most this often (0: every batch); see resume.py


@dataclass
class SearchConfig:
    """Exact search backend by episode size (``memrepro.search.SearchOptions``); approximate ones on request."""

    backend: str = "auto"  # auto | torch | faiss | faiss_ivf | faiss_hnsw
    faiss_min_memories: int = 4096
    margin: int = 16
    ivf_nlist: Optional[int] = None
    ivf_nprobe: int = 16
    hnsw_m: int = 32
    hnsw_ef_construction: int = 40
    hnsw_ef_search: int = 128
    recall_k: int = 10  # approximate backends: recall@k against exact search, reported in metrics.json
    recall_queries: int = 1000  # ... over this many queries (the first ones)


@dataclass
class LatencyConfig:
    batch1_queries: int = 200  # how many queries get a batch-1 timing (0 disables)
    warmup: int = 10  # executed and discarded first
    batch1_once: bool = False  # sweeps: time batch-1 on the first point of the process only (its run id is noted)


@dataclass
class OutputConfig:
    top_n: int = 100  # ranked ids kept per query in queries.jsonl and run.trec


@dataclass
class RunConfig:
    dataset: Any = MISSING
    retriever: Any = MISSING
    encoder: Any = MISSING
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    overwrite: bool = False
    # Chosen by `first_stage=…` / `cross_encoder=…` / `arm=…` and read by the cascade presets through
    # interpolation (`retriever.first_stage: ${first_stage}`), so they reach a run id only through the retriever.
    first_stage: Any = None
    cross_encoder: Any = None
    arm: str = "full_text"


@dataclass
class TrainConfig:
    """``python -m memrepro train``: resolve (train when absent) every model a retriever needs, per split seed."""

    dataset: Any = MISSING
    encoder: Any = MISSING
    retriever: Any = MISSING
    first_stage: Any = None
    cross_encoder: Any = None
    arm: str = "full_text"
    paths: PathsConfig = field(default_factory=PathsConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    seeds: List[int] = field(default_factory=list)  # empty: every split seed


def register_configs() -> None:
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    store.store(name="train_schema", node=TrainConfig)
    store.store(group="dataset", name="locomo_schema", node=LocomoDatasetConfig)
    store.store(group="dataset", name="longmemeval_schema", node=LongMemEvalDatasetConfig)
    store.store(group="dataset", name="personabench_schema", node=PersonaBenchDatasetConfig)
    store.store(group="dataset", name="personamem_schema", node=PersonaMemDatasetConfig)
    store.store(group="encoder", name="sentence_transformer_schema", node=SentenceTransformerEncoderConfig)
    store.store(group="encoder", name="fake_schema", node=FakeEncoderConfig)
    store.store(group="retriever", name="dense_schema", node=DenseRetrieverConfig)
    store.store(group="retriever", name="cascade_schema", node=CascadeRetrieverConfig)
    store.store(group="retriever", name="convmemory_v1_schema", node=ConvMemoryV1RetrieverConfig)
    store.store(group="cross_encoder", name="trained_cross_encoders_schema", node=TrainedCrossEncodersConfig)
    store.store(group="retriever", name="fullpool_schema", node=FullPoolRetrieverConfig)
    store.store(group="retriever", name="recollection_schema", node=RecollectionRetrieverConfig)
    store.store(group="retriever", name="rfmem_schema", node=RFMemRetrieverConfig)
    store.store(group="retriever", name="bm25_schema", node=BM25RetrieverConfig)
    store.store(group="retriever", name="external_schema", node=ExternalRetrieverConfig)
    store.store(group="metrics", name="metrics_schema", node=MetricsConfig)
    store.store(group="paths", name="paths_schema", node=PathsConfig)


register_configs()
