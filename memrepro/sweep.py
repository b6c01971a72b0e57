"""The summary of a sweep (``python -m memrepro run -m ...``): one table, one row a point.

Columns: the swept parameters (the overrides whose value differs between the points, by their shortest
unambiguous name, :func:`memrepro.tables.naming.short_paths`: ``alpha``, ``tau``), then the benchmark's primary
metrics (mean ± std of the split means where the benchmark has several splits, else the mean), the batched
ms/query, and how the point was obtained (computed, skipped because already complete, restored from its kept
copy). The best point by the benchmark's first primary metric is marked ★ (every point that ties with it; per
benchmark when a sweep spans several).

Printed at the end of the sweep and written beside its logs as ``sweep.md`` and ``sweep.csv`` (the CSV with full
override keys, unrounded means and each point's run folder). Built from the outcomes the points returned: nothing
is read back from disk, so a sweep pays for formatting only (``scripts/bench_sweep_summary.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from memrepro.files import write_text_atomic
from memrepro.report import primary_names
from memrepro.runs.record import RunRecord
from memrepro.tables.naming import labels, short_paths, value_text
from memrepro.tables.runs import Run

BEST = "★"
STATES = {(False, False): "computed", (True, False): "skipped (complete)", (True, True): "restored"}


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its overrides as Hydra gave them and the run it produced."""

    overrides: tuple[str, ...]
    folder: Path
    record: RunRecord
    state: str  # one of STATES' values

    @classmethod
    def of(cls, overrides: Sequence[str], outcome: Any) -> Point:
        """From a job's overrides and the :class:`memrepro.runner.RunOutcome` its task returned."""
        return cls(tuple(overrides), Path(outcome.folder), outcome.record,
                   STATES[bool(outcome.skipped), bool(outcome.restored)])


def parameters(points: Sequence[Point]) -> dict[str, list[str]]:
    """``{override key: [value text per point]}`` for the keys whose value is not the same at every point (``-``
    where a point lacks the key), in the order given; values parsed by Hydra's override grammar and shown as
    :func:`memrepro.tables.naming.value_text` shows them (``0.5``, ``[7,11]``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    seen: dict[str, tuple[str, str] | None] = {}  # override -> (key, value text); most repeat at every point

    def key_value(line: str) -> tuple[str, str] | None:
        if line not in seen:
            override = parser.parse_override(line)
            key = override.key_or_group + (f"@{override.package}" if override.package else "")
            seen[line] = None if override.is_hydra_override() else (
                key, value_text(None if override.is_delete() else override.value()))
        return seen[line]

    parsed = [dict(filter(None, map(key_value, point.overrides))) for point in points]
    keys = dict.fromkeys(key for values in parsed for key in values)
    columns = {key: [values.get(key, value_text(None)) for values in parsed] for key in keys}
    return {key: column for key, column in columns.items() if len(set(column)) > 1}


def _metrics(points: Sequence[Point]) -> list[str]:
    """The primary metrics of the points' benchmarks that were computed, in first-seen order."""
    return list(dict.fromkeys(m for point in points for m in primary_names(point.record)))


def _mean(record: RunRecord, metric: str) -> float | None:
    """The number :meth:`memrepro.runs.record.Stats.mean_text` shows (None when the point has no such metric)."""
    summary = record.summary
    if metric not in record.metric_names or not summary.n:
        return None
    return summary.split_mean.get(metric) if len(summary.splits) > 1 else summary.pooled.get(metric)


def _best(points: Sequence[Point]) -> list[bool]:
    """Per point: the best of its benchmark by that benchmark's first primary metric (ties all marked)."""
    by_dataset: dict[str, list[int]] = {}
    for i, point in enumerate(points):
        by_dataset.setdefault(point.record.dataset, []).append(i)
    best = [False] * len(points)
    for members in by_dataset.values():
        first = _metrics([points[members[0]]])
        if not first:
            continue
        values = {i: _mean(points[i].record, first[0]) for i in members}
        top = max((v for v in values.values() if v is not None), default=None)
        for i, value in values.items():
            best[i] = top is not None and value is not None and math.isclose(value, top, rel_tol=1e-12)
    return best


def summary_frames(points: Sequence[Point]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The table as shown (short parameter names, 4 decimals) and as ``sweep.csv`` holds it (full override keys,
    unrounded means and std, run folders)."""
    swept = parameters(points)
    names = short_paths(list(swept))
    metrics = _metrics(points)
    best = _best(points)
    unswept = [] if swept else labels([Run(point.folder) for point in points])  # e.g. a one-point multirun
    shown, data = [], []
    for i, point in enumerate(points):
        record = point.record
        amortized = record.latency.batched_amortized_ms_per_query
        row = {names[key]: values[i] for key, values in swept.items()} or {"run": unswept[i]}
        row.update({m: record.summary.mean_text(m) if _mean(record, m) is not None else "" for m in metrics})
        row.update({"ms/query (batched)": f"{amortized:.3f}" if amortized is not None else "", "state": point.state,
                    "best": BEST if best[i] else ""})
        shown.append(row)
        full = {key: values[i] for key, values in swept.items()}
        for m in metrics:
            full[m] = _mean(record, m)
            if len(record.summary.splits) > 1:
                full[f"{m} std"] = record.summary.split_std.get(m)
        full.update({"ms/query (batched)": amortized, "state": point.state, "best": best[i],
                     "dataset": record.dataset, "run_id": record.run_id, "folder": str(point.folder)})
        data.append(full)
    return pd.DataFrame(shown), pd.DataFrame(data)


def write_summary(points: Sequence[Point], sweep_dir: Path) -> tuple[str, list[Path]]:
    """The summary as Markdown (what the terminal shows), written with ``sweep.csv`` into ``sweep_dir`` as
    ``sweep.md``; returns (text, paths)."""
    shown, data = summary_frames(points)
    metric = next(iter(_metrics(points)), None)
    text = shown.to_markdown(index=False, disable_numparse=True) + (f"\n\n{BEST}: best by {metric}" if metric else "")
    md, csv = Path(sweep_dir) / "sweep.md", Path(sweep_dir) / "sweep.csv"
    write_text_atomic(md, f"# Sweep: {len(points)} points\n\n{text}\n")
    write_text_atomic(csv, data.to_csv(index=False))
    return text, [md, csv]


def summarize(jobs: Iterable[tuple[Sequence[str], Any]], sweep_dir: Path) -> None:
    """The end of a sweep: ``jobs`` are (overrides, task return value) per point, in launch order. Prints the
    summary and where it was written; does nothing when no point returned a run (``train -m``, ``eval -m``)."""
    from memrepro.runner import RunOutcome

    points = [Point.of(overrides, outcome) for overrides, outcome in jobs if isinstance(outcome, RunOutcome)]
    if not points:
        return
    text, paths = write_summary(points, sweep_dir)
    print(f"\nsweep summary ({len(points)} points):\n{text}\nwrote {paths[0]}, {paths[1]}", flush=True)
