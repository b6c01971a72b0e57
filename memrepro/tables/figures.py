"""The RF-Mem paper's sensitivity figures (14-17), drawn from our own completed runs under ``results/`` only.

Nothing here runs a retriever: every point is a completed run folder
(``results/runs/<dataset>/<retriever>/<encoder>/<run id>/`` with ``COMPLETE``) read through
:func:`memrepro.tables.runs.complete_runs`. A point that was never run is shown as missing ("n/a" cell, gap
in a line), never interpolated, and the published curves are not redrawn.

* :func:`figure_alpha_tau` - Figure 14: alpha x tau heatmaps of Recall@5 / Recall@10 on PersonaBench for the
  RF-Mem retriever, one panel per (encoder, metric).
* :func:`figure_beam_fanout` - Figure 15: beam B / fanout F sensitivity of Recollection on LongMemEval-S, one
  panel per metric (``recall_all@5/@10/@50``), x = F, one line per B.
* :func:`figure_alpha_depth` - Figure 16: alpha under varying depth K for Recollection on LongMemEval-S, one
  panel per K, x = alpha, one line per metric.
* :func:`figure_k_sensitivity` - Figure 17: K sensitivity of familiarity / recollection / RF-Mem, x = K, one
  line per method (e.g. PersonaBench ``pb_recall``, recall at the list length).

:func:`sweep_frame` turns runs into the tidy table the figure functions take; it refuses (``ValueError``) to
put runs whose other settings differ into one table, so a figure never mixes unlike runs. Figures are written
as ``<stem>.png`` (150 dpi) and ``<stem>.pdf``, atomically, without timestamps, so re-rendering unchanged
results gives byte-identical files.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.style
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from memrepro.paths import in_project
from memrepro.runs.identity import NON_MEASURING_RETRIEVER_KEYS, SOURCE_SETTINGS
from memrepro.tables.runs import Run, is_number as _is_number, preferred, same_setting as _same
from memrepro.tables.settings import LABEL

DEFAULT_IGNORE = NON_MEASURING_RETRIEVER_KEYS
# the encoder itself is compared through its label (the run folder), so its model, path and target are not settings
_ENCODER_SKIP = frozenset({*SOURCE_SETTINGS, "_target_", "model", "path", "allow_substitute"})
DPI = 150
_SAVE_METADATA = {"png": {"Software": None}, "pdf": {"CreationDate": None}}
_RC = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "pdf.fonttype": 42,
    "svg.hashsalt": "memrepro",
}
HEATMAP_CMAP = "YlOrRd"  # warmer = higher
_MARGIN = {"left": 0.8, "right": 0.25, "top": 0.65, "below": 0.5, "wgap": 0.95, "hgap": 0.9}  # inches
_MISSING = object()


# --------------------------------------------------------------------------------------------- selecting runs


def _lookup(run: Run, key: str) -> Any:
    """A retriever setting by dotted path (``k``, ``recollection.alpha``), or a dataset / encoder one when
    prefixed (``dataset.noise``)."""
    section, _, name = key.partition(".")
    if name and section in ("dataset", "encoder"):
        return (run.config.get(section) or {}).get(name, _MISSING)
    return run.retriever_settings.get(key, _MISSING)


def _fixed_settings(run: Run, skip: set[str]) -> dict[str, Any]:
    """Every setting that must agree across the runs of one figure: retriever, dataset and encoder options."""
    fixed = {k: v for k, v in run.retriever_settings.items() if k not in skip}
    # the dataset node as the run id reads it: where the data lives left out, the published gold named or absent
    for section, node, never in (("dataset", run.settings.get("dataset"), frozenset()),
                                 ("encoder", run.config.get("encoder"), _ENCODER_SKIP)):
        for k, v in (node or {}).items():
            if k not in never and f"{section}.{k}" not in skip:
                fixed[f"{section}.{k}"] = v
    return fixed


def _sort_key(value: Any) -> tuple:
    if value is _MISSING:
        return (3, 0.0, "")
    if _is_number(value):
        return (0, float(value), "")
    if value is None:
        return (2, 0.0, "")
    return (1, 0.0, str(value))


def _show(value: Any) -> str:
    return "<absent>" if value is _MISSING else repr(value)


def _group(items: list[tuple[Any, Run]]) -> list[tuple[Any, list[Run]]]:
    """Runs grouped by a key compared with :func:`_same` (first-seen order)."""
    groups: list[tuple[Any, list[Run]]] = []
    for key, run in items:
        for seen, members in groups:
            if _same(seen, key):
                members.append(run)
                break
        else:
            groups.append((key, [run]))
    return groups


def sweep_frame(
    runs: Sequence[Run],
    *,
    dataset: str,
    retriever: str,
    vary: Sequence[str],
    metrics: Sequence[str],
    where: Mapping[str, Any] | None = None,
    ignore: Sequence[str] = DEFAULT_IGNORE,
) -> pd.DataFrame:
    """One row per sweep point: columns ``encoder``, each ``vary`` key, each metric (pooled), ``folder``.

    Selects the runs of ``dataset`` whose retriever folder is ``retriever`` and whose retriever config matches
    every ``where`` item (numbers within ``SETTING_TOLERANCE``; a ``dataset.``/``encoder.`` prefix addresses those
    configs). All other settings - retriever keys except ``vary``, ``where`` and ``ignore``, plus the dataset
    options and the encoder's embedding options - must agree across the selection, else ``ValueError`` naming
    the keys that differ. Several runs of one (encoder, vary values) point are resolved to one: the faithful
    engine first, then the newest ``provenance.created``. A metric absent from a run is NaN (drawn as missing);
    one absent from every run is an error. Rows are sorted by encoder, then the vary values. ``frame.attrs``
    records the dataset, retriever, ``where``, the common fixed settings and the folders dropped as duplicates.
    An empty frame (with those columns) when nothing matches.
    """
    vary, metrics, where = tuple(vary), tuple(metrics), dict(where or {})
    if not vary:
        raise ValueError("sweep_frame needs at least one `vary` key")
    if not metrics:
        raise ValueError("sweep_frame needs at least one metric")
    columns = ["encoder", *vary, *metrics, "folder"]
    attrs: dict[str, Any] = {"dataset": dataset, "retriever": retriever, "vary": vary, "where": where,
                             "fixed": {}, "dropped": [], "n_runs": 0}

    def matches(run: Run) -> bool:
        return all(_same(_lookup(run, k), v) for k, v in where.items())

    selected = [r for r in runs if r.folder.parts[-4] == dataset and r.retriever_name == retriever and matches(r)]
    if not selected:
        frame = pd.DataFrame(columns=columns)
        frame.attrs.update(attrs)
        return frame
    for run in selected:
        absent = [k for k in vary if _lookup(run, k) is _MISSING]
        if absent:
            raise ValueError(f"run {run.folder} has no setting {absent} to vary")

    skip = set(vary) | set(where) | set(ignore)
    settings = _group([(_fixed_settings(r, skip), r) for r in selected])
    if len(settings) > 1:
        keys = sorted(set().union(*(s for s, _ in settings)))
        differing = [k for k in keys
                     if not all(_same(s.get(k, _MISSING), settings[0][0].get(k, _MISSING)) for s, _ in settings)]
        details = "; ".join(
            f"{k}: " + ", ".join(dict.fromkeys(_show(v) for v in sorted((s.get(k, _MISSING) for s, _ in settings),
                                                                        key=_sort_key)))
            for k in differing)
        raise ValueError(
            f"the {len(selected)} {dataset}/{retriever} runs matching where={where} form {len(settings)} groups "
            f"of different fixed settings; they differ in {differing} ({details}). Pin them with `where=`, add "
            f"them to `vary`, or list them in `ignore` if they cannot change the metrics.")

    for metric in metrics:
        if all(metric not in r.record.summary.pooled for r in selected):
            available = sorted(selected[0].record.summary.pooled)
            raise ValueError(f"metric {metric!r} is in no selected run's pooled summary (have {available})")

    points = _group([((r.encoder_label, *(_lookup(r, k) for k in vary)), r) for r in selected])
    records, dropped = [], []
    for (encoder, *values), members in points:
        best = preferred(members)
        dropped.extend(str(r.folder) for r in members if r is not best)
        pooled = best.record.summary.pooled
        records.append({"encoder": encoder, **dict(zip(vary, values)),
                        **{m: float(pooled[m]) if pooled.get(m) is not None else math.nan for m in metrics},
                        "folder": str(best.folder)})
    records.sort(key=lambda row: (row["encoder"], *(_sort_key(row[k]) for k in vary), row["folder"]))
    frame = pd.DataFrame.from_records(records, columns=columns)
    attrs.update(fixed=settings[0][0], dropped=sorted(dropped), n_runs=len(selected))
    frame.attrs.update(attrs)
    return frame


# --------------------------------------------------------------------------------------------- drawing helpers


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    if frame is None or len(frame) == 0:
        raise ValueError(f"{what}: the frame is empty (no completed run matched); nothing to draw")
    absent = [c for c in columns if c not in frame.columns]
    if absent:
        raise ValueError(f"{what}: the frame has no column(s) {absent} (has {list(frame.columns)})")


def _values(series: pd.Series) -> list[Any]:
    """The distinct values of a parameter column, in numeric order."""
    distinct: list[Any] = []
    for value in series.tolist():
        if not any(_same(value, seen) for seen in distinct):
            distinct.append(value)
    return sorted(distinct, key=_sort_key)


def _label(value: Any) -> str:
    return f"{value:g}" if _is_number(value) else str(value)


def _param(name: str) -> str:
    return LABEL.get(name, name)


def _encoders(frame: pd.DataFrame) -> list[str]:
    return sorted(set(frame["encoder"]))


def _line(frame: pd.DataFrame, x: str, metric: str, grid: list[Any]) -> np.ndarray:
    """``metric`` at each ``grid`` value of ``x`` (NaN where no run), so a line breaks instead of bridging."""
    out = np.full(len(grid), np.nan)
    for xv, yv in zip(frame[x].tolist(), frame[metric].tolist()):
        for i, g in enumerate(grid):
            if _same(xv, g):
                if not np.isnan(out[i]):
                    raise ValueError(f"two rows share {x}={_label(g)} for {metric}; add the other setting to `vary`"
                                     " and plot it separately")
                out[i] = yv
    return out


def _footnote(frames: Mapping[str, pd.DataFrame], extra: str = "") -> str:
    parts = []
    datasets = sorted({str(f.attrs.get("dataset")) for f in frames.values() if f.attrs.get("dataset")})
    if datasets:
        parts.append("dataset: " + ", ".join(datasets))
    retrievers = [str(f.attrs.get("retriever") or name) for name, f in frames.items()]
    if any(retrievers):
        parts.append(("retriever: " if len(retrievers) == 1 else "methods: ") + ", ".join(retrievers))
    encoders = sorted(set().union(*(set(f["encoder"]) for f in frames.values())))
    parts.append(("encoder: " if len(encoders) == 1 else "encoders: ") + ", ".join(encoders))
    for name, f in frames.items():
        where = f.attrs.get("where")
        if where:
            prefix = f"{name} " if len(frames) > 1 else ""
            parts.append(prefix + "fixed " + ", ".join(f"{k}={_label(v)}" for k, v in sorted(where.items())))
    points = sum(len(f) for f in frames.values())
    dropped = sum(len(f.attrs.get("dropped") or ()) for f in frames.values())
    roots = sorted({in_project(Path(folder).parents[4]) for f in frames.values() for folder in f["folder"]
                    if len(Path(folder).parts) > 5})
    source = f"{points} points, each a completed run of ours" + (f" under {', '.join(roots)}" if roots else "")
    if dropped:
        source += f" ({dropped} duplicate run(s) of the same point set aside, faithful engine / newest kept)"
    parts.append(source + "; nothing interpolated")
    if extra:
        parts.append(extra)
    return " · ".join(parts)


@contextlib.contextmanager
def _style() -> Iterator[None]:
    """Matplotlib defaults plus our sizes, whatever the user's matplotlibrc says; restored afterwards."""
    with matplotlib.style.context("default"), matplotlib.rc_context(_RC):
        yield


def _figure(nrows: int, ncols: int, panel: tuple[float, float]) -> tuple[Figure, Any]:
    """``nrows x ncols`` panels of ``panel`` inches with fixed margins; :func:`_finish` adds title and footnote.

    The layout is plain arithmetic in inches, not matplotlib's constrained-layout solver: the solver's result
    varies in the last float digits from run to run, which changes the PDF bytes."""
    width = _MARGIN["left"] + ncols * panel[0] + (ncols - 1) * _MARGIN["wgap"] + _MARGIN["right"]
    body = _MARGIN["top"] + nrows * panel[1] + (nrows - 1) * _MARGIN["hgap"] + _MARGIN["below"]
    fig = Figure(figsize=(width, body))
    axes = fig.subplots(nrows, ncols, squeeze=False,
                        gridspec_kw={"wspace": _MARGIN["wgap"] / panel[0], "hspace": _MARGIN["hgap"] / panel[1]})
    return fig, axes


def _finish(fig: Figure, title: str, footnote: str) -> None:
    """Title on top, the provenance footnote below the panels (the figure grows to make room for it)."""
    width, body = (float(v) for v in fig.get_size_inches())
    wrapped = textwrap.wrap(footnote, width=max(60, int(width * 17)))
    foot = 0.15 + 0.13 * len(wrapped)
    height = body + foot
    fig.set_size_inches(width, height)
    fig.subplots_adjust(left=_MARGIN["left"] / width, right=1 - _MARGIN["right"] / width,
                        top=1 - _MARGIN["top"] / height, bottom=(foot + _MARGIN["below"]) / height)
    fig.suptitle(title, y=1 - 0.12 / height, va="top")
    fig.text(0.1 / width, 0.1 / height, "\n".join(wrapped), ha="left", va="bottom", fontsize=7, color="0.3")


def _save(fig: Figure, out_stem: Path) -> list[Path]:
    """``<stem>.png`` and ``<stem>.pdf``, each written to a temporary name beside it and renamed into place."""
    out_stem = Path(out_stem)
    out_stem.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt, metadata in _SAVE_METADATA.items():
        target = out_stem.with_name(f"{out_stem.name}.{fmt}")
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                fig.savefig(handle, format=fmt, dpi=DPI, metadata=metadata)
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        written.append(target)
    return written


# --------------------------------------------------------------------------------------------- figure 14


def heatmap_grid(frame: pd.DataFrame, metric: str, *, encoder: str | None = None, x: str = "alpha",
                 y: str = "tau") -> pd.DataFrame:
    """The heatmap matrix of one panel: index = ``y`` values, columns = ``x`` values (both ascending, the union
    over the whole frame so panels share axes), NaN where that point was not run."""
    _require(frame, ["encoder", x, y, metric], "heatmap_grid")
    if encoder is None:
        encoders = _encoders(frame)
        if len(encoders) != 1:
            raise ValueError(f"heatmap_grid: the frame holds encoders {encoders}; name one")
        encoder = encoders[0]
    xs, ys = _values(frame[x]), _values(frame[y])
    matrix = np.full((len(ys), len(xs)), np.nan)
    filled = np.zeros_like(matrix, dtype=bool)
    for _, row in frame[frame["encoder"] == encoder].iterrows():
        i = next(i for i, v in enumerate(ys) if _same(v, row[y]))
        j = next(j for j, v in enumerate(xs) if _same(v, row[x]))
        if filled[i, j]:
            raise ValueError(f"heatmap_grid: two rows at {x}={_label(xs[j])}, {y}={_label(ys[i])} for {encoder}")
        matrix[i, j], filled[i, j] = row[metric], True
    return pd.DataFrame(matrix, index=pd.Index(ys, name=y), columns=pd.Index(xs, name=x))


def _heatmap(fig: Figure, ax: Any, grid: pd.DataFrame) -> None:
    values = grid.to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if vmin == vmax:
        vmin, vmax = vmin - 0.5e-3, vmax + 0.5e-3
    cmap = matplotlib.colormaps[HEATMAP_CMAP].with_extremes(bad="0.85")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=vmin, vmax=vmax, origin="lower",
                      aspect="auto", interpolation="nearest")
    fig.colorbar(image, ax=ax, shrink=0.9, pad=0.02)
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if np.isfinite(values[i, j]):
                r, g, b, _ = cmap((values[i, j] - vmin) / (vmax - vmin))
                dark = 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.5
                ax.text(j, i, f"{values[i, j]:.3f}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
            else:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.85", edgecolor="0.55",
                                       hatch="///", linewidth=0.0))
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="0.25",
                        bbox={"facecolor": "0.85", "edgecolor": "none", "pad": 0.5})
    ax.set_xticks(range(len(grid.columns)), [_label(v) for v in grid.columns])
    ax.set_yticks(range(len(grid.index)), [_label(v) for v in grid.index])
    ax.set_xlabel(_param(str(grid.columns.name)))
    ax.set_ylabel(_param(str(grid.index.name)))


def figure_alpha_tau(frame: pd.DataFrame, metrics: Sequence[str], out_stem: Path, title: str) -> list[Path]:
    """Figure 14: alpha x tau heatmaps (x = alpha, y = tau), one panel per (encoder row, metric column); each
    cell annotated to 3 decimals, warmer = higher (per-panel scale), a point not run is a hatched "n/a" cell.
    Writes ``<out_stem>.png`` and ``.pdf``; returns their paths."""
    metrics = tuple(metrics)
    _require(frame, ["encoder", "alpha", "tau", *metrics], "figure_alpha_tau")
    encoders = _encoders(frame)
    n_x, n_y = len(_values(frame["alpha"])), len(_values(frame["tau"]))
    panel = (max(3.2, 0.62 * n_x + 1.6), max(2.2, 0.42 * n_y + 1.2))
    missing = any(heatmap_grid(frame, m, encoder=e).isna().to_numpy().any() for e in encoders for m in metrics)
    with _style():
        fig, axes = _figure(len(encoders), len(metrics), panel)
        for r, encoder in enumerate(encoders):
            for c, metric in enumerate(metrics):
                _heatmap(fig, axes[r][c], heatmap_grid(frame, metric, encoder=encoder))
                axes[r][c].set_title(f"{metric} · {encoder}")
        _finish(fig, title, _footnote({"": frame}, "hatched n/a = point not run" if missing else ""))
        return _save(fig, out_stem)


# --------------------------------------------------------------------------------------------- figures 15-17


def _lines(ax: Any, x: str, grid: list[Any], series: list[tuple[str, pd.DataFrame, str]], ylabel: str) -> bool:
    """One line per ``(label, rows, metric)`` over the full ``grid`` of ``x`` values, broken where a point was
    not run; returns whether any was missing."""
    gaps = False
    xs = [float(v) for v in grid] if all(_is_number(v) for v in grid) else list(range(len(grid)))
    for label, part, metric in series:
        ys = _line(part, x, metric, grid)
        gaps |= bool(np.isnan(ys).any())
        ax.plot(xs, ys, marker="o", markersize=4, linewidth=1.4, label=label)
    ax.set_xticks(xs, [_label(v) for v in grid])
    ax.set_xlabel(_param(x))
    ax.set_ylabel(ylabel)
    ax.grid(True, linewidth=0.4, alpha=0.5)
    ax.legend(frameon=False)
    return gaps


def figure_beam_fanout(frame: pd.DataFrame, metrics: Sequence[str], out_stem: Path, title: str) -> list[Path]:
    """Figure 15: B/F sensitivity, one panel per (encoder row, metric column), x = fanout F, one line per beam B
    (a (B, F) point not run is a gap in its line). Writes ``<out_stem>.png`` and ``.pdf``; returns their paths."""
    metrics = tuple(metrics)
    _require(frame, ["encoder", "beam", "fanout", *metrics], "figure_beam_fanout")
    encoders, fanouts, beams = _encoders(frame), _values(frame["fanout"]), _values(frame["beam"])
    with _style():
        fig, axes = _figure(len(encoders), len(metrics), (3.4, 2.6))
        gaps = False
        for r, encoder in enumerate(encoders):
            rows = frame[frame["encoder"] == encoder]
            for c, metric in enumerate(metrics):
                series = [(f"B={_label(b)}", rows[[_same(v, b) for v in rows["beam"]]], metric) for b in beams]
                gaps |= _lines(axes[r][c], "fanout", fanouts, series, metric)
                axes[r][c].set_title(f"{metric} · {encoder}")
        _finish(fig, title, _footnote({"": frame}, "a gap in a line = point not run" if gaps else ""))
        return _save(fig, out_stem)


def figure_alpha_depth(frame: pd.DataFrame, metrics: Sequence[str], out_stem: Path, title: str, *,
                       depth: str = "k") -> list[Path]:
    """Figure 16: alpha under varying depth, one panel per (encoder row, ``depth`` value column), x = alpha, one
    line per metric. A frame without a ``depth`` column (one fixed depth) gives one panel per encoder. Writes
    ``<out_stem>.png`` and ``.pdf``; returns their paths."""
    metrics = tuple(metrics)
    _require(frame, ["encoder", "alpha", *metrics], "figure_alpha_depth")
    encoders, alphas = _encoders(frame), _values(frame["alpha"])
    depths = _values(frame[depth]) if depth in frame.columns else [None]
    with _style():
        fig, axes = _figure(len(encoders), len(depths), (3.4, 2.6))
        gaps = False
        for r, encoder in enumerate(encoders):
            for c, d in enumerate(depths):
                rows = frame[frame["encoder"] == encoder]
                if d is not None:
                    rows = rows[[_same(v, d) for v in rows[depth]]]
                gaps |= _lines(axes[r][c], "alpha", alphas, [(m, rows, m) for m in metrics], "recall")
                where = (frame.attrs.get("where") or {}).get(depth)
                shown = d if d is not None else where
                axes[r][c].set_title(f"{_param(depth)}={_label(shown)} · {encoder}" if shown is not None
                                     else encoder)
        _finish(fig, title, _footnote({"": frame}, "a gap in a line = point not run" if gaps else ""))
        return _save(fig, out_stem)


def figure_k_sensitivity(frame_by_method: Mapping[str, pd.DataFrame], metric: str, out_stem: Path, title: str, *,
                         k: str = "k") -> list[Path]:
    """Figure 17: K sensitivity, one panel per encoder, x = K, y = ``metric``, one line per method (mapping
    order). Every method's frame must be non-empty. Writes ``<out_stem>.png`` and ``.pdf``; returns their paths."""
    if not frame_by_method:
        raise ValueError("figure_k_sensitivity: no method frames given; nothing to draw")
    for method, frame in frame_by_method.items():
        _require(frame, ["encoder", k, metric], f"figure_k_sensitivity[{method}]")
    frames = dict(frame_by_method)
    encoders = sorted(set().union(*(set(f["encoder"]) for f in frames.values())))
    ks = _values(pd.concat([f[k] for f in frames.values()], ignore_index=True))
    with _style():
        fig, axes = _figure(1, len(encoders), (3.6, 2.8))
        gaps = False
        for c, encoder in enumerate(encoders):
            series = [(method, f[f["encoder"] == encoder], metric) for method, f in frames.items()]
            ax = axes[0][c]
            gaps |= _lines(ax, k, ks, series, metric)
            ax.set_title(encoder)
        _finish(fig, title, _footnote(frames, "a gap in a line = point not run" if gaps else ""))
        return _save(fig, out_stem)
