"""The reproduction report (``docs/reproduction.md``) and the README's headline block, from rendered tables and runs.

The report opens on the verdicts per paper table, then shows each paper table, then the matrix of every paper
cell one table at a time, its long reasons numbered so that each row stays one line with its verdict on screen.

Both are written by ``python -m memrepro tables`` after the tables: every number in them is copied from a rendered
table (``results/tables/*.csv`` / ``*.md``) or from a kept run's ``metrics.json``, named by its run id, never typed.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from memrepro.errors import DamagedFileError
from memrepro.files import write_text_atomic
from memrepro.runs.kept import read_kept_file
from memrepro.tables.committed import unmarked
from memrepro.tables.convmemory import COLUMNS, ROW_NAMES, SUBSET
from memrepro.tables.render import markdown
from memrepro.tables.reproduction import FINDINGS, RULE, footnoted, verdict_counts

HEADLINE_START, HEADLINE_END = "<!-- memrepro:headline:start -->", "<!-- memrepro:headline:end -->"
MATRIX_ANCHOR = "matrix-"  # + table stem: the heading "Matrix: <stem>" of a table's matrix rows
# the report's tables, in order (file stems under results/tables)
REPORT_TABLES: Sequence[str] = (
    "reproduction_matrix", "convmemory_locomo", "convmemory_ablation", "convmemory_calibration",
    "rfmem_table2", "rfmem_table3", "rfmem_table15", "rfmem_table16", "rfmem_table17", "rfmem_table1",
    "engine_agreement", "leaderboard")
HEADLINE_COLUMNS = ("method", "FULL MRR", "H@1", "R@10", "paper (R@10 / MRR / H@1 / Hit@10)")
# the tables' column names as the CLI names the metrics (metrics.names, compare --metric)
COLUMN_NAMES = ("Columns and the CLI's metric names: " + ", ".join(f"{column} = `{metric}`"
                                                                   for metric, column in COLUMNS.items())
                + " (ConvMemory tables); R@k = `pb_recall@k` (RF-Mem Tables 2, 15, 16 and 17, PersonaBench); "
                  "S R@k, M R@k = `recall_all@k` (RF-Mem Table 3, LongMemEval-S and -M).")


def _table_section(path: Path) -> str:
    """A rendered table's Markdown, its title one level down (the report has its own title)."""
    text = path.read_text(encoding="utf-8").rstrip("\n")
    return re.sub(r"^# ", "## ", text, count=1)


def kept_runs_table(kept_dir: Path) -> pd.DataFrame:
    """One row per kept run: where it is, its run id and its primary metrics (mean over split seeds). A copy whose
    ``metrics.json`` fails the kept manifest is left out, with a warning naming the file."""
    rows = []
    for metrics_path in sorted(Path(kept_dir).glob("*/*/*/*/metrics.json")):
        if any(part.startswith(".") for part in metrics_path.relative_to(kept_dir).parts):
            continue
        try:
            metrics = json.loads(read_kept_file(metrics_path.parent, "metrics.json"))
        except DamagedFileError as exc:
            print(f"memrepro: warning: {exc}; left out of the report's kept runs", file=sys.stderr)
            continue
        summary = metrics.get("summary") or {}
        means = summary.get("split_mean") or summary.get("pooled") or {}
        dataset, retriever, encoder, run_id = metrics_path.parent.relative_to(kept_dir).parts
        rows.append({"run id": run_id, "dataset": dataset, "retriever": retriever, "encoder": encoder,
                     "splits": ", ".join(s.removeprefix("seed") for s in (summary.get("splits") or {})),
                     "queries": str(summary.get("n", "")),
                     **{name: f"{means[name]:.4f}" for name in metrics.get("primary", []) if name in means}})
    return pd.DataFrame(rows).fillna("")


def verdict_summary(matrix: pd.DataFrame) -> pd.DataFrame:
    """One row per paper table of the matrix: its name (linked to the table), its cells (linked to its rows of the
    matrix) and how many are OK / OKish / FAIL / not comparable / missing."""
    rows = []
    for stem, verdicts in matrix.groupby("table", sort=False)["verdict"]:
        counts = verdict_counts(map(unmarked, verdicts))
        rows.append({"paper table": f"[{stem}](#{stem})", "cells": f"[{len(verdicts)}](#{MATRIX_ANCHOR}{stem})",
                     **{k: str(n) for k, n in counts.items()}})
    return pd.DataFrame(rows)


def matrix_sections(matrix: pd.DataFrame) -> list[str]:
    """The matrix one paper table at a time (no table column), long reasons numbered and listed after them."""
    shown, reasons = footnoted(matrix)
    parts = ["## Reproduction matrix (every paper cell)", "",
             f"Every paper cell: ours, the paper's, |Δ| and the verdict ({RULE}: Table 17's routing), or the reason "
             "there is none, numbered and listed after the tables. `results/tables/reproduction_matrix.csv` holds the "
             "same cells with each tolerance and reason in full.", ""]
    for stem, rows in shown.groupby("table", sort=False):
        parts += [f"### Matrix: {stem}", "",
                  markdown(rows.drop(columns=["table", "tolerance", FINDINGS], errors="ignore")), ""]
    if reasons:
        parts += ["### Reasons", "", *[f"- {reason}" for reason in reasons], ""]
    return parts


def render_report(tables_dir: Path, figures_dir: Path, kept_dir: Path, target: Path) -> Path:
    """``docs/reproduction.md``: the verdict summary first, then each paper table, then the matrix."""
    parts = ["# Reproduction report", "",
             "Generated by `python -m memrepro tables` from the runs in `results/` (do not edit by hand). Each table "
             "is the file of the same name in `results/tables/`; cells marked ‡ keep a committed value whose run is "
             "not on this machine. The papers' numbers come from `memrepro/reference/reference_numbers.yaml`.", ""]
    matrix_csv = Path(tables_dir) / "reproduction_matrix.csv"
    matrix = pd.read_csv(matrix_csv, dtype=str, keep_default_na=False) if matrix_csv.is_file() else None
    if matrix is not None:
        parts += ["## Summary", "",
                  f"Cells per paper table by verdict (pyserini 2CR style, only where our model and data match the "
                  f"paper's: {RULE}). Not comparable and missing cells give their reason in the matrix below.", "",
                  markdown(verdict_summary(matrix)), ""]
    for stem in REPORT_TABLES:
        path = Path(tables_dir) / f"{stem}.md"
        if stem != "reproduction_matrix" and path.is_file():
            parts += [f'<a id="{stem}"></a>', "", _table_section(path), ""]
    if matrix is not None:
        parts += matrix_sections(matrix)
    index = Path(figures_dir) / "README.md"
    if index.is_file():
        lines = [re.sub(r"\[([^\]]+)\]\([^)]+\)", r"`\1`", line)  # figure files live in results/figures
                 for line in index.read_text(encoding="utf-8").splitlines() if line.startswith("- **")]
        parts += ["## Figures (files in `results/figures/`)", "", *lines, ""]
    runs = kept_runs_table(kept_dir)
    if not runs.empty:
        parts += ["## Kept runs", "",
                  "Runs committed under `results/kept/` (restored by `tables`, `run` and `keep --restore`); metrics are "
                  "the mean over split seeds from each run's `metrics.json`.", "", markdown(runs), ""]
    write_text_atomic(target, "\n".join(parts))
    return target


def headline_block(tables_dir: Path) -> str:
    """The README's results table: ConvMemory's LoCoMo rows, as rendered, and the reproduction summary."""
    frame = pd.read_csv(Path(tables_dir) / "convmemory_locomo.csv", dtype=str, keep_default_na=False)
    frame = frame[[c for c in HEADLINE_COLUMNS if c in frame.columns]]
    # five-seed rows that ran: not the single-seed calibration rows, not the models that are not available
    frame = frame[~frame.iloc[:, 1].str.startswith("not run") & ~frame["method"].str.contains(SUBSET)]
    matrix = (Path(tables_dir) / "reproduction_matrix.md").read_text(encoding="utf-8")
    summaries = [line[2:] for line in matrix.splitlines() if re.match(r"- \w+: \d+ cells:", line)]
    return "\n".join([
        "LoCoMo, 5 conversation-level split seeds, all-mpnet-base-v2 (mean ± std of the seed means; ‡: a committed "
        "value whose run is not kept; [F], [S], …: the protocol check's findings on that number, explained under "
        "the table and in [Checks on every comparison](docs/checks.md)). From "
        "`results/tables/convmemory_locomo.md`:", "",
        markdown(frame), "",
        f"{ROW_NAMES} Full recipes: the legend of "
        "`results/tables/convmemory_locomo.md`.", "",
        f"{COLUMN_NAMES}", "",
        "Reproduction verdicts per paper table (`results/tables/reproduction_matrix.md`; OK |Δ| ≤ 0.0001, "
        "OKish ≤ 0.01):", "", *[f"- {line}" for line in summaries]])


def write_headline(readme: Path, tables_dir: Path) -> bool:
    """Replace the block between the README's headline markers; False when the README has no markers."""
    text = readme.read_text(encoding="utf-8")
    start, end = text.find(HEADLINE_START), text.find(HEADLINE_END)
    if start < 0 or end < start:
        return False
    new = text[:start + len(HEADLINE_START)] + "\n" + headline_block(tables_dir) + "\n" + text[end:]
    if new != text:
        write_text_atomic(readme, new)
    return True
