"""Every row label of every rendered table fits on a screen (at most 60 characters): the tables in results/tables,
the README's headline table and the reproduction report. Long recipes live in the tables' legends."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from memrepro.tables import committed
from memrepro.tables.committed import _key
from memrepro.tables.naming import MAX_LABEL
from memrepro.tables.report import HEADLINE_END, HEADLINE_START

REPO = Path(__file__).resolve().parents[1]
TABLES = sorted(p for p in (REPO / "results" / "tables").glob("*.csv") if p.name != committed.LEDGER)  # tables only


def label_columns(frame: pd.DataFrame) -> list[str]:
    """The leading columns that name each row once (what a committed cell is matched by); the first column at
    least."""
    return _key(frame, frame) or list(frame.columns[:1])


def markdown_first_cells(text: str) -> list[str]:
    """The first cell of every body row of every Markdown table in ``text`` (escapes and emphasis undone)."""
    cells, in_table = [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        if re.match(r"^\|[:\- |]+\|$", line):  # the header rule: body rows follow
            in_table = True
            continue
        if in_table:
            first = re.split(r"(?<!\\)\|", line)[1]
            cells.append(first.strip().replace(r"\|", "|").strip("*"))
    return cells


def test_the_rendered_tables_are_there() -> None:
    assert len(TABLES) >= 12  # an empty glob would make every check below pass


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_every_row_label_of_a_rendered_table_fits_on_a_screen(path: Path) -> None:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    columns = label_columns(frame)
    long = [(column, value) for column in columns for value in frame[column] if len(value) > MAX_LABEL]
    assert not long, f"{path.name}: row labels over {MAX_LABEL} characters: {long}"
    markdown = path.with_suffix(".md").read_text(encoding="utf-8")
    assert all(len(cell) <= MAX_LABEL for cell in markdown_first_cells(markdown)), path.with_suffix(".md").name


@pytest.mark.parametrize("page", ["README.md", "docs/reproduction.md"])
def test_every_row_label_of_a_page_fits_on_a_screen(page: str) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    if page == "README.md":
        text = text[text.index(HEADLINE_START):text.index(HEADLINE_END)]
    cells = markdown_first_cells(text)
    assert cells, page
    long = [cell for cell in cells if len(cell) > MAX_LABEL]
    assert not long, f"{page}: row labels over {MAX_LABEL} characters: {long}"


def test_the_checks_catch_a_long_label() -> None:
    frame = pd.DataFrame({"method": ["short", "x" * (MAX_LABEL + 1)], "MRR": ["0.1", "0.2"]})
    assert label_columns(frame) == ["method"]
    text = frame.to_markdown(index=False)
    assert max(map(len, markdown_first_cells(text))) == MAX_LABEL + 1
