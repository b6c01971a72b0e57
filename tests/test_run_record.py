"""The run record (metrics.json) is typed and checked when read; the run id hashes what decides rankings only
(settings such as latency_scope do not split it) plus each retriever's ALGORITHM_VERSION."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import mark_complete, run_record
from hydra import compose, initialize_config_dir

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro import runner
from memrepro.paths import CONFIG_DIR
from memrepro.provenance import config_hash
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


# ---------------------------------------------------------------------------------------------------- stale runs


@pytest.fixture()
def results(tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMREPRO_DATA_DIR", str(fixtures_dir))
    monkeypatch.setenv("MEMREPRO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MEMREPRO_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path / "results"


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


# ---------------------------------------------------------------------------------------------------- one owner


def _calls(predicate) -> list[str]:
    """``file:line`` of every call in memrepro/ that ``predicate(call node)`` accepts."""
    import ast

    package = Path(__file__).resolve().parents[1] / "memrepro"
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and predicate(node):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def _names_metrics_json(node) -> bool:
    import ast

    return any(isinstance(n, ast.Constant) and n.value == "metrics.json" for n in ast.walk(node))


def _called(node) -> str:
    import ast

    func = node.func
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else ""
        return f"{owner}.{func.attr}" if owner else func.attr
    return func.id if isinstance(func, ast.Name) else ""


def test_one_writer_of_metrics_json() -> None:
    """The file is written in one place (the run folder's writer), from a record made in one place
    (RunRecord.build, which run and eval both call): its format cannot drift between two authors."""
    writes = _calls(lambda node: "write" in _called(node).lower() and _names_metrics_json(node))
    assert [where.rpartition(":")[0] for where in writes] == ["memrepro/runs/folder.py"], writes
    made = _calls(lambda node: _called(node) in {"RunRecord.new", "RunRecord"})
    assert {where.rpartition(":")[0] for where in made} <= {"memrepro/runs/record.py"}, made
    built = _calls(lambda node: _called(node) == "RunRecord.build")
    assert sorted(where.rpartition(":")[0] for where in built) == ["memrepro/cli/eval.py", "memrepro/runner.py"]


def test_the_writer_walk_sees_a_second_writer() -> None:
    import ast

    node = ast.parse('writer.write_json("metrics.json", document)').body[0].value
    assert "write" in _called(node) and _names_metrics_json(node)
    node = ast.parse('(folder / "metrics.json").write_text(text)').body[0].value
    assert "write" in _called(node).lower() and _names_metrics_json(node)
    node = ast.parse('read_kept_file(folder, "metrics.json")').body[0].value
    assert "write" not in _called(node).lower()
