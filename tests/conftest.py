"""Shared fixtures: offline switches, the real data root (skips cleanly when absent), a seeded fake encoder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("MEMREPRO_AUTO_DOWNLOAD", "0")  # tests never fetch data unless one opts in (a mirror)
# the repository's kept runs (results/kept) never reach a test's results folder; tests that keep name their own
os.environ["MEMREPRO_KEPT_DIR"] = tempfile.mkdtemp(prefix="memrepro-tests-kept-")
# what a test does not place itself (results, models, logs: memrepro/paths.py) never lands in the checkout: a
# project folder of the session here, each test's own below (_project_home)
os.environ["MEMREPRO_HOME"] = tempfile.mkdtemp(prefix="memrepro-tests-home-")

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]
# CLI subprocesses (integration tests) import this checkout's memrepro, never another installed copy of it.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)


# The modules whose tests encode real data with mpnet into the shared embedding cache (minutes each when it is cold).
MPNET_CACHE_MODULES = ("tests/test_gpu_check.py", "tests/test_reproduction.py", "tests/test_rfmem_reproduction.py")


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without the plugin, pytest never calls it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``make test`` runs ``-n auto --dist loadfile``: whole modules per worker, so a module-scoped fixture runs once.
    The mpnet modules form one unit, so a cold cache is encoded once, not once per worker at the same time."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False  # keep collection order (below): not the most tests first, the mpnet unit

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return "mpnet_cache" if module in MPNET_CACHE_MODULES else module

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On an xdist worker, the mpnet unit (the longest) is collected first, so it is scheduled first."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in MPNET_CACHE_MODULES)  # stable


@pytest.fixture(autouse=True)
def _project_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's project folder is its ``tmp_path``: the folders it does not name go there, as they went to the
    folder a CLI test runs in before they resolved from the project root."""
    monkeypatch.setenv("MEMREPRO_HOME", str(tmp_path))


def _real_data_root() -> Path | None:
    configured = os.environ.get("MEMREPRO_DATA_DIR")
    candidate = Path(configured) if configured else REPO / "data"  # the checkout's, as `run` reads it
    return candidate.resolve() if candidate.is_dir() else None


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The real benchmark folder (``$MEMREPRO_DATA_DIR``, else the checkout's ``data/``); the test skips when absent."""
    root = _real_data_root()
    if root is None:
        pytest.skip("real benchmark data not found (set MEMREPRO_DATA_DIR or place it in the checkout's data/)")
    return root


# Fixture files are stored under names that cannot be mistaken for benchmark data (the project never commits
# real data files); tests read them from a copy laid out exactly like a data root.
FIXTURE_RENAMES = {
    "locomo10.fixture.json": "locomo10.json",
    "questions_32k.fixture.csv": "questions_32k.csv",
    "per_question": "lme_jsons",
    "v1_fixture": "eval_data_v1",
}


@pytest.fixture(scope="session")
def fixtures_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny exact-schema fixtures, materialised as a data root (real file and folder names)."""
    root = tmp_path_factory.mktemp("fixture_data_root")
    for source in sorted(FIXTURES.rglob("*")):
        if source.is_file():
            parts = [FIXTURE_RENAMES.get(part, part) for part in source.relative_to(FIXTURES).parts]
            target = root.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return root


@pytest.fixture()
def fixture_paths(tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """In-process runs on the fixtures: data from the fixture root, cache and results under ``tmp_path``
    (``tmp_path / "results"``); returns ``tmp_path``."""
    monkeypatch.setenv("MEMREPRO_DATA_DIR", str(fixtures_dir))
    monkeypatch.setenv("MEMREPRO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MEMREPRO_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("MEMREPRO_KEPT_DIR", str(tmp_path / "kept"))
    return tmp_path


def composed_run_config(overrides: list[str]) -> dict:
    """The config a run of ``overrides`` records: Hydra's full composition of ``conf/config.yaml``, resolved."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import memrepro.config  # noqa: F401  (registers the schemas)
    from memrepro.experiments import register_presets
    from memrepro.paths import CONFIG_DIR

    register_presets()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)


def run_record(run_id: str = "0" * 16, dataset: str = "locomo", *, summary: dict | None = None,
               n_total: int = 0, **fields: object) -> dict:
    """A valid ``metrics.json`` document (:class:`memrepro.runs.record.RunRecord`) for hand-made run folders:
    the given parts, every other field empty. ``summary`` may give only some of its parts."""
    from memrepro.runs.record import RunRecord

    provenance = {"config_hash": run_id, "data_sha256": "0" * 64, "files": [], "loader_options": {},
                  "tie_rule": "test", "git": {}, "versions": {}, "created": "2026-01-01T00:00:00+0000",
                  **dict(fields.pop("provenance", None) or {})}
    document = {"run_id": run_id, "dataset": dataset, "retriever": {}, "encoder": {"label": "test"},
                "metric_names": [], "primary": [],
                "counts": {"n_total": n_total, "n_scored": n_total, "n_excluded": {}},
                "summary": {"n": 0, "splits": {}, "split_mean": {}, "split_std": {}, "pooled": {}, "categories": {},
                            **(summary or {})},
                "timings": {}, "provenance": provenance, **fields}
    return RunRecord.new(document).to_json()  # validated: a fixture never writes what a reader refuses


def mark_complete(folder: Path) -> Path:
    """Write the ``COMPLETE`` manifest of a hand-made run folder (an empty ``queries.jsonl`` added when it has
    none), as a run writer does last; returns the folder."""
    import json

    from memrepro.runs.folder import COMPLETE, manifest_of

    queries = folder / "queries.jsonl"
    if not queries.exists():
        queries.write_text("")
    rows = len(queries.read_text(encoding="utf-8").splitlines())
    (folder / COMPLETE).write_text(json.dumps(manifest_of(folder, rows), indent=1, sort_keys=True) + "\n")
    return folder


@pytest.fixture()
def retrieved(fixture_paths: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every query id handed to the dense retriever: the batched pass's, then batch-1 timing's (one per call)."""
    from memrepro.retrievers.dense import DenseRetriever

    seen: list[str] = []
    original = DenseRetriever.retrieve

    def counting(self, queries, vectors, index):
        seen.extend(q.query_id for q in queries)
        return original(self, queries, vectors, index)

    monkeypatch.setattr(DenseRetriever, "retrieve", counting)
    return seen
