"""A run folder is read only when its ``COMPLETE`` marker is a manifest and every file it lists verifies: a marker
emptied, garbled or written by hand makes the folder incomplete, named, wherever it is read (run, compare,
tables, report, keep), and ``run`` recomputes it, keeping a user's own files. The committed kept runs verify and
restore under their ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from memrepro.compare import CompareError, load_run
from memrepro.errors import DamagedFileError
from memrepro.provenance import config_hash
from memrepro.runs.folder import COMPLETE, read_manifest, run_problem
from memrepro.runs.identity import run_id_payload
from memrepro.runs.kept import KeptRunError, KeptRuns, read_kept_file
from memrepro.runs.record import ENCODER_RECORD_ONLY, RunRecord
from memrepro.tables.report import kept_runs_table
from memrepro.tables.runs import complete_runs
from tests.test_seed_reuse import run_locomo

REPO = Path(__file__).resolve().parents[1]


def _without_metrics(folder: Path) -> str:
    manifest = json.loads((folder / COMPLETE).read_text())
    del manifest["files"]["metrics.json"]
    return json.dumps(manifest)


MARKERS = {
    "garbage": lambda folder: "garbage\n",
    "empty": lambda folder: "",
    "empty object": lambda folder: "{}",
    "no files": lambda folder: json.dumps({"format": 1, "files": {}, "rows": 0}),
    "a list": lambda folder: "[1, 2]",
    "another format": lambda folder: (folder / COMPLETE).read_text().replace('"format": 1', '"format": 0'),
    "metrics.json not listed": _without_metrics,
    "not UTF-8": lambda folder: "\udcff",
}


def _edit_metric(folder: Path) -> None:
    """What a hand edit does: one pooled number changed (0.3783 -> 0.9783 in a user's report)."""
    document = json.loads((folder / "metrics.json").read_text())
    document["summary"]["pooled"]["mrr"] = 0.9783
    (folder / "metrics.json").write_text(json.dumps(document))


def _damage(folder: Path, marker: str) -> None:
    text = MARKERS[marker](folder)
    (folder / COMPLETE).write_bytes(text.encode("utf-8", "surrogateescape"))
    _edit_metric(folder)


@pytest.mark.parametrize("marker", MARKERS)
def test_a_marker_that_is_not_a_manifest_makes_the_folder_incomplete(fixture_paths: Path, marker: str) -> None:
    folder = run_locomo("dataset.seeds=[7]").folder
    assert run_problem(folder) is None
    _damage(folder, marker)
    problem = run_problem(folder)
    assert problem is not None and problem.startswith(str(folder / COMPLETE)) and "incomplete" in problem
    with pytest.raises(DamagedFileError, match="COMPLETE"):
        read_manifest(folder)


def test_run_recomputes_a_folder_with_a_damaged_marker_and_keeps_the_users_files(
        fixture_paths: Path, caplog: pytest.LogCaptureFixture) -> None:
    first = run_locomo("dataset.seeds=[7]")
    clean = first.record.summary.pooled["mrr"]
    _damage(first.folder, "garbage")
    (first.folder / "notes.md").write_text("my notes\n")
    with caplog.at_level("WARNING", logger="memrepro"):
        again = run_locomo("dataset.seeds=[7]")
    assert not again.skipped and again.folder == first.folder
    assert again.record.summary.pooled["mrr"] == clean != 0.9783
    assert f"{first.folder / COMPLETE}: not a run manifest" in caplog.text and "recomputed" in caplog.text
    assert (first.folder / "notes.md").read_text() == "my notes\n" and run_problem(first.folder) is None


def test_a_damaged_marker_is_restored_from_the_kept_copy(fixture_paths: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    kept = KeptRuns(fixture_paths / "results", fixture_paths / "kept")
    first = run_locomo("dataset.seeds=[7]")
    kept.keep(first.folder)
    clean = (first.folder / "metrics.json").read_bytes()
    _damage(first.folder, "empty object")
    with caplog.at_level("WARNING", logger="memrepro"):
        again = run_locomo("dataset.seeds=[7]")
    assert again.restored and (first.folder / "metrics.json").read_bytes() == clean
    assert "restored from its kept copy" in caplog.text


def test_compare_tables_report_and_keep_refuse_a_damaged_marker(fixture_paths: Path) -> None:
    results = fixture_paths / "results"
    kept = KeptRuns(results, fixture_paths / "kept")
    folder = run_locomo("dataset.seeds=[7]").folder
    copy = kept.keep(folder)
    _damage(folder, "empty")
    with pytest.raises(CompareError, match=f"{folder / COMPLETE}: not a run manifest"):
        load_run(folder)
    warnings: list[str] = []
    assert complete_runs(results, warn=warnings.append) == []
    assert len(warnings) == 1 and str(folder / COMPLETE) in warnings[0]
    with pytest.raises(KeptRunError, match=f"{folder / COMPLETE}: not a run manifest"):
        kept.keep(folder)
    assert len(kept_runs_table(fixture_paths / "kept")) == 1
    (copy / COMPLETE).write_text("{}")  # the kept copy's marker: never read as a manifest either
    assert kept_runs_table(fixture_paths / "kept").empty
    with pytest.raises(DamagedFileError, match=f"{copy / COMPLETE}: not a run manifest"):
        kept.restore(folder)


def test_the_report_leaves_out_a_kept_run_whose_record_was_edited(fixture_paths: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    kept = KeptRuns(fixture_paths / "results", fixture_paths / "kept")
    copy = kept.keep(run_locomo("dataset.seeds=[7]").folder)
    _edit_metric(copy)
    assert kept_runs_table(fixture_paths / "kept").empty
    said = capsys.readouterr().err
    assert f"{copy / 'metrics.json'}: does not hold the metrics.json the kept manifest records" in said


@pytest.mark.integration
def test_the_cli_recomputes_instead_of_printing_an_edited_number(tmp_path: Path, fixtures_dir: Path) -> None:
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(fixtures_dir), "MEMREPRO_RESULTS_DIR": str(tmp_path / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp_path / "cache"), "MEMREPRO_LOG_DIR": str(tmp_path / "logs"),
           "MEMREPRO_KEPT_DIR": str(tmp_path / "kept"), "TQDM_DISABLE": "1"}
    command = [sys.executable, "-m", "memrepro", "run", "dataset=locomo",
               "dataset.file=locomo/locomo10_two_conversations.json", "dataset.seeds=[7]", "encoder=fake",
               "retriever=dense", "latency.batch1_queries=0", "runtime.progress=false", "runtime.device=cpu"]
    first = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    (folder,) = [p.parent for p in (tmp_path / "results").rglob(COMPLETE)]
    _damage(folder, "garbage")
    again = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "skipped (already complete)" not in again.stdout and "0.9783" not in again.stdout
    assert f"{folder / COMPLETE}: not a run manifest" in again.stdout + again.stderr and run_problem(folder) is None
    compare = subprocess.run([sys.executable, "-m", "memrepro", "compare", str(folder), str(folder)],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert compare.returncode == 0, compare.stderr[-2000:]


# --------------------------------------------------------------------------------------- the committed kept runs


def _kept_copies() -> list[Path]:
    return KeptRuns(REPO / "results", REPO / "results" / "kept").all()


def test_every_committed_kept_run_verifies_under_its_id() -> None:
    """Its config.yaml and metrics.json match the kept manifest, and its id is what today's code computes for
    its config, data and encoder (so ``run`` finds it instead of recomputing)."""
    copies = _kept_copies()
    assert copies, "no kept runs under results/kept"
    wrong = []
    for copy in copies:
        record = RunRecord.from_json(json.loads(read_kept_file(copy, "metrics.json")), copy / "metrics.json")
        config = yaml.safe_load(read_kept_file(copy, "config.yaml"))
        if record.provenance.run_file is not None:  # a scored run file: its id hashes the file, not a config
            continue
        encoder = {key: value for key, value in record.encoder.items() if key not in ENCODER_RECORD_ONLY}
        if config_hash(run_id_payload(config, record.provenance.data_sha256, encoder)) != copy.name:
            wrong.append(str(copy.relative_to(REPO)))
    assert wrong == []


@pytest.mark.slow
def test_every_committed_kept_run_restores_byte_for_byte(tmp_path: Path) -> None:
    """Each file as its manifest records it, run.trec included (written from the rows, as on first use)."""
    kept = KeptRuns(tmp_path / "results", REPO / "results" / "kept")
    restored, problems = kept.restore_all(trec=True)
    assert problems == [] and len(restored) == len(_kept_copies())
    assert [run_problem(folder) for folder in restored if run_problem(folder)] == []
    assert [folder for folder in restored if not (folder / "run.trec").is_file()] == []
