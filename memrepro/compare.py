"""Paired comparison of complete runs (``python -m memrepro compare``) and the cross-benchmark leaderboard.

Runs are paired over their scored units ``"{split}::{query_id}"`` with the seeded paired bootstrap of
``memrepro.evaluation.significance`` (the routine the paper tables use). Two runs are comparable only when they
read the same data (``provenance.data_sha256``) and score the same units; anything else is refused with the
difference named.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from memrepro.errors import EXIT_BAD_INPUT, MemreproError
from memrepro.evaluation.power import minimum_detectable_difference
from memrepro.evaluation.significance import paired_bootstrap
from memrepro.runs.folder import COMPLETE, run_problem
from memrepro.tables.naming import labels
from memrepro.tables.runs import Run


class CompareError(MemreproError, ValueError):
    """A run folder that cannot be compared (absent, incomplete, damaged, other data or queries): bad input."""

    exit_code = EXIT_BAD_INPUT


def load_run(path: str | Path) -> Run:
    folder = Path(path).expanduser()
    if not folder.exists():
        raise CompareError(f"{folder}: does not exist; pass a run folder, "
                           "results/runs/<dataset>/<retriever>/<encoder>/<run id>")
    if not folder.is_dir():
        raise CompareError(f"{folder}: is a file, not a run folder; pass results/runs/<dataset>/<retriever>/<encoder>/"
                           "<run id>")
    if not (folder / COMPLETE).is_file():
        raise CompareError(f"{folder}: not a complete run folder (no {COMPLETE} marker); pass a folder under "
                           "results/runs/<dataset>/<retriever>/<encoder>/<run id>")
    problem = run_problem(folder)  # as the tables read runs: a damaged file is refused, never compared
    if problem:
        raise CompareError(f"{problem}; rerun its command to recompute it")
    return Run(folder)


def check_comparable(a: Run, b: Run, metrics: Sequence[str], shared: bool = False) -> None:
    """Refuse runs on different data, benchmarks or query units, naming the difference. ``shared``: different
    unit sets are paired over the units both scored (e.g. a run over fewer split seeds), when there are any."""
    if a.dataset != b.dataset:
        raise CompareError(f"cannot pair {a.folder} and {b.folder}: different benchmarks ({a.dataset} vs {b.dataset})")
    hash_a, hash_b = (r.record.provenance.data_sha256 for r in (a, b))
    if hash_a != hash_b:
        files_a = {f["path"]: f["sha256"][:12] for f in a.record.provenance.files}
        files_b = {f["path"]: f["sha256"][:12] for f in b.record.provenance.files}
        differ = sorted(set(files_a.items()) ^ set(files_b.items()))[:4]
        raise CompareError(f"cannot pair {a.folder} and {b.folder}: different data (data_sha256 {hash_a[:12]}… vs "
                           f"{hash_b[:12]}…; files differing: {differ})")
    for metric in metrics:
        for run in (a, b):
            if metric not in run.record.metric_names:
                raise CompareError(f"{run.folder}: metric {metric!r} was not computed (has "
                                   f"{', '.join(run.record.metric_names)}); choose --metric from those")
    units_a, units_b = set(a.per_unit(metrics[0])), set(b.per_unit(metrics[0]))
    if shared and units_a & units_b:
        return
    if units_a != units_b:
        only_a, only_b = sorted(units_a - units_b), sorted(units_b - units_a)
        raise CompareError(f"cannot pair {a.folder} and {b.folder}: different scored query sets ({len(units_a)} vs "
                           f"{len(units_b)} units; only in the first: {len(only_a)} e.g. {only_a[:2]}, only in the "
                           f"second: {len(only_b)} e.g. {only_b[:2]}); --shared pairs them over the units both "
                           "scored")


@dataclass(frozen=True)
class Line:
    metric: str
    group: str  # "all" or "<category code> <name>"
    n: int
    baseline: float
    other: float
    delta: float
    ci_low: float
    ci_high: float
    p_text: str
    significant: bool


def compare(runs: Sequence[Run], metrics: Sequence[str] | None = None, by: str | None = None,
            resamples: int = 10_000, seed: int = 13, shared: bool = False) -> pd.DataFrame:
    """One row per (other run, metric[, category]): the first run is the baseline. ``shared``: pair runs that
    scored different units over the units both scored; the means are then those units' pooled means."""
    if len(runs) < 2:
        raise CompareError("compare needs at least two run folders")
    if by not in (None, "category"):
        raise CompareError(f"--by {by!r}: only 'category' is supported")
    base = runs[0]
    metrics = list(metrics or base.record.primary or base.record.metric_names)
    run_names = labels(runs)  # each run by the settings that tell it apart from the others (alpha=0.5, tau=0.2)
    rows = []
    for other, name in zip(runs[1:], run_names[1:]):
        check_comparable(base, other, metrics, shared)
        categories = {f"{r['split']}::{r['query_id']}": r["category"] for r in base.rows if r["excluded"] is None}
        names = {code: c.name or code for code, c in base.record.summary.categories.items()}
        for metric in metrics:
            a, b = base.per_unit(metric), other.per_unit(metric)
            same_units = set(a) == set(b)
            if not same_units:  # --shared: only the units both scored (checked non-empty above)
                a = {u: v for u, v in a.items() if u in b}
                b = {u: b[u] for u in a}
            groups = [("all", list(a))]
            if by == "category":
                groups += [(f"{code} {names.get(code, code)}", [u for u in a if categories[u] == code])
                           for code in names]
            for group, units in groups:
                if not units:
                    continue
                ua, ub = {u: a[u] for u in units}, {u: b[u] for u in units}
                test = paired_bootstrap(ub, ua, resamples=resamples, seed=seed)
                power = minimum_detectable_difference(ub, ua)
                mean_a, mean_b = sum(ua.values()) / len(ua), sum(ub.values()) / len(ub)
                whole = group == "all" and same_units  # the runs' own summaries describe exactly these units
                rows.append({
                    "baseline": run_names[0], "run": name, "metric": metric, "queries": group,
                    "n": test.n,
                    label_col("baseline"): base.record.summary.mean_text(metric) if whole else f"{mean_a:.4f}",
                    label_col("run"): other.record.summary.mean_text(metric) if whole else f"{mean_b:.4f}",
                    "Δ": f"{test.delta:+.4f}{'*' if test.significant else ''}",
                    "95% CI": f"[{test.ci_low:+.4f}, {test.ci_high:+.4f}]",
                    "p": test.p_text(),
                    "MDD": f"{power.mdd:.4f}",
                    "verdict": "" if test.significant else power.verdict(test.delta),
                })
    return pd.DataFrame(rows)


def runs_note(runs: Sequence[Run]) -> str:
    """Which folder each run's name stands for (the names leave out what the runs share)."""
    return "Runs: " + "; ".join(f"{name} = {run.folder}" for name, run in zip(labels(runs), runs))


def label_col(which: str) -> str:
    return "baseline mean" if which == "baseline" else "run mean"


LEGEND = ("Means: mean ± std of split means where the benchmark has several splits (LoCoMo's 5 seeds), else the "
          "mean; per category the pooled mean. Δ = run − baseline, the pooled mean of per-query differences over "
          "the shared (split, query) units; 95% CI and two-sided p from the paired bootstrap "
          "(memrepro.evaluation.significance, {resamples} resamples, seed {seed}); * : p < 0.05. MDD: the minimum "
          "detectable difference of that comparison (α = 0.05, power 0.8, paired t approximation, "
          "memrepro.evaluation.power); a difference below it that the test does not find is not distinguishable at "
          "that n. Findings of the protocol check (docs/checks.md) are printed above the numbers.")
