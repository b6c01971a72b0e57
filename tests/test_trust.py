"""Results read back, checksums and tolerated data anomalies (in process: fast)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import run_record
from hydra import compose, initialize_config_dir

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro import runner
from memrepro.datasets.verify import check_files, data_verified, enforce
from memrepro.errors import DamagedFileError, UnverifiedDataError
from memrepro.runs.folder import COMPLETE, RunWriter, read_queries, read_record, recover, run_problem, verify_run
from memrepro.runs.identity import semantic_config
from memrepro.tables.runs import complete_runs
from memrepro.types import FileProvenance

CONF = Path(__file__).resolve().parents[1] / "conf"
LOCOMO_PIN = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"


def _write(final: Path, n_rows: int = 3, data_verified: bool | None = True) -> Path:
    writer = RunWriter(final)
    writer.write_text("config.yaml", "retriever:\n  name: dense\n")
    writer.write_jsonl("queries.jsonl", [{"split": "all", "query_id": f"q{i}", "excluded": None,
                                         "metrics": {"mrr": 1.0}} for i in range(n_rows)])
    writer.write_json("metrics.json", run_record(
        n_total=n_rows, data_verified=data_verified,
        provenance={"data_files": [{"path": "locomo/locomo10.json", "state": "mismatch", "actual": "abc",
                                    "expected": LOCOMO_PIN}] if data_verified is False else []}))
    return writer.commit()


def _folder(root: Path, run_id: str = "r1") -> Path:
    return root / "runs" / "locomo" / "dense" / "fake" / run_id


def test_manifest_covers_every_file(tmp_path: Path) -> None:
    folder = _write(_folder(tmp_path))
    manifest = json.loads((folder / COMPLETE).read_text())
    assert set(manifest["files"]) == {"config.yaml", "queries.jsonl", "metrics.json"} and manifest["rows"] == 3
    verify_run(folder)
    assert read_record(folder).dataset == "locomo" and len(read_queries(folder)) == 3


@pytest.mark.parametrize("damage,file", [
    (lambda f: (f / "metrics.json").write_text(""), "metrics.json"),
    (lambda f: (f / "metrics.json").write_text((f / "metrics.json").read_text()[:20]), "metrics.json"),
    (lambda f: (f / "queries.jsonl").write_text('{"split": "all"}\n{"bro'), "queries.jsonl"),
    (lambda f: (f / "config.yaml").unlink(), "config.yaml"),
])
def test_damaged_result_files_are_named(damage, file: str, tmp_path: Path) -> None:
    folder = _write(_folder(tmp_path))
    damage(folder)
    with pytest.raises(DamagedFileError, match=str(folder / file).replace(".", r"\.")):
        verify_run(folder)
    warnings: list[str] = []
    assert complete_runs(tmp_path, warn=warnings.append) == []  # tables skip it, with a warning naming the file
    assert len(warnings) == 1 and str(folder / file) in warnings[0]


def test_temporary_folders_are_never_runs_and_are_cleaned(tmp_path: Path) -> None:
    final = _folder(tmp_path)
    _write(final)
    # what a kill between the two renames of an overwrite leaves: both folders complete, the final one missing
    old = final.parent / f".{final.name}.old-12345678"
    final.rename(old)
    tmp = _write(final.parent / "scratch")
    tmp.rename(final.parent / f".{final.name}.tmp-87654321")
    assert complete_runs(tmp_path, warn=pytest.fail) == []
    done = recover(final)
    assert run_problem(final) is None and len(done) == 2
    assert sorted(p.name for p in final.parent.iterdir()) == [final.name]
    assert [r.folder for r in complete_runs(tmp_path, warn=pytest.fail)] == [final]


def test_a_damaged_temporary_folder_is_removed_not_promoted(tmp_path: Path) -> None:
    final = _folder(tmp_path)
    staged = _write(final.parent / "scratch")
    (staged / "metrics.json").write_text("{")
    staged.rename(final.parent / f".{final.name}.tmp-00000000")
    recover(final)
    assert not final.exists() and not list(final.parent.iterdir())


def test_runs_on_unverified_data_never_reach_a_table(tmp_path: Path) -> None:
    _write(_folder(tmp_path, "ok"))
    _write(_folder(tmp_path, "bad"), data_verified=False)
    warnings: list[str] = []
    runs = complete_runs(tmp_path, warn=warnings.append)
    assert [r.folder.name for r in runs] == ["ok"]
    assert "unverified data" in warnings[0] and LOCOMO_PIN in warnings[0]


def test_checksums_verified_mismatch_unpinned() -> None:
    good = FileProvenance("locomo/locomo10.json", LOCOMO_PIN, 1)
    bad = FileProvenance("locomo/locomo10.json", "0" * 64, 1)
    own = FileProvenance("locomo/mine.json", "1" * 64, 1)
    assert data_verified(check_files([good])) is True
    assert data_verified(check_files([good, own])) is None
    assert data_verified(check_files([bad, own])) is False
    with pytest.raises(UnverifiedDataError, match=r"/data/locomo/locomo10\.json: sha256 0{64} is not the pinned 79fa"):
        enforce([bad], "/data", allow_unverified=False)
    block = enforce([bad], "/data", allow_unverified=True)
    assert block["data_verified"] is False
    assert block["data_files"][0] | {} == {"path": "locomo/locomo10.json", "state": "mismatch", "actual": "0" * 64,
                                          "expected": LOCOMO_PIN, "note": "original LoCoMo (the papers' file)"}


def test_folder_source_pin_is_combined_from_its_files() -> None:
    from memrepro.datasets.catalogue import LOCAL_LAYOUT
    from memrepro.datasets.verify import _folder_pin, _pins

    pins = _pins(LOCAL_LAYOUT)
    assert _folder_pin("longmemeval/oracle_lme_jsons", pins) is not None
    assert _folder_pin("longmemeval/nothing_here", pins) is None


def _cfg(*extra: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=["dataset=locomo", "encoder=fake", "latency.batch1_queries=0",
                                                        "runtime.progress=false", "runtime.device=cpu", *extra])


@pytest.fixture()
def paths(fixture_paths: Path) -> Path:
    return fixture_paths


def test_run_on_an_unpinned_revision_is_refused_then_labelled(paths: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The fixture sits at LoCoMo's pinned path with other bytes: refused, then run with the flag and labelled."""
    with pytest.raises(UnverifiedDataError, match="dataset.allow_unverified=true"):
        runner.run(_cfg())
    with caplog.at_level(logging.WARNING, logger="memrepro"):
        outcome = runner.run(_cfg("dataset.allow_unverified=true"))
    assert "UNVERIFIED DATA" in caplog.text and LOCOMO_PIN in caplog.text
    metrics = outcome.metrics
    assert metrics["data_verified"] is False
    (check,) = metrics["provenance"]["data_files"]
    assert check["expected"] == LOCOMO_PIN and check["actual"] == metrics["provenance"]["files"][0]["sha256"]
    assert any("unverified data" in w for w in metrics["warnings"])
    assert complete_runs(paths / "results", warn=lambda message: None) == []
    # the flag changes no run id: the same folder as a run whose data needs no flag would have
    assert semantic_config(_cfg("dataset.allow_unverified=true")) == semantic_config(_cfg())


def test_locomo_session_gap_is_a_warning_in_the_summary(paths: Path, fixtures_dir: Path) -> None:
    data = json.loads((fixtures_dir / "locomo" / "locomo10_two_conversations.json").read_text())
    conversation = data[0]["conversation"]
    conversation["session_9"] = [{"speaker": "Melanie", "dia_id": "D9:1", "text": "late"}]
    target = paths / "data" / "locomo" / "gap.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(data))
    outcome = runner.run(_cfg(f"paths.data_dir={paths / 'data'}", "dataset.file=locomo/gap.json"))
    assert any("session_9" in w and "no list of turns" in w for w in outcome.metrics["warnings"])
    from memrepro.report import summary_table

    assert "WARNING: " in summary_table(outcome.record)


def test_tables_command_names_a_damaged_run_and_skips_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from memrepro.cli import tables

    folder = _write(_folder(tmp_path))
    (folder / "queries.jsonl").write_text('{"split": "all"}\n{"bro\n')
    hidden = _write(_folder(tmp_path, ".r1.old-12345678"))  # a commit's leftover, COMPLETE inside
    assert hidden.name.startswith(".")
    assert tables.main(["--results", str(tmp_path)]) == 1  # nothing left to render
    err = capsys.readouterr().err
    assert f"skipped {folder}: {folder / 'queries.jsonl'}" in err and ".old-" not in err
