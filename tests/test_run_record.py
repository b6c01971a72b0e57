"""The run record (metrics.json) is typed and checked when read; the run id hashes what decides rankings only
(settings such as latency_scope do not split it) plus each retriever's ALGORITHM_VERSION; old runs migrate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import mark_complete, run_record
from hydra import compose, initialize_config_dir

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro import runner
from memrepro.runs.migrate import legacy_run_id, migrate
from memrepro.paths import CONFIG_DIR
from memrepro.provenance import config_hash
from memrepro.runs.folder import COMPLETE, read_record, run_problem
from memrepro.retrievers.dense import DenseRetriever
from memrepro.runs.identity import run_id_payload
from memrepro.runs.record import SCHEMA_VERSION, RunRecord, RunRecordError
from memrepro.tables.runs import complete_runs

TWO = "locomo/locomo10_two_conversations.json"


def _cfg(*extra: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["dataset=locomo", f"dataset.file={TWO}", "encoder=fake",
                                                        "latency.batch1_queries=0", "runtime.progress=false",
                                                        "runtime.device=cpu", *extra])


def _id(cfg) -> str:
    return config_hash(run_id_payload(cfg, "0" * 64, {"kind": "fake"}))


# ------------------------------------------------------------------------------------------------- the record


def test_record_round_trips_and_names_its_schema() -> None:
    document = run_record("abc", summary={"n": 2, "pooled": {"mrr": 0.5}, "split_std": {"mrr": None}}, n_total=2)
    assert document["schema_version"] == SCHEMA_VERSION and list(document)[0] == "schema_version"
    record = RunRecord.from_json(json.loads(json.dumps(document)))
    assert record.summary.pooled == {"mrr": 0.5} and record.counts.n_total == 2 and record.to_json() == document


@pytest.mark.parametrize("damage,message", [
    (lambda d: d["summary"]["pooled"].update(mrr="0.5"), "summary.pooled.mrr: expected float, found str"),
    (lambda d: d["counts"].pop("n_scored"), "counts.n_scored: missing"),
    (lambda d: d.update(surprise=1), "surprise: unknown key"),
    (lambda d: d["summary"]["categories"].update({"1": {"name": "x"}}), "summary.categories.1.n: missing"),
    (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "written by a newer memrepro"),
    (lambda d: d.update(data_verified="yes"), "data_verified: expected bool"),
])
def test_a_damaged_record_is_refused_with_its_file_and_key(damage, message: str) -> None:
    document = run_record("abc", summary={"pooled": {"mrr": 0.5}})
    damage(document)
    with pytest.raises(RunRecordError, match="runs/x/metrics.json: ") as caught:
        RunRecord.from_json(document, "runs/x/metrics.json")
    assert message in str(caught.value)


def test_a_schema_1_record_migrates_on_read() -> None:
    """Before the record: no schema_version, and eval runs wrote no data_verified, warnings or cache fields."""
    document = run_record("abc", summary={"pooled": {"mrr": 0.5}})
    for key in ("schema_version", "data_verified", "warnings", "encoded", "cache_hits", "cache_quarantined",
                "search", "validation", "migrated_from"):
        document.pop(key)
    document["latency"] = {}
    record = RunRecord.from_json(document)
    assert record.schema_version == SCHEMA_VERSION and record.data_verified is None
    assert record.latency.batched_amortized_ms_per_query is None and record.summary.pooled["mrr"] == 0.5
    del document["summary"]
    with pytest.raises(RunRecordError, match="summary: missing"):
        RunRecord.from_json(document)


def test_tables_skip_a_run_whose_record_is_damaged(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "locomo" / "dense" / "fake" / "r1"
    folder.mkdir(parents=True)
    document = run_record("r1")
    document["summary"]["pooled"] = {"mrr": [0.5]}
    (folder / "metrics.json").write_text(json.dumps(document))
    (folder / "config.yaml").write_text("retriever: {}\n")
    mark_complete(folder)
    warnings: list[str] = []
    assert complete_runs(tmp_path, warn=warnings.append) == []
    assert len(warnings) == 1 and "metrics.json: summary.pooled.mrr: expected float" in warnings[0]


# ----------------------------------------------------------------------------------------------------- run ids


@pytest.mark.parametrize("retriever,change", [
    ("rfmem", "retriever.latency_scope=gate_plus_path"),
    ("rfmem", "retriever.chunk_bytes=1024"),
    ("dense", "retriever.chunk_bytes=1024"),
    ("dense", "runtime.batch_size=7"),
    ("dense", "dataset.allow_unverified=true"),
])
def test_settings_that_change_nothing_do_not_split_run_ids(retriever: str, change: str) -> None:
    assert _id(_cfg(f"retriever={retriever}")) == _id(_cfg(f"retriever={retriever}", change))


def test_a_cascade_first_stage_setting_does_not_split_its_id() -> None:
    base = _cfg("retriever=cascade", "first_stage=dense")
    assert _id(base) == _id(_cfg("retriever=cascade", "first_stage=dense", "+first_stage.chunk_bytes=64"))


def test_what_changes_rankings_splits_run_ids() -> None:
    assert _id(_cfg("retriever=rfmem")) != _id(_cfg("retriever=rfmem", "retriever.recollection.alpha=0.5"))
    assert _id(_cfg("retriever=rfmem")) != _id(_cfg("retriever=rfmem", "retriever.engine=compiled"))  # compared


def test_an_algorithm_version_bump_invalidates_stale_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    cascade = _cfg("retriever=cascade", "first_stage=dense")
    assert {"memrepro.retrievers.cascade.CascadeRetriever", "memrepro.retrievers.dense.DenseRetriever"} <= set(
        run_id_payload(cascade, "0" * 64, {})["algorithm"])
    before = {"dense": _id(_cfg("retriever=dense")), "cascade": _id(cascade)}
    monkeypatch.setattr(DenseRetriever, "ALGORITHM_VERSION", DenseRetriever.ALGORITHM_VERSION + 1)
    assert _id(_cfg("retriever=dense")) != before["dense"]
    assert _id(cascade) != before["cascade"]  # a stage's fix reaches the retrievers built on it


# ---------------------------------------------------------------------------------------------------- migration


@pytest.fixture()
def results(tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMREPRO_DATA_DIR", str(fixtures_dir))
    monkeypatch.setenv("MEMREPRO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MEMREPRO_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path / "results"


def _as_schema_1(cfg) -> tuple[runner.RunOutcome, Path]:
    """A fresh run, then the same run moved to the folder a schema-1 memrepro wrote: its old id, no
    schema_version, the old id in run.trec, a manifest of those files."""
    fresh = runner.run(cfg)
    record = fresh.record
    identity = {k: v for k, v in record.encoder.items() if k != "label"}
    old_id = legacy_run_id(cfg, record.provenance.data_sha256, identity)
    assert old_id != fresh.folder.name  # the rule changed: without migration the run would be recomputed
    legacy = fresh.folder.with_name(old_id)
    shutil.copytree(fresh.folder, legacy)
    shutil.rmtree(fresh.folder)
    document = record.to_json()
    del document["schema_version"], document["migrated_from"], document["provenance"]["algorithm_versions"]
    document["run_id"] = document["provenance"]["config_hash"] = old_id
    (legacy / "metrics.json").write_text(json.dumps(document))
    (legacy / "run.trec").write_text((legacy / "run.trec").read_text().replace(fresh.folder.name, old_id))
    mark_complete(legacy)
    assert run_problem(legacy) is None
    return fresh, legacy


def test_a_run_written_under_the_old_id_rule_migrates_and_is_then_reused(results: Path) -> None:
    cfg = _cfg("retriever=rfmem", "retriever.recollection.k=5", "runtime.batch_size=64")
    fresh, legacy = _as_schema_1(cfg)
    record = fresh.record
    old_id = legacy.name
    (legacy / "notes.md").write_text("my notes\n")  # a user's own file in the run folder
    (moved,) = migrate(results, echo=lambda line: None)
    assert moved.new == fresh.folder and not legacy.exists() and run_problem(fresh.folder) is None
    assert (fresh.folder / "notes.md").read_text() == "my notes\n" and "kept notes.md" in moved.note
    migrated = read_record(fresh.folder)
    assert migrated.migrated_from == old_id and migrated.run_id == fresh.folder.name
    assert migrated.provenance.algorithm_versions == record.provenance.algorithm_versions != {}
    assert migrated.summary == record.summary and (fresh.folder / "run.trec").read_text().split()[5] == migrated.run_id
    again = runner.run(cfg)
    assert again.skipped and again.folder == fresh.folder  # found, not recomputed


def test_a_run_of_a_retriever_fixed_since_is_left_to_recompute(results: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _, legacy = _as_schema_1(_cfg("retriever=dense"))
    monkeypatch.setattr(DenseRetriever, "ALGORITHM_VERSION", 2)  # a fix after the run was computed
    (left,) = migrate(results, echo=lambda line: None)
    assert left.new is None and legacy.exists() and "DenseRetriever changed since it was computed" in left.note


def test_tables_skip_a_run_of_a_retriever_fixed_since(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table never shows a stale run's numbers: computed with a version that has since been bumped, it is
    skipped with one warning naming the class and both versions."""
    fresh = runner.run(_cfg("retriever=dense"))
    warnings: list[str] = []
    assert [run.folder for run in complete_runs(results, warn=warnings.append)] == [fresh.folder] and not warnings
    monkeypatch.setattr(DenseRetriever, "ALGORITHM_VERSION", DenseRetriever.ALGORITHM_VERSION + 1)
    assert complete_runs(results, warn=warnings.append) == []
    assert len(warnings) == 1 and "DenseRetriever ALGORITHM_VERSION 1 (now 2)" in warnings[0]


def test_a_fix_to_one_arm_leaves_the_other_settings_runs_valid() -> None:
    """CascadeRetriever version 2 reseeded the random arms only: full-text runs keep version 1 (their rankings did
    not change), the random arms get 2."""
    cascade = "memrepro.retrievers.cascade.CascadeRetriever"
    full = run_id_payload(_cfg("retriever=cascade", "first_stage=dense"), "0" * 64, {})["algorithm"]
    shuffled = run_id_payload(_cfg("retriever=cascade", "first_stage=dense", "arm=shuffled_memory_text"), "0" * 64,
                              {})["algorithm"]
    assert full[cascade] == 1 and shuffled[cascade] == 2
