"""Cells whose runs are absent keep their committed value: ``tables`` never replaces a number with "—".

A rendered table is a frame of display strings. Where the new rendering has nothing for a cell ("—", "not run",
"missing", empty: its run is not in ``results/runs``) but the table already on disk has a value, that value is
kept and marked with :data:`MARK`; every other cell is the new rendering. Rows are matched by their key (the
shortest run of leading columns that names each row once), so a row or column that the new rendering drops is
kept too. A table with no kept cell is written exactly as rendered.

This is what lets a fresh clone, which has only the kept runs (``results/kept``), re-render the committed tables
byte for byte: the cells it can compute come out the same, and the others are the committed ones, already marked.

When a marked cell's run is computed again, the new value replaces it; where it differs (training on a CPU is not
bit-reproducible), the earlier value is written to the ledger ``results/tables/recomputed.csv`` (before the table)
and every later rendering says in a note under the table what the cell held before and how far it moved.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from memrepro.errors import DamagedFileError, one_line
from memrepro.files import write_text_atomic

MARK = "‡"
ABSENT = frozenset({"", "—", "-", "nan", "none", "not run", "missing", "missing: not run"})


def note(kept: int) -> str:
    """The table note that explains the mark (the same text for the same count, so a re-render is stable)."""
    return (f"{MARK} {kept} cell{'s' if kept != 1 else ''} not re-rendered: their runs are not in results/runs, so "
            f"the committed values are kept (`python -m memrepro experiments` computes the runs).")


def is_absent(value: object) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    return unmarked(str(value)).strip().lower() in ABSENT


def unmarked(text: str) -> str:
    return text[:-len(MARK)].rstrip() if text.endswith(MARK) else text


def marked(text: str) -> str:
    return text if text.endswith(MARK) else f"{text} {MARK}"


LEDGER = "recomputed.csv"  # beside the tables: the earlier values of marked cells computed again
LEDGER_COLUMNS = ["table", "row", "column", "earlier"]
ROW_JOIN = " · "  # a row's key cells joined, as the ledger names the row
_NUMBER = re.compile(r"^[-+−]?\d+(?:\.\d+)?")
_TAGS = re.compile(r"\s\[[A-Z](?:,[A-Z])*\]$")  # the protocol check's tags after a number (memrepro.checks.tags)


@dataclass(frozen=True)
class Recomputed:
    """A marked cell whose run was computed again with a different result: the value it held before."""

    table: str
    row: str  # the row's key cells, joined by " · "
    column: str
    earlier: str


def _value(text: str) -> str:
    """A cell's value: without the ‡ mark and the protocol check's tags (a committed cell may predate them)."""
    return _TAGS.sub("", unmarked(str(text)))


def _move(earlier: str, now: str) -> str:
    """`` (−0.0022)``: how far the leading number moved, at the earlier value's decimals; ``""`` when it did not
    (a confidence interval that moved shows in the two texts)."""
    before, after = _number(earlier), _number(now)
    if before is None or after is None:
        return ""
    decimals = len(_NUMBER.match(earlier.strip()).group().partition(".")[2])
    move = round(after - before, decimals)
    return f" ({move:+.{decimals}f})".replace("-", "−") if move else ""


def _number(text: str) -> float | None:
    found = _NUMBER.match(text.strip())
    return float(found.group().replace("−", "-")) if found else None


@dataclass
class Merged:
    frame: pd.DataFrame
    kept: int = 0  # cells taken from the committed table (marked)
    origin: list[int | None] = field(default_factory=list)  # per row: its row in the new rendering, if any
    key: list[str] = field(default_factory=list)  # the columns that name a row
    recomputed: list[tuple[str, str, str]] = field(default_factory=list)  # (row, column, earlier value)

    def bold(self, new_bold: pd.DataFrame | None) -> pd.DataFrame | None:
        """The new rendering's bold flags moved to the merged rows (kept cells are never bold)."""
        if new_bold is None or not self.kept:
            return new_bold
        flags = new_bold.reset_index(drop=True)
        rows = [[bool(flags.iloc[at][c]) if at is not None and c in flags.columns
                 and not self.frame.iloc[i][c].endswith(MARK) else False for c in self.frame.columns]
                for i, at in enumerate(self.origin)]
        return pd.DataFrame(rows, columns=self.frame.columns)


def read_committed(csv_path: Path) -> pd.DataFrame | None:
    """The committed table's cells as strings, or None when there is none.

    A committed table that cannot be read is refused (:class:`DamagedFileError` naming it), never treated as absent:
    its cells would then be lost from every cell whose run is absent, replaced by "—".
    """
    return _read_csv(csv_path, "the committed table", " and render again")


def _read_csv(path: Path, what: str, then: str = "") -> pd.DataFrame | None:
    """A CSV that ``tables`` wrote, its cells as strings (None when absent); one it cannot read is a
    :class:`DamagedFileError` naming it and ``what`` it is, with the fix: restore it from git (then ``then``)."""
    if not path.is_file():
        return None
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DamagedFileError(path, f"{what} cannot be read ({one_line(exc)})",
                               f"restore it with `git checkout -- {path}`{then}") from exc


def read_committed_notes(md_path: Path) -> list[str]:
    """The notes (``- `` lines after the table) of a committed Markdown table."""
    if not md_path.is_file():
        return []
    lines = md_path.read_text(encoding="utf-8").splitlines()
    return [line[2:] for line in lines if line.startswith("- ")]


def _subject(note: str) -> str | None:
    """What a note is about: its text before the first ": " (``compiled`` of an engine summary), if any."""
    head, sep, _ = unmarked(note).partition(": ")
    return head if sep else None


def kept_notes(new_notes: list[str], old_notes: list[str]) -> list[str]:
    """Committed notes the new rendering no longer has (they describe kept cells, e.g. a cost ratio), marked;
    the count note is written anew. A committed note about a subject the new rendering has a note on (an engine's
    summary over more pairs now) is superseded, not kept beside it."""
    present = {unmarked(n) for n in new_notes}
    subjects = {_subject(n) for n in new_notes} - {None}
    return [marked(n) for n in old_notes if unmarked(n) not in present and not n.startswith(MARK)
            and _subject(n) not in subjects]


def _key(old: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """The shortest run of leading columns (in both tables) that names each row of the new rendering once; []
    when there is none. Value columns never become part of the key: the first unique prefix wins."""
    columns: list[str] = []
    for column in old.columns:
        if column not in new.columns:
            break
        columns.append(column)
        if not new.astype(str).duplicated(columns).any():
            return columns
    return []


def merge(new: pd.DataFrame, old: pd.DataFrame | None) -> Merged:
    """``new`` with every absent cell that ``old`` (the committed table) has filled in and marked."""
    if old is None or old.empty:
        return Merged(new)
    key = _key(old, new) if not new.empty else []
    if not key and not new.empty:
        return Merged(new)  # rows cannot be matched: the new rendering stands as it is
    recomputed: list[tuple[str, str, str]] = []
    new_rows = {tuple(str(v) for v in row): i for i, row in enumerate(new[key].itertuples(index=False))} if key else {}
    if key:
        old = old.drop_duplicates(key)  # a row named twice in the committed table is one row
    columns = list(old.columns) + [c for c in new.columns if c not in old.columns]
    rows: list[dict[str, str]] = []
    origin: list[int | None] = []
    kept = 0
    for _, old_row in old.iterrows():
        at = new_rows.pop(tuple(old_row[key]), None) if key else None
        row: dict[str, str] = {}
        for column in columns:
            fresh = new.iloc[at][column] if at is not None and column in new.columns else None
            before = old_row.get(column, "")
            if column in key:
                row[column] = before
            elif is_absent(fresh) and not is_absent(before):
                row[column] = marked(before)
                kept += 1
            else:
                earlier = _value(before)
                if (before.endswith(MARK) and earlier != _value(str(fresh)) and _number(earlier) is not None
                        and _number(str(fresh)) is not None):  # a kept value computed again, differently
                    recomputed.append((ROW_JOIN.join(map(str, old_row[key])), column, earlier))
                row[column] = "" if fresh is None or (isinstance(fresh, float) and math.isnan(fresh)) else str(fresh)
        rows.append(row)
        origin.append(at)
    for at in sorted(new_rows.values()):  # rows only the new rendering has
        rows.append({c: str(new.iloc[at][c]) if c in new.columns else "" for c in columns})
        origin.append(at)
    if not kept:
        return Merged(new, key=key, recomputed=recomputed)
    return Merged(pd.DataFrame(rows, columns=columns), kept, origin, key, recomputed)


def read_ledger(path: Path) -> list[Recomputed]:
    """The recomputed cells' earlier values (none without a ledger); a ledger that cannot be read is refused
    (:class:`DamagedFileError` naming it): its earlier values would be lost from the notes."""
    frame = _read_csv(path, "the ledger of recomputed cells")
    if frame is None:
        return []
    if list(frame.columns) != LEDGER_COLUMNS:
        raise DamagedFileError(path, f"expected the columns {', '.join(LEDGER_COLUMNS)}, found "
                               f"{', '.join(map(str, frame.columns))}", f"restore it with `git checkout -- {path}`")
    return [Recomputed(*row) for row in frame.itertuples(index=False)]


def recomputed(out_dir: Path, table: str, merged: Merged) -> list[str]:
    """The notes under ``table`` on its recomputed cells, after recording ``merged``'s new ones in the ledger in
    ``out_dir`` (call it before writing the table, which loses their earlier values)."""
    return _recomputed_notes(_record(out_dir / LEDGER, table, merged), merged.frame, merged.key)


def _record(path: Path, table: str, merged: Merged) -> list[Recomputed]:
    """The ledger's entries for ``table`` after adding ``merged``'s recomputed cells (written atomically when
    there is a new one)."""
    entries = read_ledger(path)
    known = {(e.table, e.row, e.column) for e in entries}
    new = [Recomputed(table, row, column, earlier) for row, column, earlier in merged.recomputed
           if (table, row, column) not in known]
    if new:
        entries += new
        write_text_atomic(path, pd.DataFrame([vars(e) for e in entries], columns=LEDGER_COLUMNS).to_csv(index=False))
    return [e for e in entries if e.table == table]


def _recomputed_notes(entries: list[Recomputed], frame: pd.DataFrame, key: list[str]) -> list[str]:
    """One note per recomputed row of ``frame``: each cell's earlier value, its value now and how far the leading
    number moved; then what the earlier values were. Empty when no entry names a row of ``frame``."""
    key = key or _key(frame, frame)  # no committed table to match against: the frame's own row names
    if not entries or not key:
        return []
    now = {ROW_JOIN.join(map(str, row[key])): row for _, row in frame.iterrows()}
    by_row: dict[str, list[str]] = {}
    for entry in entries:
        row = now.get(entry.row)
        if row is None or entry.column not in frame.columns:
            continue
        value = _value(row[entry.column])
        moved = _move(entry.earlier, value)
        by_row.setdefault(entry.row, []).append(f"{entry.column} {entry.earlier} → {value}{moved}")
    if not by_row:
        return []
    return [*(f"recomputed {row}: {'; '.join(cells)}" for row, cells in by_row.items()),
            "recomputed: cells whose earlier committed value came from runs that were not kept; the runs were "
            "computed again and are kept now, and the values moved by the amounts shown: a trained model's numbers "
            "move where training on a CPU is not bit-reproducible, timings with the machine and its load (the "
            "earlier values: results/tables/recomputed.csv)."]
