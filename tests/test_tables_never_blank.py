"""``tables`` never replaces a committed number with "—": absent runs keep their committed cells, marked ‡, and a
fresh clone (only the kept runs) re-renders every committed table, figure index, report and README block byte
for byte."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from memrepro.errors import DamagedFileError
from memrepro.tables import committed
from memrepro.tables.render import write_table
from memrepro.tables.rfmem_figures import write_index

REPO = Path(__file__).resolve().parents[1]


def _table(rows: list[list[str]], columns=("method", "MRR", "R@10")) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(columns))


def test_an_absent_cell_keeps_its_committed_value_marked_and_present_cells_are_re_rendered(tmp_path: Path) -> None:
    write_table(_table([["dense", "0.3254", "0.5345"], ["v1", "0.5285", "0.7431"]]), tmp_path, "t", "T")
    write_table(_table([["dense", "—", "—"], ["v1", "0.5283", "0.7437"]]), tmp_path, "t", "T", keep_committed=True)
    csv = pd.read_csv(tmp_path / "t.csv", dtype=str, keep_default_na=False)
    assert csv.values.tolist() == [["dense", "0.3254 ‡", "0.5345 ‡"], ["v1", "0.5283", "0.7437"]]
    text = (tmp_path / "t.md").read_text(encoding="utf-8")
    assert "‡ 2 cells not re-rendered" in text and "—" not in text
    assert r"$\ddagger$" in (tmp_path / "t.tex").read_text(encoding="utf-8")


def test_a_committed_note_is_superseded_by_the_new_note_on_its_subject(tmp_path: Path) -> None:
    """One more engine pair (a local run beside the kept ones): the engine's summary line is the current one only,
    while a note on a subject the new rendering no longer covers (a retired engine's kept rows) stays, marked."""
    columns = ("engine", "settings", "speed-up")
    write_table(_table([["compiled", "a", "50.1x"], ["batched", "b", "6.0x"]], columns), tmp_path, "e", "E",
                notes=["compiled: 1 pairs: speed-up 50.1x", "batched: 1 pairs: speed-up 6.0x"])
    write_table(_table([["compiled", "a", "50.1x"], ["compiled", "c", "40.0x"], ["batched", "b", "—"]], columns),
                tmp_path, "e", "E", notes=["compiled: 2 pairs: speed-up 45.0x"], keep_committed=True)
    notes = committed.read_committed_notes(tmp_path / "e.md")
    assert notes[:2] == ["compiled: 2 pairs: speed-up 45.0x", "batched: 1 pairs: speed-up 6.0x ‡"]
    assert not [note for note in notes if note.startswith("compiled: 1 pairs")]


def test_a_row_or_note_the_new_rendering_drops_is_kept_and_a_rerender_is_byte_identical(tmp_path: Path) -> None:
    write_table(_table([["dense", "0.3254", "0.5345"], ["cascade", "0.5579", "0.7431"]]), tmp_path, "t", "T",
                notes=["legend", "Cost cascade / v1: 2.40×"])
    first = _table([["dense", "0.3254", "0.5345"]])
    write_table(first, tmp_path, "t", "T", notes=["legend"], keep_committed=True)
    once = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert b"cascade,0.5579 \xe2\x80\xa1" in once["t.csv"] and b"Cost cascade / v1: 2.40\xc3\x97 \xe2\x80\xa1" in once["t.md"]
    write_table(first, tmp_path, "t", "T", notes=["legend"], keep_committed=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == once


def test_a_kept_cell_computed_again_says_its_earlier_value_and_how_far_it_moved(tmp_path: Path) -> None:
    """A marked cell whose run is computed again with another result: the ledger keeps the earlier value (written
    before the table), every later rendering says it under the table with the move, and stays byte-identical;
    a cell computed again to the same value, and a text cell, are not listed."""
    write_table(_table([["dense", "0.3254", "0.5345"], ["v1", "0.5285 ± 0.0100 *", "0.7431"]]), tmp_path, "t", "T")
    write_table(_table([["dense", "0.3254", "0.5345"], ["v1", "—", "—"]]), tmp_path, "t", "T", keep_committed=True)
    again = _table([["dense", "0.3254", "0.5345"], ["v1", "0.5263 ± 0.0120 * [S]", "0.7431 [F,S]"]])
    write_table(again, tmp_path, "t", "T", keep_committed=True)
    ledger = pd.read_csv(tmp_path / committed.LEDGER, dtype=str, keep_default_na=False)
    assert ledger.values.tolist() == [["t", "v1", "MRR", "0.5285 ± 0.0100 *"]]  # R@10 came out the same, tagged
    notes = committed.read_committed_notes(tmp_path / "t.md")
    assert notes[0] == "recomputed v1: MRR 0.5285 ± 0.0100 * → 0.5263 ± 0.0120 * (−0.0022)"
    assert notes[1].startswith("recomputed: cells whose earlier committed value came from runs that were not kept")
    assert "‡" not in (tmp_path / "t.md").read_text(encoding="utf-8")
    once = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    write_table(again, tmp_path, "t", "T", keep_committed=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == once
    (tmp_path / "t.csv").unlink()  # no committed table to match rows against: the notes stay
    write_table(again, tmp_path, "t", "T", keep_committed=True)
    assert committed.read_committed_notes(tmp_path / "t.md")[:2] == notes[:2]


def test_a_damaged_ledger_of_recomputed_cells_is_refused_with_its_path(tmp_path: Path) -> None:
    write_table(_table([["dense", "0.3254", "0.5345"]]), tmp_path, "t", "T")
    (tmp_path / committed.LEDGER).write_text("what,is,this\n1,2,3\n", encoding="utf-8")
    with pytest.raises(DamagedFileError, match="recomputed.csv: expected the columns table, row, column, earlier"):
        write_table(_table([["dense", "0.3254", "0.5345"]]), tmp_path, "t", "T", keep_committed=True)


@pytest.mark.parametrize("damage", [b"", b"\xff\xfe not UTF-8\n", b'method,MRR\n"dense,0.3254\n'])
def test_an_unreadable_committed_table_is_refused_naming_it_and_left_as_it_is(tmp_path: Path, damage: bytes) -> None:
    from memrepro.errors import DamagedFileError

    (tmp_path / "t.csv").write_bytes(damage)
    with pytest.raises(DamagedFileError, match="t.csv: the committed table cannot be read.*git checkout"):
        write_table(_table([["dense", "—", "—"]]), tmp_path, "t", "T", keep_committed=True)
    assert (tmp_path / "t.csv").read_bytes() == damage and not (tmp_path / "t.md").exists()


def test_a_table_whose_runs_are_all_present_is_written_as_rendered(tmp_path: Path) -> None:
    write_table(_table([["dense", "0.3254 ‡", "0.5345 ‡"]]), tmp_path, "t", "T")
    write_table(_table([["dense", "0.3250", "0.5300"]]), tmp_path, "t", "T", keep_committed=True)
    assert (tmp_path / "t.csv").read_text(encoding="utf-8") == "method,MRR,R@10\ndense,0.3250,0.5300\n"
    assert committed.MARK not in (tmp_path / "t.md").read_text(encoding="utf-8")


def test_a_figure_that_cannot_be_drawn_keeps_its_committed_index_line_while_its_files_exist(tmp_path: Path) -> None:
    (tmp_path / "f.png").write_bytes(b"png")
    write_index(["- **Figure 14**: [f.png](f.png) — note"], tmp_path)
    write_index(["- **Figure 14**: not drawn — the frame is empty"], tmp_path)
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "[f.png](f.png) — note ‡ not redrawn" in text and "not drawn" not in text.split("not redrawn")[0]
    (tmp_path / "f.png").unlink()  # no committed file any more: the index says so instead of linking nothing
    write_index(["- **Figure 14**: not drawn — the frame is empty"], tmp_path)
    assert "not drawn — the frame is empty" in (tmp_path / "README.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_tables_on_a_fresh_clone_re_renders_every_committed_file_byte_for_byte(tmp_path: Path) -> None:
    """What a fresh clone has: the committed tables, figures, report and README, and the kept runs, no other run."""
    results = tmp_path / "results"
    for name in ("tables", "figures"):
        shutil.copytree(REPO / "results" / name, results / name)
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copy(REPO / "docs" / "reproduction.md", tmp_path / "reproduction.md")
    # run from the clone's root with the relative folder, as a user does: the figures' captions name it
    done = subprocess.run([sys.executable, "-m", "memrepro", "tables", "--results", "results",
                           "--kept", str(REPO / "results" / "kept"), "--report", str(tmp_path / "reproduction.md"),
                           "--readme", str(tmp_path / "README.md")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    changed = [f"results/{name}/{p.name}" for name in ("tables", "figures")
               for p in sorted((REPO / "results" / name).iterdir())
               if p.is_file() and (results / name / p.name).read_bytes() != p.read_bytes()]
    changed += [name for name, ours in (("README.md", REPO / "README.md"),
                                        ("docs/reproduction.md", REPO / "docs" / "reproduction.md"))
                if (tmp_path / Path(name).name).read_bytes() != ours.read_bytes()]
    assert changed == [], f"`tables` on a fresh clone changed {changed}; run `python -m memrepro tables` and commit"
    assert "—" not in (results / "tables" / "rfmem_table2.csv").read_text(encoding="utf-8").split("BAAI")[0]


def test_the_reproduction_matrix_notes_a_recomputed_cell(tmp_path: Path) -> None:
    """The matrix (written by its own merge) keeps the earlier value of a ‡ cell computed again, as the tables do."""
    from memrepro.cli.tables import render_matrix
    from memrepro.tables.reproduction import Cell

    def cells(mrr: float | None) -> list[Cell]:
        return [Cell("t", "cascade", "MRR", mrr, 0.6560, "not comparable: our CE"),
                Cell("t", "cascade", "H@1", 0.3385, 0.5474, "not comparable: our CE")]

    render_matrix(cells(0.4921), tmp_path)
    render_matrix(cells(None), tmp_path)
    assert "0.4921 ‡" in (tmp_path / "reproduction_matrix.csv").read_text(encoding="utf-8")
    render_matrix(cells(0.4927), tmp_path)
    notes = committed.read_committed_notes(tmp_path / "reproduction_matrix.md")
    assert "recomputed t · cascade · MRR: ours 0.4921 → 0.4927 (+0.0006); |Δ| 0.1639 → 0.1633 (−0.0006)" in notes
