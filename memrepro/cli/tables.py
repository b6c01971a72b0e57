"""``python -m memrepro tables``: render both papers' tables (and figures) from ``results/`` into ``results/tables/``.

Reads completed runs only (kept runs, ``python -m memrepro keep``, are restored into ``results/runs`` first);
never runs anything (``python -m memrepro experiments`` / ``make tables`` does that
first). Every table is written as Markdown, LaTeX and CSV; ``reproduction_matrix.*`` lists every cell with the
paper's number, |Δ| and a verdict (or the reason there is none), with a summary line per table.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from memrepro.checks import legend, valid_codes, without
from memrepro.cli.args import ArgumentParser
from memrepro.experiments import DEFAULT_LIST, load_experiments
from memrepro.paths import folder_path
from memrepro.runs.kept import KeptRuns
from memrepro.tables import rfmem
from memrepro.tables.convmemory import (ablation_table, calibration_table, cost_notes, main_table,
                                         recipe_notes, reproduction_cells, select)
from memrepro.tables.conditions import cell_runs, stale_runs
from memrepro.tables.engines import agreement_table
from memrepro.tables.render import write_table
from memrepro.tables import committed
from memrepro.tables.report import render_report, write_headline
from memrepro.tables.reproduction import FINDINGS, RULE, Cell, footnoted, summary_of_verdicts
from memrepro.tables.rfmem_figures import render_figures, write_index
from memrepro.tables.runs import complete_runs

CONVMEMORY_LEGEND = ("* : differs from raw dense (main table) or from the full-text arm (ablation), paired bootstrap "
                     "over the shared (seed, question) rows, p < 0.05 (10,000 resamples, seed 13).")
CALIBRATION = ("Official numbers: experiments/reproduce_locomo.py at 9e2f3b6e with the teacher replaced by the raw "
               "dense cosine, 1 epoch, --first-rank-target best_gold, window_mode=full; ours: the same "
               "recipe retrained by memrepro (different initial random stream). MISS: |Δ| > 0.01.")
SOURCE = "Paper numbers: memrepro/reference/reference_numbers.yaml (RF-Mem arXiv 2603.09250; ConvMemory docs/report)."


def _say(paths: list[Path], title: str) -> None:
    print(f"{title}: {', '.join(str(p) for p in paths)}")


@dataclass(frozen=True)
class Summary:
    """A note slot filled with the table's verdict summary as the reproduction matrix shows it."""

    table: str


@dataclass
class Pending:
    """A table built from runs, written once the reproduction matrix has given its verdict summary."""

    name: str
    title: str
    frame: pd.DataFrame
    notes: list = field(default_factory=list)
    bold: pd.DataFrame | None = None

    def write(self, out: Path, summaries: dict[str, str]) -> None:
        notes = [summaries.get(n.table, "0 cells") if isinstance(n, Summary) else n for n in self.notes]
        _say(write_table(self.frame, out, self.name, self.title, bold=self.bold, notes=notes, keep_committed=True),
             self.title)


def finding_notes(findings: list, ignore: tuple = ()) -> list[str]:
    """The notes that explain a table's finding tags ([D], [S], …): one per kind present (memrepro.checks)."""
    return legend(without(findings, ignore))


def rfmem_tables(runs: list, resamples: int, declared_list: tuple,
                 ignore: tuple = ()) -> tuple[list[Pending], list[Cell]]:
    """RF-Mem's tables in the paper's layout, each cell the run of the condition declared for it."""
    def of(table: str) -> dict:
        return cell_runs(table, runs, declared_list)

    pending: list[Pending] = []
    cells: list[Cell] = []
    legend = ("Rows: ours, then the paper's. Bold: best of ours in the block. * : differs from the block's "
              "baseline (paired bootstrap p < 0.05; tests listed below).")
    for name, title, build in (
            ("rfmem_table2", "RF-Mem Table 2: PersonaBench recall@5 / @10 by category", rfmem.table2),
            ("rfmem_table3", "RF-Mem Table 3: LongMemEval S / M recall_all@5 / 10 / 50", rfmem.table3)):
        built, notes = build(of(name), resamples)
        cells += built.cells
        pending.append(Pending(name, title, built.frame, [legend, Summary(name), SOURCE, *notes,
                                                          *finding_notes(built.findings, ignore)], built.bold))
    for number, title in ((15, "RF-Mem Table 15: alternative recollection strategies (PersonaBench)"),
                          (16, "RF-Mem Table 16: early stop vs full exploration (PersonaBench)")):
        built, notes = rfmem.variant_table(of(f"rfmem_table{number}"), number, resamples)
        cells += built.cells
        pending.append(Pending(f"rfmem_table{number}", title, built.frame,
                               [legend.replace("the block's baseline", "the same method in the first block"),
                                Summary(f"rfmem_table{number}"), SOURCE, *notes,
                                *finding_notes(built.findings, ignore)], built.bold))
    built = rfmem.table17(of("rfmem_table17"))
    cells += built.cells
    pending.append(Pending("rfmem_table17", "RF-Mem Table 17: routing statistics (PersonaBench, K = 5)", built.frame,
                           ["Routing counted over all 263 queries (Subjective included).", Summary("rfmem_table17"),
                            SOURCE, *finding_notes(built.findings, ignore)], built.bold))
    frame, gap_cells = rfmem.table1_gap()
    cells += gap_cells
    pending.append(Pending("rfmem_table1", "RF-Mem Table 1: PersonaMem (labelled gap)", frame,
                           [Summary("rfmem_table1"), SOURCE]))
    return pending, cells


def render_matrix(cells: list[Cell], out: Path, ignore: tuple = ()) -> dict[str, str]:
    """Every paper cell with its protocol-check findings (the CSV's ``findings`` column, less the ``ignore``d
    codes); a cell whose run is absent keeps its committed row (marked). Returns each table's verdict summary,
    counted over the cells the matrix shows."""
    cells = [dataclasses.replace(c, findings=tuple(without(c.findings, ignore))) for c in cells]
    merged = committed.merge(pd.DataFrame([c.as_row() for c in cells]),
                             committed.read_committed(out / "reproduction_matrix.csv"))
    recomputed = committed.recomputed(out, "reproduction_matrix", merged)  # before the matrix is written
    by_table: dict[str, list[str]] = {}
    for table, verdict in zip(merged.frame["table"], merged.frame["verdict"]):
        by_table.setdefault(table, []).append(committed.unmarked(verdict))
    summaries = {table: summary_of_verdicts(verdicts) for table, verdicts in by_table.items()}
    notes = [f"{table}: {summary}" for table, summary in summaries.items()]
    notes.append(f"Verdicts (pyserini 2CR style) only where our model and data match the paper's: {RULE}. Other "
                 "cells give the reason instead, numbered below (in full in the CSV).")
    notes.append("Rows of the RF-Mem tables: block / method, with the paper's abbreviations Famili. (Familiarity) "
                 "and Recol. (Recollection).")
    shown, reasons = footnoted(merged.frame.drop(columns=[FINDINGS]))
    _say(write_table(shown, out, "reproduction_matrix", "Reproduction matrix (every paper cell)",
                     notes=notes + reasons + recomputed + ([committed.note(merged.kept)] if merged.kept else []),
                     csv=merged.frame), "reproduction matrix")
    for line in notes[:len(summaries)]:
        print(f"  {line}")
    return summaries


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m memrepro tables", description=__doc__)
    parser.add_argument("--results", default=str(folder_path("results_dir")))
    parser.add_argument("--resamples", type=int, default=10_000, help="paired bootstrap resamples (seed 13)")
    parser.add_argument("--experiments", default=str(DEFAULT_LIST),
                        help="the experiment list whose declared conditions are the tables' rows (default: %(default)s)")
    parser.add_argument("--kept", default=str(folder_path("kept_dir")),
                        help="kept runs (python -m memrepro keep), restored into results/runs first")
    parser.add_argument("--report", default=None,
                        help="the reproduction report to write (default: docs/reproduction.md beside the results "
                             "folder, when that docs folder exists; '' : none)")
    parser.add_argument("--ignore", action="append", default=[], metavar="CODE",
                        help="a protocol-check finding code not to mark in the tables (repeatable; docs/checks.md)")
    parser.add_argument("--readme", default=None,
                        help="the README whose headline block is filled from the rendered tables (default: README.md "
                             "beside the results folder, when it exists; '' : none)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    ignore = valid_codes(args.ignore, "--ignore")  # an unknown code: one line naming the valid ones, exit 2
    home = Path(args.results).resolve().parent  # the checkout the results folder belongs to
    args.report = str(home / "docs" / "reproduction.md") if args.report is None else args.report
    args.readme = str(home / "README.md") if args.readme is None else args.readme
    restored, problems = KeptRuns(Path(args.results), Path(args.kept),
                                  say=lambda line: print(f"memrepro: {line}", file=sys.stderr)).restore_all()
    if restored:  # one line: a fresh clone restores every kept run
        print(f"memrepro: restored {len(restored)} kept run{'s' if len(restored) > 1 else ''} into "
              f"{args.results}/runs (from {args.kept})", file=sys.stderr)
    for problem in problems:
        print(f"memrepro: warning: {problem}", file=sys.stderr)
    runs = complete_runs(args.results)
    if not runs:
        print(f"no complete runs under {args.results}/runs: run `python -m memrepro experiments` (or "
              "`python -m memrepro run ...`) first", file=sys.stderr)
        return 1
    out = Path(args.results) / "tables"
    declared_list = load_experiments(args.experiments)
    for line in stale_runs(runs, declared_list):
        print(f"memrepro: warning: {line}", file=sys.stderr)
    selected = select(runs, declared_list)
    main_findings: list = []
    ablation_findings: list = []
    pending = [
        Pending("convmemory_locomo", "ConvMemory LoCoMo (5 conversation-level seeds; mean ± std of seed means)",
                main_table(selected, args.resamples, main_findings, ignore),
                [CONVMEMORY_LEGEND, *recipe_notes(selected), *cost_notes(selected), SOURCE]),
        Pending("convmemory_ablation", "ConvMemory v2 ablation (FULL MRR)",
                ablation_table(selected, args.resamples, ablation_findings, ignore), [CONVMEMORY_LEGEND, SOURCE]),
        Pending("convmemory_calibration",
                "ConvMemory v1 training calibration: seed 23 (937 test questions) vs the official code",
                calibration_table(selected), [CALIBRATION])]
    pending[0].notes += finding_notes(main_findings)
    pending[1].notes += finding_notes(ablation_findings)
    cells = reproduction_cells(selected)
    more, rfmem_cells = rfmem_tables(runs, args.resamples, declared_list, ignore)
    pending += more
    cells += rfmem_cells
    frame, summary = agreement_table(runs)
    if not frame.empty:
        pending.append(Pending("engine_agreement", "Recollection engines: faithful vs compiled (same settings)",
                               frame, list(summary)))
    summaries = render_matrix(cells, out, ignore)
    for table in pending:
        table.write(out, summaries)
    from memrepro.tables.leaderboard import render_leaderboard

    _say(render_leaderboard(runs, out, "all-MiniLM-L6-v2", args.resamples, ignore)[0], "leaderboard")
    figures_dir = Path(args.results) / "figures"
    figure_lines = render_figures(runs, figures_dir)
    print(f"figures: {write_index(figure_lines, figures_dir)}")
    for line in figure_lines:
        print(f"  {line}")
    kept = {path.stem: count for path in sorted(out.glob("*.csv"))
            if (count := path.read_text(encoding="utf-8").count(committed.MARK))}
    if kept:
        print(f"memrepro: {sum(kept.values())} cells in {len(kept)} tables not re-rendered (their runs are not in "
              f"{args.results}/runs): kept their committed values, marked {committed.MARK} "
              f"({', '.join(f'{name} {n}' for name, n in kept.items())})")
    else:
        print("memrepro: every table cell re-rendered from runs")
    if args.report and Path(args.report).parent.is_dir():
        print(f"reproduction report: {render_report(out, figures_dir, Path(args.kept), Path(args.report))}")
    if args.readme and Path(args.readme).is_file() and write_headline(Path(args.readme), out):
        print(f"README headline results: {args.readme}")
    return 0
