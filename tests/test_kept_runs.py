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

from memrepro.checks import RunView, check_run
from memrepro.cli.check import findings_of
from memrepro.cli.keep import main as keep_main
from memrepro.errors import DamagedFileError
from memrepro.runs.folder import TREC, read_config, read_record, run_problem, trec_file
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
    assert kept.restore(original) == original
    trec = before.pop(TREC)
    assert _files(original) == before  # every file but run.trec, the manifest included
    assert run_problem(original) is None  # complete: run.trec is listed, and written when first asked for
    assert kept.restore(original) is None  # complete: nothing to do
    assert trec_file(original).read_bytes() == trec  # rebuilt from the rows, as the manifest records it
    assert _files(original) == {**before, TREC: trec}


def test_a_restored_run_trec_that_does_not_rebuild_is_refused(fixture_paths: Path, kept: KeptRuns) -> None:
    """run.trec is checked when it is written: rows that do not give the recorded file (here the folder renamed
    from its run id, which tags every line) raise naming it, and nothing is written."""
    original = run_locomo("dataset.seeds=[7]").folder
    kept.keep(original)
    shutil.rmtree(original)
    kept.restore(original)
    renamed = original.rename(original.parent / ("0" * 16))
    with pytest.raises(DamagedFileError, match="differs from the run.trec the manifest records"):
        trec_file(renamed)
    assert sorted(p.name for p in renamed.iterdir()) == ["COMPLETE", "config.yaml", "metrics.json", "queries.jsonl"]


def test_a_present_run_trec_is_verified_and_a_missing_one_only_where_it_is_written_on_demand(
        fixture_paths: Path) -> None:
    folder = run_locomo("dataset.seeds=[7]").folder
    (folder / TREC).write_bytes((folder / TREC).read_bytes()[:-10])
    assert "run.trec: differs from the run's manifest" in run_problem(folder)
    (folder / TREC).unlink()
    assert run_problem(folder) is None
    (folder / "metrics.json").unlink()
    assert "metrics.json: missing from a complete run" in run_problem(folder)


def test_a_restored_run_is_checked_from_its_files(fixture_paths: Path, kept: KeptRuns) -> None:
    """A run written before runs recorded their findings is checked from its files when it is skipped or restored
    (the fields the check reads, not every ranking); the findings are those of the whole rows."""
    original = run_locomo("dataset.seeds=[7]").folder
    kept.keep(original)
    shutil.rmtree(original)
    assert kept.restore(original) == original
    unrecorded = dataclasses.replace(read_record(original), findings=None)
    from_fields = findings_of(original, unrecorded)
    rows = [json.loads(line) for line in (original / "queries.jsonl").read_text().splitlines()]
    assert from_fields == check_run(RunView(read_config(original), unrecorded, rows, original)) and from_fields


def test_a_run_of_the_same_config_restores_instead_of_computing(fixture_paths: Path, kept: KeptRuns,
                                                                retrieved: list[str]) -> None:
    first = run_locomo("dataset.seeds=[7]")
    kept.keep(first.folder)
    before = _files(first.folder)
    shutil.rmtree(fixture_paths / "results")
    retrieved.clear()
    again = run_locomo("dataset.seeds=[7]")
    assert retrieved == []  # nothing retrieved, nothing timed
    assert again.folder == first.folder and not (again.folder / TREC).exists()  # written when first asked for
    trec_file(again.folder)
    assert _files(again.folder) == before


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
    with pytest.raises(DamagedFileError, match=f"metrics.json: records run {original.name}, not {other.name}"):
        kept.restore(other)
    assert not other.exists() and not list(other.parent.glob(".*tmp*"))


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
    assert _files(folder) == before  # run.trec included
    shutil.rmtree(folder)
    capsys.readouterr()
    assert keep_main(["--restore", str(folder), "--results", results, "--kept", store]) == 0  # that run only
    assert _files(folder) == before and "1 restored" in capsys.readouterr().out
    missing = folder.parent / ("f" * 16)
    assert keep_main(["--restore", str(missing), "--results", results, "--kept", store]) == 2
    assert f"{missing}: no kept copy" in capsys.readouterr().err
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
    assert _files(folder) == {name: data for name, data in before.items() if name != TREC}  # run.trec: on demand


def test_eval_of_a_restored_runs_run_trec_writes_it_first(fixture_paths: Path, kept: KeptRuns) -> None:
    """``eval run_file=<restored run folder>/run.trec``: the file is written on first use, then read."""
    from memrepro.runs.runfile import read_run_file

    original = run_locomo("dataset.seeds=[7]").folder
    trec = (original / TREC).read_bytes()
    kept.keep(original)
    shutil.rmtree(original)
    kept.restore(original)
    parsed = read_run_file(original / TREC)
    assert (original / TREC).read_bytes() == trec and parsed.format == "trec"
    assert sum(map(len, parsed.entries.values())) == trec.count(b"\n")
