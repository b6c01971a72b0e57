"""The cross-benchmark leaderboard: every retriever × every benchmark on one encoder (neither paper has one).

Each benchmark is scored under its own protocol and primary metric, with each retriever in the setting that the
protocol calls for (LoCoMo: the full ranking; LongMemEval-S: K = 50 lists; PersonaBench: K = 5 lists). A cell is
the metric (mean ± std of the 5 seed means on LoCoMo, else the mean), then Δ vs the benchmark's dense row
(paired bootstrap over the shared query units, ``*`` = p < 0.05), then the mean ms per query of the timed region.
The runs come from ``conf/experiments.yaml`` (``make tables`` runs what is missing, then renders this).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from memrepro.checks import Finding, hardware_text, legend, tags, without
from memrepro.evaluation.power import minimum_detectable_difference, standings
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
                columns: Sequence[Column] = COLUMNS, ignore: Sequence[str] = ()) -> tuple[pd.DataFrame, list[str]]:
    notes: list[str] = []
    table: dict[str, dict[str, str]] = {row: {"retriever": row} for row in ROWS}
    found_by_column: dict[str, dict[str, Run]] = {}
    findings: list[Finding] = []
    for column in columns:
        found = {row: find_run(runs, dataset=column.dataset, names=s.names, encoder=encoder, settings=s.settings,
                               dataset_settings=column.dataset_settings)
                 for row, s in column.retrievers.items()}
        found_by_column[column.title] = {row: run for row, run in found.items() if run is not None}
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
            own = [f for f in without(run.checked, ignore) if f.concerns(column.metric)]
            findings += [Finding(f.code, f.message, f.fix, f.metrics, f"{row}, {column.title}") for f in own]
            cell = run.record.summary.mean_text(column.metric) + tags(own)
            if row != "dense" and dense is not None:
                a, b = dense.per_unit(column.metric), run.per_unit(column.metric)
                if set(a) == set(b) and a:
                    test = paired_bootstrap(b, a, resamples=resamples)
                    cell += f" (Δ {test.delta:+.4f}{'*' if test.significant else ''})"
                else:
                    cell += " (Δ: query sets differ)"
            ms = time_ms(run)
            table[row][column.title] = cell + (f" · {ms:.2f} ms" if ms is not None else "")
    ranked, power_notes = rank_columns(found_by_column, columns, resamples)
    order = ["retriever"]
    for column in columns:
        order += [column.title, f"{column.title}: rank"]
        for row in ROWS:
            table[row][f"{column.title}: rank"] = ranked.get(column.title, {}).get(row, "")
    hardware = sorted({hardware_text(run.record.provenance.hardware) for found in found_by_column.values()
                       for run in found.values() if time_ms(run) is not None})
    if len(hardware) > 1:
        findings.append(Finding("latency-hardware", f"the ms/query of this table were timed on {_join(hardware)}"))
    notes += power_notes + legend(without(findings, ignore))
    return pd.DataFrame(list(table.values()))[order], notes


def rank_columns(found: Mapping[str, Mapping[str, Run]], columns: Sequence[Column],
                 resamples: int = 10_000) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Each column's ranking (``{column: {row: rank cell}}``: the best, the systems tied with it, the rest) and the
    notes of its statistical power: the minimum detectable difference of each comparison with the best, per
    category and per split seed where the benchmark has split seeds (``memrepro.evaluation.power``)."""
    units: dict[str, dict[str, dict[str, float]]] = {}
    notes: list[str] = []
    for column in columns:
        runs = found.get(column.title) or {}
        per_row = {row: run.per_unit(column.metric) for row, run in runs.items()}
        shared = set.intersection(*(set(u) for u in per_row.values())) if per_row else set()
        if any(set(u) != shared for u in per_row.values()):
            notes.append(f"{column.title}: ranked over the {len(shared):,} query units every row scored "
                         f"(query-sets-differ)")
        units[column.title] = {row: {u: values[u] for u in shared} for row, values in per_row.items() if shared}
    table = standings({title: systems for title, systems in units.items() if len(systems) > 1}, resamples)
    cells = {title: {s.system: s.text(resamples) for s in rows} for title, rows in table.items()}
    for column in columns:
        rows = table.get(column.title)
        if not rows:
            continue
        systems = units[column.title]
        best = rows[0].system
        mdds = "; ".join(f"{s.system} {s.power.mdd:.4f}" for s in rows[1:])
        tied = [s.system for s in rows[1:] if s.tied]
        notes.append(f"{column.title}: best {best}" + (f", tied with it: {_join(tied)}" if tied else "")
                     + f"; minimum detectable difference vs the best (α = 0.05, power 0.8, paired t approximation, "
                       f"n = {rows[1].power.n:,}): {mdds}.")
        run = found[column.title][best]
        names = {code: f"{code} {c.name}" if c.name and c.name != code else code
                 for code, c in run.record.summary.categories.items()}
        categories = {f"{r['split']}::{r['query_id']}": names.get(r["category"], r["category"]) for r in run.rows
                      if r["excluded"] is None}
        runner_up = rows[1].system
        for view, key in (("by category", lambda u: categories.get(u)), ("by split seed", _split_of)):
            groups = sorted({key(u) for u in systems[best]} - {None}, key=_natural)
            if len(groups) < 2:
                continue
            parts = []
            for group in groups:
                members = [u for u in systems[best] if key(u) == group]
                a = {u: systems[best][u] for u in members}
                b = {u: systems[runner_up][u] for u in members}
                power = minimum_detectable_difference(b, a)
                mean_a, mean_b = (sum(v.values()) / len(v) for v in (a, b))
                parts.append(f"{group} (n = {power.n:,}): {mean_a:.4f} vs {mean_b:.4f}, MDD {power.mdd:.4f}")
            notes.append(f"{column.title} {view} ({best} vs {runner_up}, means and MDD; pooled above): "
                         f"{'; '.join(parts)}.")
    return cells, notes


def _split_of(unit: str) -> str | None:
    split = unit.split("::", 1)[0]
    return split if split.startswith("seed") else None


def _natural(text: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _join(items: Sequence[str]) -> str:
    return ", ".join(items)


def render_leaderboard(runs: Sequence[Run], out: Path, encoder: str, resamples: int = 10_000,
                       ignore: Sequence[str] = ()):
    frame, notes = leaderboard(runs, encoder, resamples, ignore=ignore)
    text = (f"Encoder {encoder} (BM25 ignores it). Cell: primary metric (LoCoMo: mean ± std of the 5 seed means), "
            "Δ vs the dense row of the same benchmark (paired bootstrap over shared query units, "
            f"{resamples} resamples, seed 13; * : p < 0.05), mean ms/query of the timed region (batch 1; RF-Mem: "
            "the chosen path). n/a: no setting configured for that retriever there (neither paper ran RF-Mem on "
            "LoCoMo); —: no run yet.")
    ranks = ("Rank: each system against the benchmark's best (paired bootstrap, the p-values of the whole table "
             "Holm-corrected together); a system whose corrected p is not below 0.05 is tied with the best instead "
             "of ranked below it; the rest are ranked by mean. MDD: the minimum detectable difference of that "
             "comparison (α = 0.05, power 0.8, paired t approximation). [X]: a protocol-check finding "
             "(docs/checks.md), listed below.")
    paths = write_table(frame, out, "leaderboard", "Leaderboard: retrievers × benchmarks (one encoder)",
                        notes=[text, ranks, PERSONAMEM_NOTE, *notes], keep_committed=True)
    return paths, frame
