"""Storage and data edge cases whose outcome must also have the right form: one line naming what and where (and
the fix), the right exit code, and nothing of the user's lost (statistics from a file that failed its checksum,
files memrepro did not write in a run folder, temporary folders and files a kill leaves, duplicate query ids)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from memrepro import runner
from memrepro.cli.data import main as data_main
from memrepro.cli.failures import Terminated
from memrepro.cli.keep import main as keep_main
from memrepro.datasets.download import check
from memrepro.datasets.catalogue import catalogue
from memrepro.errors import DataError
from memrepro.runs.folder import run_problem
from tests.test_personabench import COMMUNITY, edit_json, fixture_copy, load_fixture  # noqa: F401 (fixture)
from tests.test_resume import _cfg, paths  # noqa: F401 (fixture)
from tests.test_trust import _folder, _write

KILLED_LONG_AGO = time.time() - 24 * 3600  # far beyond any live write


def _age(path: Path) -> None:
    """Make ``path`` (and what it holds) look untouched since long before any live process started."""
    for item in [*path.rglob("*"), path]:
        os.utime(item, (KILLED_LONG_AGO, KILLED_LONG_AGO), follow_symlinks=False)


def _err_lines(capsys: pytest.CaptureFixture) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_stats_from_a_file_that_fails_its_checksum_are_not_written(fixtures_dir: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "data"
    (root / "locomo").mkdir(parents=True)
    shutil.copy(fixtures_dir / "locomo" / "locomo10.json", root / "locomo" / "locomo10.json")  # not the pinned file
    assert [s.state for s in check(catalogue(["locomo"]), root) if s.entry.path == "locomo/locomo10.json"] == [
        "mismatch"]
    stats = tmp_path / "stats"
    stats.mkdir()
    (stats / "locomo.json").write_text('{"previous": true}\n')
    capsys.readouterr()
    code = data_main(["check", "--stats", "--benchmark", "locomo", "--data-dir", str(root), "--stats-dir",
                      str(stats)])
    err = _err_lines(capsys)
    assert code == 2
    assert (stats / "locomo.json").read_text() == '{"previous": true}\n'  # untouched
    assert sorted(p.name for p in stats.iterdir()) == ["locomo.json"]  # no temporary file either
    assert len(err) == 1 and str(root / "locomo" / "locomo10.json") in err[0]
    assert "not the pinned" in err[0] and "not written" in err[0] and "data download" in err[0]


def test_overwrite_keeps_files_memrepro_did_not_write(paths: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = runner.run(_cfg()).folder
    (folder / "notes.txt").write_text("why this run matters\n")
    with caplog.at_level("WARNING", logger="memrepro"):
        again = runner.run(_cfg("overwrite=true"))
    assert again.folder == folder and run_problem(folder) is None  # the recomputed run, verified
    assert (folder / "notes.txt").read_text() == "why this run matters\n"
    said = [r.getMessage() for r in caplog.records if "notes.txt" in r.getMessage()]
    assert len(said) == 1 and str(folder) in said[0]
    assert not [p for p in folder.parent.glob(f".{folder.name}.*") if ".old-" in p.name or ".tmp-" in p.name]


def test_a_file_at_a_run_path_is_moved_aside_and_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    final = _folder(tmp_path)
    final.parent.mkdir(parents=True)
    final.write_text("a user's file\n")
    with caplog.at_level("WARNING", logger="memrepro"):
        _write(final)
    assert final.is_dir() and run_problem(final) is None
    moved = [p for p in final.parent.iterdir() if p != final]
    assert len(moved) == 1 and not moved[0].name.startswith(".")  # visible, not hidden among temporary names
    assert moved[0].read_text() == "a user's file\n"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and str(final) in said[0] and str(moved[0]) in said[0]


@pytest.mark.parametrize("command", ["keep --restore", "tables"])
def test_a_killed_keeps_temporary_folder_is_removed_by_the_next_command(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture) -> None:
    from memrepro.cli import tables

    results, kept = tmp_path / "results", tmp_path / "kept"
    store = kept / "locomo" / "dense" / "fake"
    stale, live = store / ".0123456789abcdef.tmp-deadbeef", store / ".fedcba9876543210.tmp-cafebabe"
    for folder in (stale, live):  # what a keep killed while writing leaves
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text("retriever:\n  name: dense\n")
    _age(stale)
    mine = store / ".notes"  # dot-named, but not a temporary name memrepro makes
    mine.write_text("mine\n")
    _age(mine)
    with caplog.at_level("WARNING", logger="memrepro"):
        if command == "tables":
            tables.main(["--results", str(results), "--kept", str(kept), "--resamples", "10"])
        else:
            assert keep_main(["--restore", "--results", str(results), "--kept", str(kept)]) == 0
    said = [line for line in _err_lines(capsys) + caplog.text.splitlines() if stale.name in line]
    assert not stale.exists() and len(said) == 1 and str(store) in said[0]
    assert live.is_dir() and mine.is_file()  # a folder a process may still be writing, and a user's file: kept


def test_a_runs_temporary_folders_left_by_kills_are_finished_or_removed(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    results, kept = tmp_path / "results", tmp_path / "kept"
    finished = _folder(results, "r1")  # killed between writing COMPLETE and the rename: the run is whole
    _write(finished).rename(finished.parent / f".{finished.name}.tmp-12345678")
    half = finished.parent / ".r2.tmp-87654321"  # killed while writing its files
    half.mkdir()
    (half / "config.yaml").write_text("retriever:\n  name: dense\n")
    for leftover in finished.parent.iterdir():
        _age(leftover)
    assert keep_main(["--restore", "--results", str(results), "--kept", str(kept)]) == 0
    err = _err_lines(capsys)
    assert run_problem(finished) is None  # the interrupted commit, completed
    assert sorted(p.name for p in finished.parent.iterdir()) == ["r1"]
    assert any("completed the interrupted commit" in line and "r1" in line for line in err)
    assert sum(half.name in line for line in err) == 1


def test_sigterm_during_a_training_checkpoint_write_leaves_no_temporary_file(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from memrepro.training import state
    from memrepro.training.state import PARTIAL, load_state, save_state

    partial = tmp_path / f"seed7{PARTIAL}"
    save_state(partial, {"identity": "x", "done": 3})

    def terminated_mid_write(fd: int) -> None:  # the new state's bytes are written, not yet on disk
        raise Terminated()

    monkeypatch.setattr(state.os, "fsync", terminated_mid_write)
    with pytest.raises(Terminated):
        save_state(partial, {"identity": "x", "done": 4})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [partial.name]  # no .seed7.partial.pt.tmp-* beside it
    assert load_state(partial, "x")["done"] == 3  # the last whole state


def test_a_duplicate_query_id_names_file_record_and_field(fixture_copy: Path) -> None:  # noqa: F811
    eval_file = fixture_copy / COMMUNITY / "eval_info" / "eval_info_all.json"
    edit_json(eval_file, lambda people: people[0]["Eval_Info"]["qa"].append(dict(people[0]["Eval_Info"]["qa"][0])))
    q_id = json.loads(eval_file.read_text())[0]["Eval_Info"]["qa"][0]["q_id"]
    with pytest.raises(DataError) as caught:
        load_fixture(fixture_copy)
    assert (caught.value.file, caught.value.record, caught.value.field) == (str(eval_file), q_id, "q_id")
    assert "duplicate query id" in str(caught.value) and "qa[0]" in str(caught.value)
    assert str(eval_file) in str(caught.value).splitlines()[0]
