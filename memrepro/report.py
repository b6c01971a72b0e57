"""Plain-text summaries of a run for the terminal (paper tables proper come from ``memrepro tables``).

Read on every skip and restore of a complete run: tabulate, not pandas (which costs more than the rest of a skip).
"""

from __future__ import annotations

from typing import Mapping

from tabulate import tabulate

from memrepro.runs.record import RunRecord


def _counts(counts: Mapping[str, int], none: str = "none") -> str:
    """``{'dropped_empty_evidence': 4}`` as ``dropped empty evidence 4``."""
    return ", ".join(f"{name.replace('_', ' ')} {n}" for name, n in counts.items()) or none


def primary_names(record: RunRecord) -> list[str]:
    """The primary metrics that were computed (``metrics.names`` may leave one out), else every computed one."""
    return [m for m in record.primary if m in record.metric_names] or list(record.metric_names)


def primary_line(record: RunRecord) -> str:
    """The primary metrics on one line (``pb_recall@5 0.3827 · pb_recall@10 0.5219``), as a sweep's points show them."""
    if not record.summary.n:
        return "(no scored queries)"
    return " · ".join(f"{m} {record.summary.mean_text(m)}" for m in primary_names(record))


def summary_table(record: RunRecord) -> str:
    """Primary metrics: per split, mean ± std of split means, pooled; then per category (pooled, with n)."""
    summary = record.summary
    names = primary_names(record)
    if not summary.n:
        return "\n".join(["(no scored queries)", *(f"WARNING: {w}" for w in record.warnings)])
    rows = []
    for split, values in summary.splits.items():
        rows.append({"rows": split, "n": values["n"], **{m: f"{values[m]:.4f}" for m in names}})
    if len(summary.splits) > 1:
        rows.append({"rows": "mean ± std of split means", "n": summary.n,
                     **{m: f"{summary.split_mean[m]:.4f} ± {summary.split_std[m]:.4f}" for m in names}})
    rows.append({"rows": "pooled", "n": summary.n, **{m: f"{summary.pooled[m]:.4f}" for m in names}})
    for code, cat in summary.categories.items():
        rows.append({"rows": f"category {code} {cat.name} (pooled)", "n": cat.n,
                     **{m: f"{cat.pooled[m]:.4f}" for m in names}})
    table = tabulate(rows, headers="keys", tablefmt="pipe")
    latency = record.latency
    batch1 = latency.batch1
    lines = [table, ""]
    if latency.batched_amortized_ms_per_query is not None:
        lines.append(f"latency: batched {latency.batched_amortized_ms_per_query:.3f} ms/query amortized; "
                     + (f"batch-1 mean {batch1['mean_ms']:.3f} ms (median {batch1['median_ms']:.3f}, "
                        f"p90 {batch1['p90_ms']:.3f}, n={batch1['n']})" if batch1.get("n") else "batch-1 not measured"))
    counts = record.counts
    lines.append(f"queries: {counts.n_total} rows, {counts.n_scored} scored, excluded: {_counts(counts.n_excluded)}; "
                 f"loader: {_counts(counts.loader)}")
    lines.append(f"encoder: {record.encoder['label']}; encoded when computed: "
                 f"{_counts(record.encoded or {}, 'nothing (all from the cache)')}")
    if record.data_verified is False:
        lines.append("DATA UNVERIFIED: a data file's sha256 is not the pinned one (see warnings); tables never show "
                     "this run beside the paper")
    lines += [f"WARNING: {w}" for w in record.warnings]
    return "\n".join(lines)
