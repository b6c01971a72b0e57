"""RF-Mem's sensitivity figures (14–17) from our sweep runs, with an index that names every gap.

Which runs feed which figure is declared here (the sweeps themselves are entries of ``conf/experiments.yaml``):

* Figure 14 — α × τ heatmaps on PersonaBench, RF-Mem with the Table 2 presets (K = 5 → R@5, K = 10 → R@10);
* Figure 15 — B × F on LongMemEval-S, Recollection (``recollection_longmemeval``); the paper's M panels are a gap;
* Figure 16 — α on LongMemEval-S, Recollection (the paper uses M, absent here: S stands in, labelled);
* Figure 17 — K sensitivity: the paper plots PersonaMem reader accuracy (contexts and an LLM reader absent here);
  PersonaBench recall at K for Familiarity / Recollection / RF-Mem (``*_personabench`` presets) stands in.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from memrepro.files import write_text_atomic
from memrepro.tables import committed, figures
from memrepro.tables.presets import familiarity_settings, recollection_settings
from memrepro.runs.identity import NON_MEASURING_RETRIEVER_KEYS as IGNORE
from memrepro.tables.runs import Run
from memrepro.tables.settings import PATH, SHORT


# the swept settings by their config paths (their short names, which the drawing functions label axes with: SHORT)
ALPHA, TAU, K, BEAM, FANOUT = (PATH[name] for name in ("alpha", "tau", "k", "beam", "fanout"))


def _without(settings: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k not in keys}


def _short(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with swept columns under their short names (``alpha``), ``attrs`` kept."""
    renamed = frame.rename(columns=SHORT)
    renamed.attrs = dict(frame.attrs)
    return renamed


def _complete_rows(frame: pd.DataFrame, column: str, across: str) -> pd.DataFrame:
    """Drop values of ``column`` seen at a single ``across`` value (a table preset's own point outside the grid)."""
    if frame.empty:
        return frame
    counts = frame.groupby(["encoder", column])[across].transform("nunique")
    kept = frame[counts > 1]
    kept.attrs = dict(frame.attrs)
    return kept


def _swept(frame: pd.DataFrame, vary: Sequence[str]) -> pd.DataFrame:
    """Keep encoders with at least two points along ``vary``: a preset's lone run (e.g. the Table 3 row) is no sweep."""
    if frame.empty:
        return frame
    points = frame[list(vary)].astype(str).agg("|".join, axis=1)
    kept = frame[points.groupby(frame["encoder"]).transform("nunique") > 1]
    kept.attrs = dict(frame.attrs)
    return kept


def render_figures(runs: Sequence[Run], out_dir: Path) -> list[str]:
    """Writes each figure our runs allow; returns index lines (one per figure: file or the reason it is absent)."""
    lines: list[str] = []

    def attempt(label: str, draw: Any, gap_note: str = "") -> None:
        try:
            paths = draw()
        except ValueError as exc:  # no runs, or runs of unlike settings: say so instead of drawing
            lines.append(f"- **{label}**: not drawn — {exc}")
            return
        names = ", ".join(f"[{p.name}]({p.name})" for p in paths)
        lines.append(f"- **{label}**: {names}" + (f" — {gap_note}" if gap_note else ""))

    for k, metric in ((5, "pb_recall@5"), (10, "pb_recall@10")):
        settings = _without(recollection_settings(f"rfmem_personabench_table2_r{k}"), ALPHA, TAU)

        def fig14(settings: dict[str, Any] = settings, metric: str = metric, k: int = k) -> list[Path]:
            frame = _short(figures.sweep_frame(runs, dataset="personabench", retriever="rfmem", vary=(ALPHA, TAU),
                                               metrics=(metric,), where=settings, ignore=IGNORE))
            frame = _complete_rows(frame, "tau", "alpha")
            return figures.figure_alpha_tau(frame, (metric,), out_dir / f"figure14_alpha_tau_k{k}",
                                            f"RF-Mem Fig. 14: α × τ on PersonaBench, K = {k} (rfmem Table 2 preset)")
        attempt(f"Figure 14 (R@{k})", fig14, "BGE row absent (no offline weights); MiniLM = all-MiniLM-L6-v2 "
                                             "standing in for multi-qa-MiniLM-L6-cos-v1")

    lme = recollection_settings("recollection_longmemeval")
    attempt("Figure 15", lambda: figures.figure_beam_fanout(
        _swept(_short(figures.sweep_frame(runs, dataset="longmemeval_s", retriever="recollection",
                                          vary=(BEAM, FANOUT), metrics=("recall_all@5", "recall_all@10",
                                                                        "recall_all@50"),
                                          where=_without(lme, BEAM, FANOUT), ignore=IGNORE)), ("beam", "fanout")),
        ("recall_all@5", "recall_all@10", "recall_all@50"), out_dir / "figure15_beam_fanout",
        "RF-Mem Fig. 15: beam B × fanout F, Recollection, LongMemEval-S"),
        "LongMemEval-M panels absent (file not in the data folder); cleaned S, all-MiniLM-L6-v2 stand-in")
    attempt("Figure 16", lambda: figures.figure_alpha_depth(
        _swept(_short(figures.sweep_frame(runs, dataset="longmemeval_s", retriever="recollection", vary=(ALPHA,),
                                          metrics=("recall_all@5", "recall_all@10", "recall_all@50"),
                                          where=_without(lme, ALPHA), ignore=IGNORE)), ("alpha",)),
        ("recall_all@5", "recall_all@10", "recall_all@50"), out_dir / "figure16_alpha_depth",
        "RF-Mem Fig. 16: α at depths 5 / 10 / 50, Recollection, LongMemEval-S"),
        "the paper plots LongMemEval-M (absent here); S stands in")

    def fig17() -> list[Path]:
        by_method = {
            "Familiarity": figures.sweep_frame(runs, dataset="personabench", retriever="familiarity", vary=("k",),
                                               metrics=("pb_recall",), where=_without(familiarity_settings(5), "k"),
                                               ignore=IGNORE),
            "Recollection": _short(figures.sweep_frame(
                runs, dataset="personabench", retriever="recollection", vary=(K,), metrics=("pb_recall",),
                where=_without(recollection_settings("recollection_personabench"), K), ignore=IGNORE)),
            # the run.sh preset probes with the retrieval K (probe_k = k), so probe_k moves with k by design
            "RF-Mem": _short(figures.sweep_frame(
                runs, dataset="personabench", retriever="rfmem", vary=(K,), metrics=("pb_recall",),
                where=_without(recollection_settings("rfmem_personabench"), K, "gate.probe_k"),
                ignore=(*IGNORE, "gate.probe_k"))),
        }
        return figures.figure_k_sensitivity(by_method, "pb_recall", out_dir / "figure17_k_sensitivity",
                                            "RF-Mem Fig. 17 (stand-in): recall at K on PersonaBench")
    attempt("Figure 17", fig17, "the paper plots PersonaMem reader accuracy (contexts file and an LLM reader are "
                                "absent here); PersonaBench recall at K (run.sh presets) stands in")
    return lines


NOT_DRAWN = ": not drawn — "
REDRAWN_LATER = (f" {committed.MARK} not redrawn: its runs are not in results/runs, so the committed figure is kept "
                 "(`python -m memrepro experiments` computes the runs)")


def _label(line: str) -> str:
    return line.split("**")[1] if line.count("**") >= 2 else line


def write_index(lines: Sequence[str], out_dir: Path) -> Path:
    """The figures' index. A figure that cannot be drawn now but whose committed files are there keeps its
    committed line, marked: a missing run never takes a committed figure out of the index."""
    target = out_dir / "README.md"
    before = {_label(line): line for line in (target.read_text(encoding="utf-8").splitlines()
                                              if target.is_file() else []) if line.startswith("- **")}
    kept = []
    for line in lines:
        old = before.get(_label(line), "")
        files = [out_dir / name for name in re.findall(r"\]\(([^)]+)\)", old)]
        if NOT_DRAWN in line and old and NOT_DRAWN not in old and files and all(f.is_file() for f in files):
            line = old if old.endswith(REDRAWN_LATER) else old + REDRAWN_LATER
        kept.append(line)
    write_text_atomic(target, "# RF-Mem figures from our sweeps\n\nRendered by `python -m memrepro tables` from "
                      "`results/runs` (PNG and PDF). Each line names the figure's files or why it is absent.\n\n"
                      + "\n".join(kept) + "\n")
    return target
