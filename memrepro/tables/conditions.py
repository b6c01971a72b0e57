"""A paper table's rows from the conditions declared for it (``paper:`` in ``conf/experiments.yaml``).

A row is a declared condition; its run is the complete run whose settings equal the condition's composed config
(Hydra composes the entry's overrides, and the two configs are compared without the settings that change no
ranking or metric, as a run id is). Nothing is guessed from a run's config: a run the list does not declare is
in no paper table (``leaderboard`` and ``compare`` show any run). A row may have several conditions (subsets of
its split seeds): of their runs, the one over the most seeds is shown, then the newest. A run records the
condition it was launched as (``condition``); one whose settings no longer equal that entry's is not shown for it,
and :func:`stale_runs` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Sequence

from memrepro.experiments import (CONDITION_KEY, Experiment, PaperCell, composed_config, load_experiments,
                                  with_common)
from memrepro.runs.identity import semantic_config
from memrepro.tables.runs import Run, preferred


@dataclass
class TableRow:
    """One row of a paper table: the declaring condition, its cell, and the runs of the row's conditions."""

    name: str
    cell: PaperCell
    runs: list[Run] = field(default_factory=list)

    @property
    def run(self) -> Run | None:
        """The run the row shows (:attr:`Run.preference`: the most split seeds, then the newest)."""
        return preferred(self.runs)


def table_rows(table: str, runs: Sequence[Run], declared_list: tuple[list[str], list[Experiment]] | None = None,
               ) -> list[TableRow]:
    """The rows of ``table`` in declared order, each with the runs whose settings equal one of its conditions."""
    common, experiments = declared_list or load_experiments()
    rows: dict[str, TableRow] = {}
    owners: dict[str, str] = {}  # condition name -> its row's name
    for experiment in experiments:
        for cell in experiment.cells(table):
            owner = cell.row or experiment.name
            owners[experiment.name] = owner
            if owner == experiment.name:
                rows[owner] = TableRow(owner, cell)
            else:
                rows.setdefault(owner, TableRow(owner, cell))
    members = [e for e in experiments if e.name in owners]
    for experiment in members:
        settings = _composed(experiment, tuple(common))
        rows[owners[experiment.name]].runs += [run for run in runs if run.settings in settings]
    return list(rows.values())


def stale_runs(runs: Sequence[Run], declared_list: tuple[list[str], list[Experiment]] | None = None) -> list[str]:
    """One line per run launched as a condition of a paper table whose declaration has changed since: its settings
    are no longer the condition's, so no table shows it for that condition."""
    common, experiments = declared_list or load_experiments()
    by_name = {experiment.name: experiment for experiment in experiments if experiment.paper}
    lines = []
    for run in runs:
        name = run.config.get(CONDITION_KEY)
        if name in by_name and run.settings not in _composed(by_name[name], tuple(common)):
            lines.append(f"{run.folder} was launched as condition {name!r}, whose declaration has changed since; it "
                         f"is not shown for it (rerun `python -m memrepro run +experiment={name}`)")
    return lines


def cell_runs(table: str, runs: Sequence[Run], declared_list: tuple[list[str], list[Experiment]] | None = None,
              ) -> dict[tuple[str, str], Run]:
    """``{(reference, column): run}`` for a table with the paper's fixed layout: each declared cell's run (cells
    whose condition has no complete run are absent)."""
    return {(row.cell.reference, row.cell.column): row.run for row in table_rows(table, runs, declared_list)
            if row.run is not None and row.cell.reference is not None and row.cell.column is not None}


def condition_runs(experiment: Experiment, runs: Sequence[Run], common: Sequence[str] = ()) -> list[Run]:
    """The complete runs of one declared condition (of any of its sweep points)."""
    settings = _composed(experiment, tuple(common))
    return [run for run in runs if run.settings in settings]


@lru_cache(maxsize=None)
def _composed(experiment: Experiment, common: tuple[str, ...]) -> list[dict[str, Any]]:
    """The settings of each run an entry makes (one per sweep point), as a run id sees them."""
    return [semantic_config(composed_config(tuple(with_common(common, point)))) for point in experiment.points()]
