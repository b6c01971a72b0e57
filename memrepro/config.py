"""Dataclass schemas for every config group, registered in Hydra's ConfigStore.

Each YAML file of a group lists its schema first in its defaults (``defaults: [<schema>, _self_]``), so a
typo'd key or a wrong type fails at composition time with Hydra's own message. A field with a range, a list of
allowed values or no bearing on the results is declared with ``param`` (:mod:`memrepro.parameters`): the config
check (:mod:`memrepro.validate`), a retriever built in Python, docs/parameters.md and the run id all read that one
declaration. The schemas of code that checks its own arguments live with that code and are gathered here
(``retrievers/schemas.py``, ``retrievers/rfmem/params.py``, ``training/recipes.py``, ``search.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from memrepro.datasets import locomo, longmemeval, personabench, personamem  # their allowed names (no torch)
from memrepro.datasets.gold_corrections import GOLD_LABELS, ORIGINAL
from memrepro.models.convmemory_v1_shape import WINDOW_MODES
from memrepro.parameters import (DEVICE, INTEGER, NAME, NON_EMPTY_INTEGERS, distinct_list, integer_at_least,
                                 integer_in, number_above, one_of, param)
from memrepro.paths import folder_path
from memrepro.retrievers.arms import ARMS
from memrepro.retrievers.schemas import (BM25RetrieverConfig, DenseRetrieverConfig, RecollectionRetrieverConfig,
                                         RFMemRetrieverConfig)
from memrepro.search import SearchConfig
from memrepro.training.recipes import CrossEncoderRecipe, V1ModelsConfig


# Fields every dataset schema has (a field declaration is one object per class, hence functions): where the data
# lives and whether a file with another sha256 may be read, neither of which changes what a run computes.
def _data_dir() -> Any:
    return param(None, changes_results=False)


def _allow_unverified() -> Any:
    return param(False, changes_results=False)


def _gold_labels() -> Any:
    """original: the gold as published (the papers' numbers; no run id changes); corrected: the versioned
    corrections of memrepro/datasets/corrections/ applied (runs of their own, docs/checks.md#gold-labels)."""
    return param(ORIGINAL, one_of(*GOLD_LABELS))


@dataclass
class LocomoDatasetConfig:
    _target_: str = "memrepro.datasets.locomo.load_locomo"
    data_dir: Optional[str] = _data_dir()
    allow_unverified: bool = _allow_unverified()  # run on a file whose sha256 is not the pinned one (labelled)
    file: str = "locomo/locomo10.json"
    evidence_rule: str = param("exact", one_of(*locomo.EVIDENCE_RULES))
    seeds: List[int] = param(default_factory=lambda: list(locomo.SPLIT_SEEDS), rule=NON_EMPTY_INTEGERS)
    gold_labels: str = _gold_labels()


@dataclass
class LongMemEvalDatasetConfig:
    _target_: str = "memrepro.datasets.longmemeval.load_longmemeval"
    data_dir: Optional[str] = _data_dir()
    allow_unverified: bool = _allow_unverified()  # run on a file whose sha256 is not the pinned one (labelled)
    variant: str = param("s", one_of(*longmemeval.VARIANTS))
    source: Optional[str] = None
    granularity: str = param("session", one_of(*longmemeval.GRANULARITIES))
    gold: str = param("rfmem", one_of(*longmemeval.GOLD_RULES))
    limit: Optional[int] = param(None, integer_at_least(1))
    gold_labels: str = _gold_labels()


@dataclass
class PersonaBenchDatasetConfig:
    _target_: str = "memrepro.datasets.personabench.load_personabench"
    data_dir: Optional[str] = _data_dir()
    allow_unverified: bool = _allow_unverified()  # run on a file whose sha256 is not the pinned one (labelled)
    noise: str = param("0.0", one_of(*personabench.NOISE_LEVELS))
    communities: List[str] = param(default_factory=lambda: list(personabench.COMMUNITIES),
                                   rule=distinct_list(NAME, "community names"))
    people_per_community: int = param(3, integer_at_least(1))


@dataclass
class PersonaMemDatasetConfig:
    _target_: str = "memrepro.datasets.personamem.load_personamem"
    data_dir: Optional[str] = _data_dir()
    allow_unverified: bool = _allow_unverified()  # run on a file whose sha256 is not the pinned one (labelled)
    size: str = param("32k", one_of(*personamem.SIZES))
    slice_context: bool = False
    unit: str = param("pair", one_of(*personamem.UNITS))
    label_map: str = param("rfmem", one_of(*personamem.LABEL_MAPS))


@dataclass
class SentenceTransformerEncoderConfig:
    _target_: str = "memrepro.models.encoder.SentenceTransformerEncoder"
    model: str = MISSING
    path: Optional[str] = None
    allow_substitute: bool = False
    max_seq_length: Optional[int] = param(None, integer_at_least(1))
    batch_size: int = param(64, integer_at_least(1), changes_results=False)
    query_prefix: str = ""
    document_prefix: str = ""
    device: str = param("auto", DEVICE, changes_results=False)
    show_progress: bool = param(True, changes_results=False)


@dataclass
class FakeEncoderConfig:
    _target_: str = "memrepro.models.encoder.FakeEncoder"
    dim: int = param(64, integer_at_least(1))
    seed: int = 0


@dataclass
class ConvMemoryV1RetrieverConfig:
    _target_: str = "memrepro.retrievers.convmemory_v1.ConvMemoryV1Retriever"
    model: V1ModelsConfig = field(default_factory=V1ModelsConfig)
    # candidate_local (the paper's headline) | full (the package default)
    window_mode: str = param("candidate_local", one_of(*WINDOW_MODES))


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
    max_length: Optional[int] = param(256, integer_at_least(1))
    batch_size: int = param(32, integer_at_least(1))
    activation: str = param("logit", one_of("logit", "library_default"))  # raw logits | the model's own
    device: str = param("auto", DEVICE)


@dataclass
class CascadeRetrieverConfig:
    _target_: str = "memrepro.retrievers.cascade.CascadeRetriever"
    first_stage: Any = MISSING  # any retriever config (v1 by default; dense; rfmem)
    cross_encoder: Any = MISSING  # TrainedCrossEncoders (per split seed) or one CrossEncoderScorer
    protected: int = param(10, integer_at_least(1))
    arm: str = param("full_text", one_of(*ARMS))
    arm_seed: int = param(0, integer_at_least(0))


@dataclass
class FullPoolRetrieverConfig:
    _target_: str = "memrepro.retrievers.fullpool.FullPoolRetriever"
    first_stage: Any = MISSING
    cross_encoder: Any = MISSING
    pool: int = param(500, integer_at_least(1))


@dataclass
class ExternalRetrieverConfig:
    """``retriever=external retriever.target=my_pkg.MyRetriever``: any object with the public Retriever Protocol."""

    _target_: str = "memrepro.retrievers.external.ExternalRetriever"
    target: str = MISSING
    params: Any = field(default_factory=dict)
    name: Optional[str] = None
    order: Optional[str] = None


_METRIC_NAMES = distinct_list(NAME, "metric names", non_empty=False)  # each one the metrics module can compute


@dataclass
class MetricsConfig:
    names: List[str] = param(default_factory=list, rule=_METRIC_NAMES)  # empty: the benchmark protocol's metrics
    extra: List[str] = param(default_factory=list, rule=_METRIC_NAMES)  # added to the protocol's


@dataclass
class PathsConfig:
    """Where files live: each folder's variable, else its place in the project folder (``$MEMREPRO_HOME``, else
    the checkout; conf/paths/default.yaml), never the current folder."""

    data_dir: str = MISSING
    results_dir: str = MISSING
    cache_dir: str = MISSING
    log_dir: str = MISSING
    models_dir: str = MISSING
    kept_dir: str = MISSING  # committed copies of expensive runs (memrepro/runs/kept.py)


@dataclass
class RuntimeConfig:
    device: str = param("auto", DEVICE)
    # more threads than CPUs only slows torch down, and far more cannot even be started (a MemoryError)
    torch_threads: Optional[int] = param(None, integer_in(1, os.cpu_count() or 1, why="this machine's CPU count"))
    progress: bool = True
    batch_size: int = param(1024, integer_at_least(1))  # queries per retriever call in the batched pass
    # finished batches are saved at most this often (0: every batch); see resume.py
    checkpoint_every_s: float = param(60.0, number_above(0.0, inclusive=True))


@dataclass
class LatencyConfig:
    batch1_queries: int = param(200, integer_at_least(0))  # how many queries get a batch-1 timing (0 disables)
    warmup: int = param(10, integer_at_least(0))  # executed and discarded first
    batch1_once: bool = False  # sweeps: time batch-1 on the first point of the process only (its run id is noted)


@dataclass
class ChecksConfig:
    """The protocol check (docs/checks.md): its findings are recorded in metrics.json whatever this says."""

    ignore: List[str] = field(default_factory=list)  # finding codes not printed (memrepro.checks.CODES)


@dataclass
class OutputConfig:
    top_n: int = param(100, integer_at_least(1))  # ranked ids kept per query in queries.jsonl and run.trec


@dataclass
class RunConfig:
    dataset: Any = MISSING
    retriever: Any = MISSING
    encoder: Any = MISSING
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    # where files live, devices, speed, timing: no ranking or metric depends on them
    paths: PathsConfig = param(default_factory=PathsConfig, changes_results=False)
    runtime: RuntimeConfig = param(default_factory=RuntimeConfig, changes_results=False)
    latency: LatencyConfig = param(default_factory=LatencyConfig, changes_results=False)
    output: OutputConfig = field(default_factory=OutputConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    checks: ChecksConfig = param(default_factory=ChecksConfig, changes_results=False)
    overwrite: bool = param(False, changes_results=False)
    # Chosen by `first_stage=…` / `cross_encoder=…` / `arm=…` and read by the cascade presets through
    # interpolation (`retriever.first_stage: ${first_stage}`), so they reach a run id only through the retriever:

    first_stage: Any = param(None, in_run_id=False)
    cross_encoder: Any = param(None, in_run_id=False)
    arm: str = param("full_text", one_of(*ARMS), in_run_id=False)
    # the entry of conf/experiments.yaml a run was launched as (`+experiment=<name>`, `experiments`): a label
    condition: Optional[str] = param(None, changes_results=False)


@dataclass
class TrainConfig:
    """``python -m memrepro train``: resolve (train when absent) every model a retriever needs, per split seed."""

    dataset: Any = MISSING
    encoder: Any = MISSING
    retriever: Any = MISSING
    first_stage: Any = None
    cross_encoder: Any = None
    arm: str = param("full_text", one_of(*ARMS))
    paths: PathsConfig = field(default_factory=PathsConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    # empty: every split seed
    seeds: List[int] = param(default_factory=list, rule=distinct_list(INTEGER, "integers", non_empty=False))


RUN_FILE_FORMATS = ("auto", "trec", "jsonl")  # auto: told apart by the file's first line
RUN_FILE_ORDERS = ("score", "rank")  # how a run file's lists are ordered: by the scores it gives, or its ranks


@dataclass
class EvalConfig:
    """``python -m memrepro eval``: score an external run file under a benchmark's protocol."""

    dataset: Any = MISSING
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    run_file: str = MISSING
    format: str = param("auto", one_of(*RUN_FILE_FORMATS))
    order: str = param("score", one_of(*RUN_FILE_ORDERS))
    strict: bool = False
    name: Optional[str] = None
    encoder_label: str = "external"
    checks: ChecksConfig = param(default_factory=ChecksConfig, changes_results=False)
    overwrite: bool = False


FOLDER_RESOLVER = "memrepro.folder"  # ${memrepro.folder:results_dir}: memrepro.paths.folder_path

# The schema of each config group's options, by ConfigStore name (``<group>/<name>``): what a preset names first.
GROUP_SCHEMAS: Mapping[str, Mapping[str, type]] = {
    "dataset": {"locomo_schema": LocomoDatasetConfig, "longmemeval_schema": LongMemEvalDatasetConfig,
                "personabench_schema": PersonaBenchDatasetConfig, "personamem_schema": PersonaMemDatasetConfig},
    "encoder": {"sentence_transformer_schema": SentenceTransformerEncoderConfig, "fake_schema": FakeEncoderConfig},
    "retriever": {"dense_schema": DenseRetrieverConfig, "cascade_schema": CascadeRetrieverConfig,
                  "convmemory_v1_schema": ConvMemoryV1RetrieverConfig, "fullpool_schema": FullPoolRetrieverConfig,
                  "recollection_schema": RecollectionRetrieverConfig, "rfmem_schema": RFMemRetrieverConfig,
                  "bm25_schema": BM25RetrieverConfig, "external_schema": ExternalRetrieverConfig},
    "cross_encoder": {"trained_cross_encoders_schema": TrainedCrossEncodersConfig},
    "metrics": {"metrics_schema": MetricsConfig},
    "paths": {"paths_schema": PathsConfig},
}
# a node's schema by the code it names (its ``_target_``): a cascade's first stage, the models a retriever loads
SCHEMA_BY_TARGET: Mapping[str, type] = {
    schema.__dataclass_fields__["_target_"].default: schema
    for schema in (*(s for schemas in GROUP_SCHEMAS.values() for s in schemas.values()), V1ModelsConfig)
    if "_target_" in schema.__dataclass_fields__}


def schema_for_target(target: str) -> type | None:
    """The schema of a config node that names ``target`` as its ``_target_`` (None: code memrepro has no schema
    for, such as your own retriever)."""
    return SCHEMA_BY_TARGET.get(target)


def register_configs() -> None:
    """The schemas, and ``${memrepro.folder:<name>}`` (conf/paths/default.yaml). The ``+experiment=<name>`` presets
    are registered by whoever composes with them (:func:`memrepro.experiments.register_presets`): parsing the
    list costs more than composing a run."""
    if not OmegaConf.has_resolver(FOLDER_RESOLVER):
        OmegaConf.register_new_resolver(FOLDER_RESOLVER, lambda name: str(folder_path(name)))
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    store.store(name="train_schema", node=TrainConfig)
    store.store(name="eval_schema", node=EvalConfig)
    for group, schemas in GROUP_SCHEMAS.items():
        for name, schema in schemas.items():
            store.store(group=group, name=name, node=schema)


register_configs()
