"""Reproduction verdicts, pyserini-2CR style: per cell, our number, the paper's, |Δ| and a verdict or a reason.

A cell gets a verdict only when our setting matches the paper's (same model, same data, same protocol):

* ``OK``     |Δ| ≤ 0.0001 — equal at the paper's four printed decimals, allowing one unit of rounding;
* ``OKish``  |Δ| ≤ 0.01   — within one point (percentage point for recalls), e.g. the closest known setting;
* ``FAIL``   otherwise.

Counts (routing) are compared exactly (``OK`` only when equal). Where the settings differ (a substitute encoder,
a cleaned data file, a different machine for times, data or weights we do not have), the cell carries the reason
instead of a verdict ("not comparable: …" or "missing: …"); a cell is never left blank without one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import pandas as pd

from memrepro.tables.committed import unmarked

TOLERANCE_OK = 1e-4
TOLERANCE_OKISH = 1e-2
VERDICTS = ("OK", "OKish", "FAIL")
KINDS = (*VERDICTS, "not comparable", "missing")  # how the cells of a table are counted
RULE = (f"OK |Δ| ≤ {TOLERANCE_OK:g}, OKish |Δ| ≤ {TOLERANCE_OKISH:g}, FAIL otherwise; counts must be equal")
INLINE_REASON = 24  # characters: a reason this short stays in its row ("missing: not run")
_FLOAT_SLACK = 1e-9  # 0.4242 - 0.42415 style float noise must not flip a verdict


@dataclass(frozen=True)
class Cell:
    """One reproduction cell. ``reason`` is empty when our setting matches the paper's."""

    table: str
    row: str
    column: str
    ours: float | None
    paper: float | None
    reason: str = ""
    exact: bool = False  # counts: equal or FAIL

    @property
    def delta(self) -> float | None:
        if self.ours is None or self.paper is None:
            return None
        return self.ours - self.paper

    @property
    def verdict(self) -> str:
        """``OK`` / ``OKish`` / ``FAIL``, or the reason this cell has no verdict."""
        if self.reason:
            return self.reason
        if self.paper is None:
            return "no paper value"
        if self.ours is None or (isinstance(self.ours, float) and math.isnan(self.ours)):
            return "missing: not run"
        gap = abs(self.ours - self.paper)
        if self.exact:
            return "OK" if gap == 0 else "FAIL"
        if gap <= TOLERANCE_OK + _FLOAT_SLACK:
            return "OK"
        if gap <= TOLERANCE_OKISH + _FLOAT_SLACK:
            return "OKish"
        return "FAIL"

    def as_row(self) -> dict[str, object]:
        delta = self.delta
        return {"table": self.table, "row": self.row, "column": self.column,
                "ours": "" if self.ours is None else _fmt(self.ours, self.exact),
                "paper": "" if self.paper is None else _fmt(self.paper, self.exact),
                "|Δ|": "" if delta is None else _fmt(abs(delta), self.exact),
                "tolerance": ("" if self.verdict not in VERDICTS else
                              "exact" if self.exact else f"OK ≤ {TOLERANCE_OK:g}, OKish ≤ {TOLERANCE_OKISH:g}"),
                "verdict": self.verdict}


def _fmt(value: float, exact: bool) -> str:
    return f"{value:.0f}" if exact else f"{value:.4f}"


def summary_line(cells: Iterable[Cell]) -> str:
    """``"12 cells: OK 10 · OKish 1 · FAIL 0 · not comparable 1"`` (missing counts separately)."""
    return summary_of_verdicts(cell.verdict for cell in cells)



def verdict_kind(verdict: str) -> str:
    """Which of :data:`KINDS` a verdict text counts as (a reason that is not "missing: …" is not comparable)."""
    if verdict in VERDICTS:
        return verdict
    return "missing" if verdict.startswith("missing") else "not comparable"


def verdict_counts(verdicts: Iterable[str]) -> dict[str, int]:
    """How many verdicts of each of :data:`KINDS`."""
    counts = dict.fromkeys(KINDS, 0)
    for verdict in verdicts:
        counts[verdict_kind(verdict)] += 1
    return counts


def summary_of_verdicts(verdicts: Iterable[str]) -> str:
    """:func:`summary_line` from the verdict texts (a rendered matrix's ``verdict`` column)."""
    counts = verdict_counts(verdicts)
    return f"{sum(counts.values())} cells: " + " · ".join(f"{name} {n}" for name, n in counts.items())


def footnoted(frame: pd.DataFrame, column: str = "verdict") -> tuple[pd.DataFrame, list[str]]:
    """The matrix with each long reason in ``column`` replaced by its kind and a note number
    (``not comparable [3]``; a ‡ mark stays), and the numbered reasons (``[3] per-seed retrained …``), numbered in
    order of first use: the rows stay one line with their verdicts on screen. The CSV keeps the full texts."""
    numbers: dict[str, int] = {}

    def short(cell: str) -> str:
        text = unmarked(cell)
        if text in VERDICTS or len(text) <= INLINE_REASON:
            return cell
        number = numbers.setdefault(text, len(numbers) + 1)
        return f"{verdict_kind(text)} [{number}]" + cell[len(text):]  # the mark, if any

    shown = frame.assign(**{column: frame[column].map(short)})
    return shown, [f"[{n}] {text}" for text, n in numbers.items()]
