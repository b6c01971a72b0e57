"""The reproduction matrix (``results/tables/reproduction_matrix.csv``, written by ``python -m memrepro tables``) laid
out as the papers' tables: rows x columns, ours beside the paper's number in each cell, the verdict as the cell's
colour and the reason (where our setting differs from the paper's) as a numbered footnote and on hover; the tags of
the protocol check's findings on our number (the matrix's ``findings`` column) beside it, each finding's sentence
under the table and on hover.

Row labels of the form ``group / label`` (``all-mpnet-base-v2 / RF-Mem``) become row groups, and column names that
share a leading word (``R@5 Basic Info`` … ``R@10 Overall``) column groups, as the papers print them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from memrepro.checks import Finding, loads, tags
from memrepro.errors import DamagedFileError
from memrepro.site.findings import Note, notes
from memrepro.tables.committed import LEDGER, MARK, ROW_JOIN, read_ledger, unmarked
from memrepro.tables.naming import shorten
from memrepro.tables.reproduction import FINDINGS, KINDS, verdict_counts, verdict_kind

MATRIX = "reproduction_matrix"
ROW_GROUP = " / "


@dataclass(frozen=True)
class Cell:
    ours: str
    paper: str
    delta: str
    verdict: str  # the verdict, or the reason there is none
    kind: str  # one of memrepro.tables.reproduction.KINDS
    committed: bool  # a committed value whose run is not on this machine (marked in the tables)
    note: int | None  # footnote number of the reason
    findings: tuple[Finding, ...] = ()  # the protocol check's, on our number
    earlier: str | None = None  # our value before its run was computed again (results/tables/recomputed.csv)

    @property
    def tags(self) -> str:
        """``[F,S]`` (no leading space), or ``""``."""
        return tags(self.findings).strip()


@dataclass(frozen=True)
class Header:
    group: str  # '' when the table has no groups
    label: str  # as shown (at most naming.MAX_LABEL characters)
    full: str  # as the matrix names it


@dataclass
class PaperTable:
    name: str
    title: str
    rows: list[Header]
    columns: list[Header]
    cells: dict[tuple[str, str], Cell]
    notes: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return verdict_counts(cell.verdict for cell in self.cells.values())

    @property
    def committed(self) -> int:
        return sum(cell.committed for cell in self.cells.values())

    @property
    def findings(self) -> list[Finding]:
        return [f for cell in self.cells.values() for f in cell.findings]

    def finding_notes(self) -> list[Note]:
        """The distinct findings of the table's cells, each with how many cells carry it."""
        return notes(self.findings)

    def column_groups(self) -> list[tuple[str, int]]:
        """(group, span) runs of the columns, for a two-row header ('' groups: none)."""
        spans: list[tuple[str, int]] = []
        for column in self.columns:
            if spans and spans[-1][0] == column.group:
                spans[-1] = (column.group, spans[-1][1] + 1)
            else:
                spans.append((column.group, 1))
        return spans

    def row_groups(self) -> list[tuple[str, list[Header]]]:
        groups: list[tuple[str, list[Header]]] = []
        for row in self.rows:
            if groups and groups[-1][0] == row.group:
                groups[-1][1].append(row)
            else:
                groups.append((row.group, [row]))
        return groups


def read_matrix(tables_dir: Path) -> list[PaperTable] | None:
    """The paper tables of ``tables_dir/reproduction_matrix.csv`` in the matrix's order; None when it is absent."""
    path = Path(tables_dir) / f"{MATRIX}.csv"
    if not path.is_file():
        return None
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = {"table", "row", "column", "ours", "paper", "|Δ|", "verdict"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: columns {sorted(missing)} missing; rerun `python -m memrepro tables`")
    earlier = {e.row: e.earlier for e in read_ledger(Path(tables_dir) / LEDGER)
               if e.table == MATRIX and e.column == "ours"}
    return [_table(name, part, _title(Path(tables_dir), name), path, earlier)
            for name, part in frame.groupby("table", sort=False)]


def _title(tables_dir: Path, name: str) -> str:
    """The rendered table's own title (the first heading of ``<name>.md``), else its file name."""
    path = tables_dir / f"{name}.md"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    return name


def _findings(record: dict, path: Path) -> tuple[Finding, ...]:
    """A cell's findings (a matrix written before the column existed has none); unreadable ones name the file."""
    try:
        return tuple(loads(unmarked(record.get(FINDINGS, ""))))
    except (ValueError, TypeError, AttributeError, KeyError):
        where = f"{record['table']} / {record['row']} / {record['column']}"
        raise DamagedFileError(path, f"the findings of {where} are not the JSON list `tables` writes",
                               "rerun `python -m memrepro tables`") from None


def _table(name: str, part: pd.DataFrame, title: str, path: Path, earlier: dict[str, str]) -> PaperTable:
    row_names = list(dict.fromkeys(part["row"]))
    column_names = list(dict.fromkeys(part["column"]))
    grouped_rows = all(ROW_GROUP in r for r in row_names)
    rows = [Header(*(r.rsplit(ROW_GROUP, 1) if grouped_rows else ("", r)), full=r) for r in row_names]
    rows = [Header(h.group, shorten(h.label), h.full) for h in rows]
    prefixes = [c.split(" ", 1)[0] for c in column_names]
    grouped_columns = (all(" " in c for c in column_names) and 1 < len(set(prefixes)) < len(column_names))
    columns = [Header(*(c.split(" ", 1) if grouped_columns else ("", c)), full=c) for c in column_names]
    table = PaperTable(name, title, rows, columns, {})
    for record in part.to_dict("records"):
        verdict = unmarked(record["verdict"])
        kind = verdict_kind(verdict)
        note = None
        if kind not in KINDS[:3]:  # a reason, not a verdict: footnoted once per table
            if verdict not in table.notes:
                table.notes.append(verdict)
            note = table.notes.index(verdict) + 1
        committed = any(str(record[k]).endswith(MARK) for k in ("ours", "paper", "verdict"))
        table.cells[(record["row"], record["column"])] = Cell(
            unmarked(record["ours"]), unmarked(record["paper"]), unmarked(record["|Δ|"]), verdict, kind, committed,
            note, _findings(record, path), earlier.get(ROW_JOIN.join((name, record["row"], record["column"]))))
    return table
