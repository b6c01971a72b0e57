"""Faithful vs the other Recollection engines: agreement and speed, from pairs of runs that differ only in the engine.

A pair is two complete runs whose dataset, encoder and retriever settings are equal except ``engine``: the
faithful engine against the other one (``compiled``, the faithful engine's loop in numba).
Per pair: the share of queries with identical stored top-N lists, the delta of the primary metric (pooled), and
the retrieval wall time of each (``timings.retrieve_s``, the whole query set through ``retrieve``) with their
ratio. Runs of one Hydra multirun (``retriever.engine=faithful,compiled``) share a process and its
conditions; runs made at different times may not, so the ratio is a measurement of this machine, not a constant. A
pair whose runs come from different processes (``provenance.hardware.process``; runs older than that field: made
more than ``SIDE_BY_SIDE_S`` apart) is marked "no" under "side by side" and left out of the speed-up summary (its
agreement still counts).
"""

from __future__ import annotations

import json
import statistics
from typing import Any, Sequence

import pandas as pd

from memrepro.runs.identity import NON_MEASURING_RETRIEVER_KEYS
from memrepro.tables.runs import Run
from memrepro.tables.settings import PATH

OTHER_ENGINES = ("compiled",)  # the batched and projected engines were retired; their old runs stay apart
DELTA = "Δ (engine − faithful)"
SIDE_BY_SIDE_S = 600.0  # runs without a process id: a multirun's runs of one setting follow each other in seconds


def _key(run: Run) -> str:
    retriever = {k: v for k, v in run.retriever.items() if k not in NON_MEASURING_RETRIEVER_KEYS}
    return json.dumps({"dataset": run.config["dataset"], "encoder": run.config["encoder"].get("model"),
                       "retriever": retriever}, sort_keys=True, default=str)


def engine_pairs(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """``(faithful, other)`` pairs for each other engine; the newest run of each engine per configuration."""
    groups: dict[str, dict[str, Run]] = {}
    for run in runs:
        engine = run.retriever.get("engine")
        if engine not in ("faithful", *OTHER_ENGINES):
            continue
        slot = groups.setdefault(_key(run), {})
        if engine not in slot or run.created > slot[engine].created:
            slot[engine] = run
    return [(g["faithful"], g[other]) for _, g in sorted(groups.items()) for other in OTHER_ENGINES
            if "faithful" in g and other in g]


def compare(faithful: Run, other: Run) -> dict[str, Any]:
    a, b = faithful.rows, other.rows
    same = statistics.fmean(float([m for m, _ in x["top"]] == [m for m, _ in y["top"]]) for x, y in zip(a, b))
    primary = faithful.record.primary[0]
    delta = other.record.summary.pooled[primary] - faithful.record.summary.pooled[primary]
    slow, fast = faithful.record.timings["retrieve_s"], other.record.timings["retrieve_s"]
    known = faithful.retriever_settings
    settings = ", ".join(f"{name}={known[path]}" for name, path in PATH.items() if path in known)  # setting order
    return {"dataset": faithful.dataset, "encoder": faithful.encoder_label, "retriever": faithful.retriever_name,
            "settings": settings, "engine": other.retriever["engine"], "queries": len(a), "identical rankings": same,
            "metric": primary, DELTA: delta, "faithful retrieve (s)": slow, "engine retrieve (s)": fast,
            "speed-up": slow / max(fast, 1e-9),
            "side by side": _side_by_side(faithful, other)}


def _side_by_side(a: Run, b: Run) -> bool:
    """Whether two runs were timed in one process (one multirun): the same process id, or for runs that predate
    the id, creation times within ``SIDE_BY_SIDE_S``."""
    process_a, process_b = ((r.record.provenance.hardware or {}).get("process") for r in (a, b))
    if process_a or process_b:
        return process_a == process_b
    return abs(a.created - b.created) <= SIDE_BY_SIDE_S


def agreement_table(runs: Sequence[Run]) -> tuple[pd.DataFrame, list[str]]:
    """Display frame (one row per pair) and one summary line per engine."""
    rows = [compare(f, o) for f, o in engine_pairs(runs)]
    if not rows:
        return pd.DataFrame(), ["no faithful/compiled pairs among the runs"]
    frame = pd.DataFrame(rows)
    summary = []
    for engine, part in frame.groupby("engine", sort=True):
        ratios = part.loc[part["side by side"], "speed-up"].tolist()
        apart = len(part) - len(ratios)
        speed = (f"speed-up median {statistics.median(ratios):.1f}x (min {min(ratios):.1f}x, max {max(ratios):.1f}x)"
                 if ratios else "no side-by-side pair timed")
        if apart:
            speed += (f" over the {len(ratios)} side-by-side pairs" if ratios else "") + \
                f" ({apart} timed apart, left out)"
        summary.append(f"{engine}: {len(part)} pairs: identical rankings mean {part['identical rankings'].mean():.2%} "
                       f"(min {part['identical rankings'].min():.2%}); max |Δ| {part[DELTA].abs().max():.4f}; {speed}")
    shown = frame.assign(**{
        "identical rankings": frame["identical rankings"].map(lambda v: f"{v:.2%}"),
        DELTA: frame[DELTA].map(lambda v: f"{v:+.4f}"),
        "faithful retrieve (s)": frame["faithful retrieve (s)"].map(lambda v: f"{v:.2f}"),
        "engine retrieve (s)": frame["engine retrieve (s)"].map(lambda v: f"{v:.2f}"),
        "speed-up": frame["speed-up"].map(lambda v: f"{v:.1f}x"),
        "side by side": frame["side by side"].map(lambda v: "yes" if v else "no")})
    return shown.astype(str), summary
