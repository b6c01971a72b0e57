"""Dataclass schemas for every config group, registered in Hydra's ConfigStore.

Each YAML file of a group lists its schema first in its defaults (``defaults: [<schema>, _self_]``), so a
typo'd key or a wrong type fails at composition time with Hydra's own message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class LocomoDatasetConfig:
    _target_: str = "memrepro.datasets.locomo.load_locomo"
    data_dir: Optional[str] = None
    file: str = "locomo/locomo10.json"
    evidence_rule: str = "exact"
    seeds: List[int] = field(default_factory=lambda: [7, 11, 23, 31, 47])


@dataclass
class LongMemEvalDatasetConfig:
    _target_: str = "memrepro.datasets.longmemeval.load_longmemeval"
    data_dir: Optional[str] = None
    variant: str = "s"
    source: Optional[str] = None
    granularity: str = "session"
    gold: str = "rfmem"
    limit: Optional[int] = None


@dataclass
class PersonaBenchDatasetConfig:
    _target_: str = "memrepro.datasets.personabench.load_personabench"
    data_dir: Optional[str] = None
    noise: str = "0.0"
    communities: List[str] = field(default_factory=lambda: ["community_0", "community_1"])
    people_per_community: int = 3


@dataclass
class PersonaMemDatasetConfig:
    _target_: str = "memrepro.datasets.personamem.load_personamem"
    data_dir: Optional[str] = None
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
    chunk_bytes: int = 256 << 20


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


@dataclass
class RuntimeConfig:
    device: str = "auto"
    torch_threads: Optional[int] = None
    progress: bool = True
    batch_size: int = 1024  # queries per retriever call in the batched pass


@dataclass
class LatencyConfig:
    batch1_queries: int = 200  # how many queries get a batch-1 timing (0 disables)
    warmup: int = 10  # executed and discarded first


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
    overwrite: bool = False


# Keys that do not change a ranking or a metric: left out of the run id.
NON_SEMANTIC_KEYS = ("paths", "runtime", "latency", "overwrite", "hydra")


def register_configs() -> None:
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    store.store(group="dataset", name="locomo_schema", node=LocomoDatasetConfig)
    store.store(group="dataset", name="longmemeval_schema", node=LongMemEvalDatasetConfig)
    store.store(group="dataset", name="personabench_schema", node=PersonaBenchDatasetConfig)
    store.store(group="dataset", name="personamem_schema", node=PersonaMemDatasetConfig)
    store.store(group="encoder", name="sentence_transformer_schema", node=SentenceTransformerEncoderConfig)
    store.store(group="encoder", name="fake_schema", node=FakeEncoderConfig)
    store.store(group="retriever", name="dense_schema", node=DenseRetrieverConfig)
    store.store(group="metrics", name="metrics_schema", node=MetricsConfig)
    store.store(group="paths", name="paths_schema", node=PathsConfig)


register_configs()
