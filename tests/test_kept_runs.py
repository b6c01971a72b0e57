"""Kept runs (memrepro.runs.kept, ``python -m memrepro keep``): a compressed copy of a complete run restores to the
same bytes, a run of the same config restores it instead of computing, a run over more seeds reuses it, and a
damaged or edited copy is refused with the kept file named, never turned into a different number."""

from __future__ import annotations

import dataclasses
import json
import lzma
import shutil
from pathlib import Path

import pytest

from memrepro.cli.check import findings_of
from memrepro.cli.keep import main as keep_main
from memrepro.errors import DamagedFileError
from memrepro.runs.folder import read_record
from memrepro.runs.kept import QUERIES_XZ, KeptRunError, KeptRuns
from tests.test_seed_reuse import run_locomo


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture()
def kept(fixture_paths: Path) -> KeptRuns:
    return KeptRuns(fixture_paths / "results", fixture_paths / "kept")


def test_a_kept_run_restores_byte_for_byte(fixture_paths: Path, kept: KeptRuns) -> None:
    original = run_locomo("dataset.seeds=[7,11]").folder
    copy = kept.keep(original)
    assert sorted(p.name for p in copy.iterdir()) == ["COMPLETE", "config.yaml", "metrics.json", QUERIES_XZ]
    assert not list(copy.parent.glob(".*"))  # no temporary folder left
    before = _files(original)
    shutil.rmtree(original)
    assert kept.restore(original) is not None
    assert _files(original) == before  # run.trec rebuilt from the rows, manifest and all
    assert kept.restore(original) is None  # complete: nothing to do


def test_the_rows_a_restore_parsed_check_the_run_as_its_files_do(fixture_paths: Path, kept: KeptRuns) -> None:
    """A run written before runs recorded their findings is checked from its files when it is skipped or restored;
    a restore hands over the rows it parsed, and the check of those is the check of the folder."""
    original = run_locomo("dataset.seeds=[7]").folder
    kept.keep(original)
    shutil.rmtree(original)
    restored = kept.restore(original)
    assert restored is not None and restored.folder == original
    assert restored.rows == [json.loads(line) for line in (original / "queries.jsonl").read_text().splitlines()]
    unrecorded = dataclasses.replace(read_record(original), findings=None)
    from_rows = findings_of(original, unrecorded, restored.rows)
    assert from_rows == findings_of(original, unrecorded) and from_rows  # the fixture's pools make findings


def test_a_run_of_the_same_config_restores_instead_of_computing(fixture_paths: Path, kept: KeptRuns,
                                                                retrieved: list[str]) -> None:
    first = run_locomo("dataset.seeds=[7]")
    kept.keep(first.folder)
    before = _files(first.folder)
    shutil.rmtree(fixture_paths / "results")
    retrieved.clear()
    again = run_locomo("dataset.seeds=[7]")
    assert retrieved == []  # nothing retrieved, nothing timed
    assert again.folder == first.folder and _files(again.folder) == before


def test_a_multi_seed_run_reuses_a_kept_seed_run(fixture_paths: Path, kept: KeptRuns, retrieved: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    seven = run_locomo("dataset.seeds=[7]")
    kept.keep(seven.folder)
    shutil.rmtree(fixture_paths / "results")
    retrieved.clear()
    composed = run_locomo("dataset.seeds=[7,11]")
    reused = seven.metrics["counts"]["n_total"]
    assert composed.metrics["timings"]["reused_queries"] == reused
    assert len(retrieved) == composed.metrics["counts"]["n_total"] - reused + 2  # split 11, then 2 batch-1 calls

    monkeypatch.setenv("MEMREPRO_RESULTS_DIR", str(fixture_paths / "clean"))
    monkeypatch.setenv("MEMREPRO_KEPT_DIR", str(fixture_paths / "nothing_kept"))
    clean = run_locomo("dataset.seeds=[7,11]")
    assert composed.metrics["summary"] == clean.metrics["summary"]


@pytest.mark.parametrize("damage", ["edited_rows", "truncated_xz", "edited_metrics", "missing_config"])
def test_a_damaged_copy_is_refused_naming_the_kept_file(fixture_paths: Path, kept: KeptRuns, damage: str) -> None:
    original = run_locomo("dataset.seeds=[7]").folder
    copy = kept.keep(original)
    shutil.rmtree(original)
    named = {"edited_rows": copy / QUERIES_XZ, "truncated_xz": copy / QUERIES_XZ,
             "edited_metrics": copy / "metrics.json", "missing_config": copy / "config.yaml"}[damage]
    if damage == "edited_rows":  # a valid archive whose rows say something else: one gold rank moved
        rows = [json.loads(line) for line in lzma.decompress((copy / QUERIES_XZ).read_bytes()).splitlines()]
        gold = next(iter(rows[0]["gold_ranks"]))
        rows[0]["gold_ranks"][gold] = (rows[0]["gold_ranks"][gold] or 0) + 1
        (copy / QUERIES_XZ).write_bytes(lzma.compress("".join(json.dumps(r, separators=(",", ":")) + "\n"
                                                              for r in rows).encode()))
    elif damage == "truncated_xz":
        data = (copy / QUERIES_XZ).read_bytes()
        (copy / QUERIES_XZ).write_bytes(data[: len(data) // 2])
    elif damage == "edited_metrics":
        (copy / "metrics.json").write_text((copy / "metrics.json").read_text().replace('"mrr"', '"mrr" ', 1))
    else:
        (copy / "config.yaml").unlink()
    with pytest.raises(DamagedFileError) as caught:
        kept.restore(original)
    assert str(named) in str(caught.value)
    assert not original.exists() and not list(original.parent.glob(".*tmp*"))  # nothing written


def test_a_temporary_folder_left_by_a_killed_keep_is_not_a_kept_run(fixture_paths: Path, kept: KeptRuns) -> None:
    original = run_locomo("dataset.seeds=[7]").folder
    copy = kept.keep(original)
    # what a keep killed after writing COMPLETE but before the rename leaves beside the copy
    shutil.copytree(copy, copy.parent / f".{copy.name}.tmp-deadbeef")
    assert kept.all() == [copy]
    shutil.rmtree(original)
    assert kept.restore_all() == ([original], [])  # no spurious "damaged" line for the temporary folder
    assert sorted(p.name for p in original.parent.iterdir()) == [original.name]


def test_a_copy_moved_to_another_run_id_is_refused(fixture_paths: Path, kept: KeptRuns) -> None:
    original = run_locomo("dataset.seeds=[7]").folder
    copy = kept.keep(original)
    other = original.parent / ("0" * 16)
    shutil.move(copy, copy.parent / other.name)
    with pytest.raises(DamagedFileError, match="run.trec"):
        kept.restore(other)
    assert not other.exists()


def test_a_run_with_a_damaged_copy_is_recomputed_with_a_warning(fixture_paths: Path, kept: KeptRuns,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    first = run_locomo("dataset.seeds=[7]")
    copy = kept.keep(first.folder)
    before = json.loads((first.folder / "metrics.json").read_text())["summary"]
    shutil.rmtree(fixture_paths / "results")
    (copy / "metrics.json").write_text("{}")
    with caplog.at_level("WARNING", logger="memrepro"):
        again = run_locomo("dataset.seeds=[7]")
    assert str(copy / "metrics.json") in caplog.text and "recomputed" in caplog.text
    assert again.metrics["summary"] == before


def test_only_complete_runs_under_results_runs_are_kept(fixture_paths: Path, kept: KeptRuns) -> None:
    folder = run_locomo("dataset.seeds=[7]").folder
    elsewhere = shutil.copytree(folder, fixture_paths / "elsewhere" / folder.name)
    with pytest.raises(KeptRunError, match="not a run folder under"):
        kept.keep(elsewhere)
    (folder / "COMPLETE").unlink()
    with pytest.raises(KeptRunError, match="not a complete run"):
        kept.keep(folder)
    assert not (fixture_paths / "kept").exists()


def test_keep_command_keeps_lists_and_restores(fixture_paths: Path, capsys: pytest.CaptureFixture) -> None:
    folder = run_locomo("dataset.seeds=[7]").folder
    results, store = str(fixture_paths / "results"), str(fixture_paths / "kept")
    assert keep_main([str(folder), "--results", results, "--kept", store]) == 0
    before = _files(folder)
    shutil.rmtree(folder)
    assert keep_main(["--list", "--results", results, "--kept", store]) == 0
    assert "not in" in capsys.readouterr().out
    assert keep_main(["--restore", "--results", results, "--kept", store]) == 0
    assert _files(folder) == before
    assert keep_main([str(fixture_paths / "no_such_run"), "--results", results, "--kept", store]) == 2
    assert "not a complete run" in capsys.readouterr().err


def test_tables_restores_kept_runs_before_reading(fixture_paths: Path, kept: KeptRuns,
                                                  capsys: pytest.CaptureFixture) -> None:
    from memrepro.cli import tables

    folder = run_locomo("dataset.seeds=[7]").folder
    kept.keep(folder)
    before = _files(folder)
    shutil.rmtree(folder)
    tables.main(["--results", str(fixture_paths / "results"), "--kept", str(fixture_paths / "kept"),
                 "--resamples", "10"])
    err = capsys.readouterr().err
    assert "memrepro: restored 1 kept run into " in err and str(folder) not in err  # one line, however many
    assert _files(folder) == before
