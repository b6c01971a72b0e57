"""The cross-benchmark leaderboard: every retriever × every benchmark on one encoder (neither paper has one).

Each benchmark is scored under its own protocol and primary metric, with each retriever in the setting that the
protocol calls for (LoCoMo: the full ranking; LongMemEval-S: K = 50 lists; PersonaBench: K = 5 lists). A cell is
the metric (mean ± std of the 5 seed means on LoCoMo, else the mean), then Δ vs the benchmark's dense row
(paired bootstrap over the shared query units, ``*`` = p < 0.05), then the mean ms per query of the timed region.
The runs come from ``conf/experiments.yaml`` (``make tables`` runs what is missing, then renders this).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from memrepro.evaluation.significance import paired_bootstrap
from memrepro.tables.naming import labels
from memrepro.tables.render import write_table
from memrepro.tables.presets import familiarity_settings, find_run, preset
from memrepro.tables.rfmem import time_ms
from memrepro.tables.runs import Run


@dataclass(frozen=True)
class Setting:
    names: tuple[str, ...]  # retriever folder names
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Column:
    title: str
    dataset: str
    metric: str
    retrievers: Mapping[str, Setting]  # row label → how to find its run; "dense" is the Δ baseline
    dataset_settings: Mapping[str, Any] = field(default_factory=dict)


def _rfmem(preset_name: str) -> Setting:
    return Setting(("rfmem",), {k: v for k, v in preset(preset_name).items() if k != "engine"})


COLUMNS: tuple[Column, ...] = (
    Column("LoCoMo MRR", "locomo", "mrr", {
        "dense": Setting(("dense",), {"mode": "full"}),
        "bm25": Setting(("bm25",), {"mode": "full"}),
    }, {"evidence_rule": "exact", "file": "locomo/locomo10.json"}),
    Column("LongMemEval-S recall_all@5 (K = 50)", "longmemeval_s", "recall_all@5", {
        "dense": Setting(("familiarity",), familiarity_settings(50)),
        "bm25": Setting(("bm25",), {"mode": "topk", "k": 50}),
        "rfmem": Setting(("rfmem",), {**{k: v for k, v in preset("rfmem_longmemeval").items() if k != "engine"},
                                      "k": 50}),
    }, {"granularity": "session", "gold": "rfmem"}),
    Column("PersonaBench recall (K = 5)", "personabench", "pb_recall", {
        "dense": Setting(("familiarity",), familiarity_settings(5)),
        "bm25": Setting(("bm25",), {"mode": "topk", "k": 5}),
        "rfmem": _rfmem("rfmem_personabench_table2_r5"),
    }, {"noise": "0.0"}),
)
ROWS = ("dense", "bm25", "rfmem")
PERSONAMEM_NOTE = ("PersonaMem has no retrieval gold (its accuracy needs an LLM reader) and its shared contexts are "
                   "not in the offline data, so it has no column.")


def leaderboard(runs: Sequence[Run], encoder: str, resamples: int = 10_000,
                columns: Sequence[Column] = COLUMNS) -> tuple[pd.DataFrame, list[str]]:
    notes: list[str] = []
    table: dict[str, dict[str, str]] = {row: {"retriever": row} for row in ROWS}
    for column in columns:
        found = {row: find_run(runs, dataset=column.dataset, names=s.names, encoder=encoder, settings=s.settings,
                               dataset_settings=column.dataset_settings)
                 for row, s in column.retrievers.items()}
        dense = found.get("dense")
        shown = {row: run for row, run in found.items() if run is not None}
        named = [f"{row} = {name}" for (row, run), name in zip(shown.items(), labels(list(shown.values())))
                 if name != row]
        if named:  # which retriever and settings a row stands for here (the dense row: familiarity top-K lists)
            notes.append(f"{column.title}: {'; '.join(named)}")
        for row in ROWS:
            run = found.get(row)
            if row not in column.retrievers:
                table[row][column.title] = "n/a"
                continue
            if run is None:
                table[row][column.title] = "—"
                notes.append(f"{column.title}: no {row} run on {encoder} yet (`make tables` runs it)")
                continue
            cell = run.record.summary.mean_text(column.metric)
            if row != "dense" and dense is not None:
                a, b = dense.per_unit(column.metric), run.per_unit(column.metric)
                if set(a) == set(b) and a:
                    test = paired_bootstrap(b, a, resamples=resamples)
                    cell += f" (Δ {test.delta:+.4f}{'*' if test.significant else ''})"
                else:
                    cell += " (Δ: query sets differ)"
            ms = time_ms(run)
            table[row][column.title] = cell + (f" · {ms:.2f} ms" if ms is not None else "")
    return pd.DataFrame(list(table.values())), notes


def render_leaderboard(runs: Sequence[Run], out: Path, encoder: str, resamples: int = 10_000):
    frame, notes = leaderboard(runs, encoder, resamples)
    legend = (f"Encoder {encoder} (BM25 ignores it). Cell: primary metric (LoCoMo: mean ± std of the 5 seed means), "
              "Δ vs the dense row of the same benchmark (paired bootstrap over shared query units, "
              f"{resamples} resamples, seed 13; * : p < 0.05), mean ms/query of the timed region (batch 1; RF-Mem: "
              "the chosen path). n/a: no setting configured for that retriever there (neither paper ran RF-Mem on "
              "LoCoMo); —: no run yet.")
    paths = write_table(frame, out, "leaderboard", "Leaderboard: retrievers × benchmarks (one encoder)",
                        notes=[legend, PERSONAMEM_NOTE, *notes], keep_committed=True)
    return paths, frame
