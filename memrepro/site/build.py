"""Write the report site: one folder of HTML pages, per-run data files and the assets they load, all linked
relatively so the folder works opened from disk (``file://``), served, or copied into the docs site.

Layout (``<out>/``): ``index.html`` (reproduction summary with the legend of the protocol check's tags,
comparisons, sweeps, what the gold corrections change, run counts), ``reproduction.html``
(every paper table), ``runs.html`` (every run), ``runs/<run id>.html``, ``compare/<name>.html``,
``sweeps/<name>.html``, ``data/`` (explorer rows in chunks of :data:`CHUNK` and one text table per benchmark
configuration, each a script that adds itself to ``window.MR``: a page loads them with ``<script>`` tags when its
explorer opens, which works under ``file://`` where ``fetch()`` of a local file does not) and ``assets/``
(Plotly.js from the ``plotly`` package, the site's CSS and JS).

A full build is written to a temporary sibling folder and renamed into place, so an interrupted build leaves the
previous site whole; a folder that is not a report (no :data:`MARKER` file) is never replaced.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from memrepro.checks import Finding, tags
from memrepro.errors import EXIT_BAD_INPUT, DamagedFileError, MemreproError, one_line
from memrepro.runs.kept import QUERIES_XZ
from memrepro.site import comparisons as cmp
from memrepro.site import corrections
from memrepro.site.findings import (Checked, Pools, checks_doc, kinds_present, metric_tags, named, read_pools,
                                     run_findings)
from memrepro.site.matrix import read_matrix
from memrepro.site.misses import Buckets, best_gold_rank, breakdown, depth
from memrepro.site.recipe import Presets, all_presets, closest, recipe
from memrepro.site.sources import KeptRun, report_runs, run_key
from memrepro.site.sweeps import Sweep, find_sweeps, order_key
from memrepro.site.texts import TextTable, read_all, table_key
from memrepro.tables.naming import differing, flat_settings, labels, short_paths, shorten, value_text
from memrepro.tables.reproduction import KINDS
from memrepro.tables.runs import Run, is_number

MARKER = ".memrepro-report"
CHUNK = 1000  # explorer rows per data file
TOP_SHOWN = 5  # retrieved memories per explorer row
BUCKET_COLOURS = ("#1a7f37", "#4ac26b", "#d4a72c", "#fb8f44", "#cf222e", "#6e7781")
HOW_TO_RUN = "python -m memrepro run dataset=locomo retriever=dense encoder=minilm"


class ReportError(MemreproError):
    """The report cannot be written where asked, or runs cannot be compared: bad input."""

    exit_code = EXIT_BAD_INPUT


@dataclass
class Options:
    results_dir: Path
    kept_dir: Path | None
    out: Path
    up_link: str | None = None  # a link back to the site this report is part of (relative to the report's root)
    resamples: int = cmp.RESAMPLES
    workers: int = 2  # worker processes beside this one (0: every job here)
    comparisons: Path = cmp.DECLARED  # the declared paper comparisons
    experiments: Path | None = None  # the experiment list their conditions come from (None: the default list)


@dataclass
class RunInfo:
    """What the lists and other pages say about a run whose page was written."""

    key: str
    label: str
    group: str  # the runs it is labelled among (run_labels)
    recipe: str
    dataset: str
    retriever: str
    encoder: str
    source: str  # "results/runs" or "kept"
    splits: str
    n: int
    primary: list[tuple[str, str]]
    ms_per_query: str
    findings: list[Finding] = field(default_factory=list)  # the protocol check's

    @property
    def tags(self) -> str:
        return tags(self.findings).strip()


@dataclass
class Built:
    index: Path
    runs: int
    skipped: list[str]
    seconds: float
    pages: int = 0


@dataclass
class Site:
    """The pages, data files and context every page shares."""

    root: Path
    up_link: str | None = None
    n_runs: int = 0
    pages: int = 0
    texts: dict[str, TextTable] = field(default_factory=dict)
    text_suffix: str = ""  # a --compare build names its text tables apart from the full site's
    pools: dict[str, Pools | None] | None = None  # candidate pools by text table (read when first needed)
    read_pools: Callable[[], dict[str, Pools | None]] | None = None
    presets: Presets = field(default_factory=Presets)  # what a run's recipe is told against

    def env(self):
        return _environment()  # built once per process: compiling the templates costs ~30 ms a page

    def page(self, relative: str, template: str, **context: Any) -> Path:
        depth = relative.count("/")
        root = "../" * depth
        doc = checks_doc(self.up_link)
        html = self.env().get_template(template).render(
            root=root, up_link=(root + self.up_link) if self.up_link else None, n_runs=self.n_runs,
            checks_doc=(root + doc) if doc else None, **context)
        self.pages += 1
        return self.write(relative, html)

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def text_table(self, run: Run) -> TextTable:
        dataset = run.config.get("dataset") or {}
        key = table_key(dataset)
        if key not in self.texts:
            self.texts[key] = TextTable(key, dict(dataset), run.record.provenance.data_sha256)
        return self.texts[key]

    def pools_of(self, run: Run) -> Pools | None:
        """The candidate pools of the benchmark ``run`` read (its text table's configuration), None where unknown."""
        if self.pools is None:
            self.pools = self.read_pools() if self.read_pools else {}
        return self.pools.get(table_key(run.config.get("dataset") or {}))

    def text_file(self, table: TextTable) -> str:
        return f"data/texts-{table.key}{self.text_suffix}.js"

    def write_texts(self, texts: dict[str, Any] | None = None) -> None:
        """Each text table's file; ``texts``: the tables' texts already read (by key), else read here."""
        for table in self.texts.values():
            table.fill((texts or {}).get(table.key))
            self.write(self.text_file(table), f"MR.addTexts({json.dumps(table.key)}, {_js(table.document())});\n")

    def assets(self) -> None:
        target = self.root / "assets"
        target.mkdir(parents=True, exist_ok=True)
        plotly = resources.files("plotly").joinpath("package_data/plotly.min.js")
        with resources.as_file(plotly) as source:
            shutil.copyfile(source, target / "plotly.min.js")
        for name in ("report.css", "report.js"):
            (target / name).write_bytes(resources.files("memrepro.site").joinpath(f"assets/{name}").read_bytes())


@lru_cache(maxsize=1)
def _environment():
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("memrepro.site", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = number
    env.filters["pct"] = lambda value: f"{100 * value:.1f}%"
    env.filters["count"] = lambda value: f"{value:,}"
    env.filters["json"] = _js
    env.filters["short"] = shorten
    env.globals["mean"] = mean_text
    env.globals["kinds_present"] = kinds_present
    return env


def mean_text(stats: Any, metric: str) -> str:
    """:meth:`memrepro.runs.record.Stats.mean_text`, or '–' for a metric without a value."""
    try:
        return stats.mean_text(metric)
    except (KeyError, TypeError):
        return "–"


def number(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.{digits}f}"
    return str(value)


def _js(value: Any) -> str:
    """JSON safe inside a ``<script>`` element and as a script file."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")


# ------------------------------------------------------------------------------------------------ the whole site

def build(options: Options, say: Callable[[str], None]) -> Built:
    """The full site from every run on this machine, written to ``options.out`` (replacing a previous report)."""
    start = time.perf_counter()
    out = Path(options.out)
    _check_target(out)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        site = Site(tmp, options.up_link)
        skipped: list[str] = []

        def skip(line: str) -> None:
            skipped.append(line)
            say(f"memrepro: warning: {line}")

        runs = report_runs(Path(options.results_dir), options.kept_dir and Path(options.kept_dir), skip)
        with Background(options.workers) as background:
            # the workers read the candidate pools (the check of runs that do not record them: the first run read
            # may need them), compose the presets, read the texts and compute each declared comparison meanwhile
            datasets = {table_key(r.config.get("dataset") or {}): r.config.get("dataset") or {} for r in runs}
            site.read_pools = background.submit(read_pools, datasets).result
            presets_job = background.submit(all_presets) if background.pool else None  # else composed as needed
            texts_job = background.submit(read_all, datasets) if background.pool else None  # else read at the end
            folders = [(str(r.folder), isinstance(r, KeptRun)) for r in runs]
            compare_jobs = [background.submit(cmp.declared_results, folders, options.resamples, options.comparisons,
                                              options.experiments, [entry.name])
                            for entry in cmp.declared(options.comparisons)]
            prepared = prepare_runs(site, runs, skip)
            site.n_runs = len(prepared)
            if presets_job:
                site.presets = Presets(presets_job.result())
            names = run_labels([p.run for p in prepared], site.presets)
            infos = {p.key: run_page(site, p, *names[p.key]) for p in prepared}
            runs = [p.run for p in prepared]
            by_key = {run_key(run): run for run in runs}
            sweep_links = sweep_pages(site, find_sweeps(runs), infos)
            results, lines = [], []
            for job in compare_jobs:
                done, said = job.result()
                results += done
                lines += said
            texts = texts_job.result() if texts_job else None
        for line in lines:
            say(f"memrepro: {line}")
        comparison_links = []
        for entry, base, other, pairing in results:
            if isinstance(pairing, str):
                skip(f"comparison {entry.name}: {pairing}")
            elif base in by_key and other in by_key:
                comparison_links.append(comparison_page(site, f"compare/{entry.name}.html", entry.title,
                                                        by_key[base], by_key[other], infos, pairing,
                                                        options.resamples))
        site.write_texts(texts)  # last: every page has registered the memories it shows
        corrected = corrections.effects(corrections.twins(runs), skip)
        tables = read_matrix(Path(options.results_dir) / "tables")
        site.page("reproduction.html", "reproduction.html", title="Reproduction", tables=tables or [],
                  kinds=KINDS, charts=False)
        site.page("runs.html", "runs.html", title="Runs", groups=_run_groups(infos.values()), charts=False)
        site.page("index.html", "index.html", title="Summary", tables=tables, kinds=KINDS,
                  tags=kinds_present(f for table in tables or [] for f in table.findings),
                  comparisons=comparison_links, sweeps=sweep_links, datasets=_dataset_counts(infos.values()),
                  corrections=corrections.grouped(corrected), infos=infos, how_to_pair=corrections.HOW_TO_PAIR,
                  skipped=skipped, how_to_run=HOW_TO_RUN, charts=False)
        site.assets()
        (tmp / MARKER).write_text("written by python -m memrepro report; the folder is replaced by the next one\n",
                                  encoding="utf-8")
        _put_in_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Built(out / "index.html", len(infos), skipped, time.perf_counter() - start, site.pages)


class Background:
    """Jobs run in worker processes beside this one (the workers compose presets, read the benchmarks' texts and
    bootstrap the comparisons, one job each, while this process reads and writes runs: on two cores, about half
    the wall time of doing it all here); with ``workers=0``, or where no process can be started, each job runs here
    when its result is asked for."""

    def __init__(self, workers: int = 2) -> None:
        self.workers = workers
        self.pool = None

    def __enter__(self) -> "Background":
        if self.workers > 0:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            try:  # spawn, not fork: this process may hold threads (torch, BLAS) a forked child would inherit locked
                self.pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
            except (OSError, ValueError):
                self.pool = None
        return self

    def submit(self, function: Callable[..., Any], *args: Any) -> "Job":
        future = None
        if self.pool is not None:
            try:
                future = self.pool.submit(function, *args)
            except RuntimeError:  # a broken pool
                future = None
        return Job(function, args, future)

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class Job:
    function: Callable[..., Any]
    args: tuple
    future: Any = None

    def result(self) -> Any:
        if self.future is not None:
            from concurrent.futures.process import BrokenProcessPool

            try:
                return self.future.result()
            except BrokenProcessPool:  # the worker died (memory, a signal): do the job here
                pass
        return self.function(*self.args)


def _check_target(out: Path) -> None:
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / MARKER).is_file())):
        raise ReportError(f"{out} exists and is not a report folder (no {MARKER} file): it is never replaced; pass "
                          f"--out with a new folder or a previous report's")


def _put_in_place(tmp: Path, out: Path) -> None:
    if out.exists():
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


# ------------------------------------------------------------------------------------------------ run pages

def run_labels(runs: Sequence[Run], presets: Presets) -> dict[str, tuple[str, str]]:
    """Each run's (group, label). A group is the runs of one dataset, retriever, encoder and closest preset; a run is
    labelled among them by :func:`naming.labels`. Where those labels would be cut or need a run id (too many
    settings differ), the group is split by the settings that are not numbers (engine, variant switches), which
    then name the group, and each part is labelled on its own."""
    groups: dict[tuple[str, str, str, str], list[Run]] = defaultdict(list)
    for run in runs:
        preset = closest("retriever", run.retriever, presets, run.retriever_name).preset or run.retriever_name
        groups[(run.dataset, run.retriever_name, run.encoder_label, preset)].append(run)
    out: dict[str, tuple[str, str]] = {}
    for (_, _, encoder, preset), members in groups.items():
        title = f"{preset} ({encoder})"
        names = labels(members)
        if all(_plain(name) for name in names):
            out.update({run_key(run): (title, name) for run, name in zip(members, names)})
            continue
        flat = [flat_settings(run.settings) for run in members]
        switches = [path for path in differing(flat) if not all(is_number(f.get(path)) for f in flat)]
        short = short_paths(switches)
        parts: dict[str, list[Run]] = defaultdict(list)
        for run, settings in zip(members, flat):
            parts[", ".join(f"{short[p]}={value_text(settings.get(p))}" for p in switches)].append(run)
        for switch_text, part in parts.items():
            names = labels(part) if len(part) > 1 else [shorten(switch_text)]
            out.update({run_key(run): (f"{title}: {switch_text}", name) for run, name in zip(part, names)})
    return out


def _plain(label: str) -> bool:
    """A label that is neither cut nor told apart by a run id."""
    return not label.endswith("…") and not re.search(r" \[[0-9a-f]{8}\]$", label)


@dataclass
class Prepared:
    """A run whose rows were read and verified, its explorer data written: what its page needs but the recipe."""

    run: Run
    key: str
    misses: Any
    explorer: dict[str, Any]
    checked: Checked


def prepare_runs(site: Site, runs: Sequence[Run], skip: Callable[[str], None]) -> list[Prepared]:
    """Read every run's rows (a kept copy's are verified here, before anything shows the run: one that fails is
    named and left out), write its explorer data, count its misses and check it (docs/checks.md)."""
    out = []
    for run in sorted(runs, key=lambda r: (r.dataset, r.retriever_name, r.encoder_label, r.folder.name)):
        try:
            rows = run.rows
        except (DamagedFileError, OSError) as exc:
            skip(f"skipped {run.folder}: {one_line(exc)}")
            continue
        record = run.record
        categories = {code: c.name or code for code, c in record.summary.categories.items()}
        buckets = Buckets(depth(rows))
        metric = next((m for m in record.primary if m in record.metric_names), None)
        out.append(Prepared(run, run_key(run), breakdown(rows, categories, buckets),
                            explorer_data(site, run, rows, categories, buckets, metric),
                            run_findings(run, lambda: site.pools_of(run))))
        run.__dict__.pop("rows", None)  # 5-50 MB a run: read again only by --compare
    return out


def run_page(site: Site, prepared: Prepared, group: str, label: str) -> RunInfo:
    run, record = prepared.run, prepared.run.record
    recipes = recipe(run, site.presets)
    primary = [m for m in record.primary if m in record.metric_names]
    metrics = primary + [m for m in record.metric_names if m not in primary]
    info = RunInfo(prepared.key, label, group, " · ".join(f"{r.group}: {r.text()}" for r in recipes), run.dataset,
                   run.retriever_name, run.encoder_label, "kept" if isinstance(run, KeptRun) else "results/runs",
                   ", ".join(record.summary.splits), record.summary.n,
                   [(m, mean_text(record.summary, m)) for m in primary],
                   number(record.latency.batched_amortized_ms_per_query, 3), prepared.checked.findings)
    site.page(f"runs/{prepared.key}.html", "run.html", title=label, run=run, info=info, record=record,
              recipes=recipes, metrics=metrics, primary=primary, misses=prepared.misses, checked=prepared.checked,
              metric_tags=metric_tags(prepared.checked.findings, metrics),
              bucket_colours=colours(prepared.misses.labels), explorer=prepared.explorer,
              miss_chart=_miss_chart(prepared.misses),
              config_text=(run.folder / "config.yaml").read_text(encoding="utf-8"), charts=True)
    return info


def explorer_data(site: Site, run: Run, rows: Sequence[dict[str, Any]], names: dict[str, str], buckets: Buckets,
                  metric: str | None) -> dict[str, Any]:
    """Write the run's explorer rows (chunks of :data:`CHUNK`) and register the texts they need; returns what the
    page needs to load them.

    A row: ``[split, query id, category, best gold rank, bucket, [[memory, rank], ...] (gold),
    [[memory, score], ...] (top hits), metric value]``; memories are indexes into the text table."""
    table = site.text_table(run)
    splits = list(dict.fromkeys(r["split"] for r in rows))
    split_index = {s: i for i, s in enumerate(splits)}
    codes = list(names) + sorted({str(r["category"]) for r in rows} - set(names))
    category_index = {c: i for i, c in enumerate(codes)}
    data = []
    for row in rows:
        if row.get("excluded") is not None:
            continue
        episode = row["episode_id"]
        table.queries.add(row["query_id"])
        best = best_gold_rank(row)
        gold = [[table.memory(episode, g), (row.get("gold_ranks") or {}).get(g)] for g in dict.fromkeys(row["gold"])]
        top = [[table.memory(episode, m), round(float(s), 4)] for m, s in row["top"][:TOP_SHOWN]]
        value = row["metrics"].get(metric) if metric else None
        data.append([split_index[row["split"]], row["query_id"], category_index[str(row["category"])], best,
                     buckets.of(best), gold, top, value])
    key = run_key(run)
    chunks = []
    for i in range(0, max(len(data), 1), CHUNK):
        name = f"data/{key}/rows-{i // CHUNK}.js"
        site.write(name, f"MR.addRows({json.dumps(key)}, {i // CHUNK}, {_js(data[i:i + CHUNK])});\n")
        chunks.append(name)
    return {"key": key, "rows": len(data), "chunks": chunks, "texts": site.text_file(table), "textKey": table.key,
            "splits": splits, "categories": [names.get(c, c) for c in codes], "buckets": buckets.labels,
            "colours": colours(buckets.labels),
            "metric": metric, "topShown": TOP_SHOWN}


def colours(bucket_labels: Sequence[str]) -> list[str]:
    """A colour per rank bucket: green to red by rank, grey for not retrieved (always the last)."""
    return list(BUCKET_COLOURS[:len(bucket_labels) - 1]) + [BUCKET_COLOURS[-1]]


def _miss_chart(misses) -> dict[str, Any]:
    """A stacked horizontal bar per group: the share of its queries in each bucket."""
    groups = [f"{g} (n={sum(c):,})" for g, c in zip(misses.groups, misses.counts)]
    shades = colours(misses.labels)
    traces = []
    for i, label in enumerate(misses.labels):
        shares = [100 * c[i] / sum(c) if sum(c) else 0 for c in misses.counts]
        traces.append({"type": "bar", "orientation": "h", "name": label, "y": groups, "x": shares,
                       "marker": {"color": shades[i]}, "customdata": [c[i] for c in misses.counts],
                       "hovertemplate": f"{label}: %{{customdata}} queries (%{{x:.1f}}%)<extra>%{{y}}</extra>"})
    return {"data": traces, "layout": {
        "barmode": "stack", "height": 110 + 34 * len(groups), "margin": {"l": 10, "r": 10, "t": 36, "b": 40},
        "xaxis": {"title": {"text": "% of scored queries"}, "range": [0, 100]},
        "yaxis": {"autorange": "reversed", "automargin": True},
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "traceorder": "normal"}}}


# ------------------------------------------------------------------------------------------------ comparisons

def comparison_page(site: Site, relative: str, title: str, base: Run, other: Run, infos: dict[str, RunInfo],
                    pairing: cmp.Pairing, resamples: int = cmp.RESAMPLES) -> dict[str, Any]:
    base_label, other_label = labels([base, other])
    base_info, other_info = infos.get(run_key(base)), infos.get(run_key(other))
    # each run's own findings (as its page shows them), then what differs between the two
    findings = [*named(base_info.findings if base_info else [], base_label),
                *named(other_info.findings if other_info else [], other_label), *pairing.findings]
    table = site.text_table(base)
    moves = {True: [_move_row(table, m) for m in pairing.improved],
             False: [_move_row(table, m) for m in pairing.worsened]}
    overall = {g.metric: g for g in pairing.groups if g.group == "all"}
    # the charts' metric: the primary metric whose overall difference is clearest (the table lists every metric)
    shown = min(pairing.metrics, key=lambda m: (overall[m].test.p_value, -abs(overall[m].test.delta)))
    site.page(relative, "compare.html", title=title, base=base, other=other, base_label=base_label,
              other_label=other_label, base_info=base_info, other_info=other_info, findings=findings,
              metric_tags=metric_tags(findings, pairing.metrics), pairing=pairing, shown=shown, moves=moves,
              summary=pairing.moved, transitions=pairing.transitions, bucket_labels=pairing.bucket_labels,
              forest=_forest_chart(pairing),
              wlt=_wlt_chart([g for g in pairing.groups if g.metric == shown], shown), texts=site.text_file(table),
              text_key=table.key, resamples=resamples, charts=True)
    first = overall[pairing.metrics[0]]
    return {"href": relative, "title": title, "base": base_label, "other": other_label, "dataset": base.dataset,
            "n": first.n, "delta": first.test.delta, "metric": first.metric, "significant": first.test.significant,
            "mdd": first.power.mdd, "verdict": first.verdict, "tags": tags(findings).strip()}


def _move_row(table: TextTable, move: dict[str, Any]) -> dict[str, Any]:
    """A moved unit with its memories as indexes into the page's text table."""
    table.queries.add(move["query"])
    episode = move["episode"]
    return {**move, **{part: [table.memory(episode, m) for m in move[part]]
                       for part in ("gold", "base_top", "other_top")}}


def _forest_chart(pairing: cmp.Pairing) -> dict[str, Any]:
    """Δ with its 95% CI per group, one marker per metric side by side (a forest plot)."""
    palette = ("#0969da", "#8250df", "#bf3989", "#1a7f37", "#9a6700", "#57606a")
    groups = list(dict.fromkeys(g.group for g in pairing.groups))
    n = {g.group: g.n for g in pairing.groups}
    traces = []
    for position, metric in enumerate(pairing.metrics):
        tested = [g for g in pairing.groups if g.metric == metric]
        traces.append({
            "type": "scatter", "mode": "markers", "name": metric,
            "y": [f"{g.group} (n={n[g.group]:,})" for g in tested], "x": [g.test.delta for g in tested],
            "error_x": {"type": "data", "symmetric": False, "array": [g.test.ci_high - g.test.delta for g in tested],
                        "arrayminus": [g.test.delta - g.test.ci_low for g in tested], "thickness": 1.5},
            "marker": {"size": 8, "color": palette[position % len(palette)],
                       "symbol": ["circle" if g.test.significant else "circle-open" for g in tested]},
            "hovertemplate": f"{metric} %{{y}}: Δ %{{x:+.4f}}<extra></extra>"})
    return {"data": traces, "layout": {
        "height": 120 + 40 * len(groups), "margin": {"l": 10, "r": 10, "t": 36, "b": 40}, "scattermode": "group",
        "xaxis": {"title": {"text": "Δ (compared − baseline), 95% CI; filled: p < 0.05"}, "zeroline": True,
                  "zerolinecolor": "#57606a"},
        "yaxis": {"autorange": "reversed", "automargin": True},
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"}}}


def _wlt_chart(groups, metric: str) -> dict[str, Any]:
    names = [f"{g.group} (n={g.n:,})" for g in groups]
    parts = (("wins", "#1a7f37", lambda g: g.wins), ("ties", "#d0d7de", lambda g: g.ties),
             ("losses", "#cf222e", lambda g: g.losses))
    return {"data": [{"type": "bar", "orientation": "h", "name": name, "y": names,
                      "x": [100 * part(g) / g.n for g in groups], "customdata": [part(g) for g in groups],
                      "marker": {"color": colour},
                      "hovertemplate": f"{name}: %{{customdata}} (%{{x:.1f}}%)<extra>%{{y}}</extra>"}
                     for name, colour, part in parts],
            "layout": {"barmode": "stack", "height": 110 + 34 * len(groups),
                       "margin": {"l": 10, "r": 10, "t": 36, "b": 40},
                       "xaxis": {"title": {"text": f"% of queries, per-query {metric}"}, "range": [0, 100]},
                       "yaxis": {"autorange": "reversed", "automargin": True},
                       "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"}}}


# ------------------------------------------------------------------------------------------------ sweeps

MAX_LINES = 8  # a sweep plot draws one line per combination of the other settings up to this many, else boxes


def sweep_pages(site: Site, sweeps: Sequence[Sweep], infos: dict[str, RunInfo]) -> list[dict[str, Any]]:
    links = []
    titles = _sweep_titles(sweeps)
    for sweep, title in zip(sweeps, titles):
        runs = [r for r in sweep.runs if run_key(r) in infos]
        if len(runs) < 2:
            continue
        metrics = [m for m in runs[0].record.primary if m in runs[0].record.metric_names]
        first = metrics[0]
        values = [sweep.values(r) for r in runs]
        scores = [r.record.summary.split_mean.get(first) for r in runs]
        best = max(range(len(runs)), key=lambda i: -math.inf if scores[i] is None else scores[i])
        names = sweep.names
        rows = [{"key": run_key(r), "values": [value_text(v[p]) for p in sweep.swept], "label": label,
                 "recipe": infos[run_key(r)].recipe, "metrics": [mean_text(r.record.summary, m) for m in metrics],
                 "best": i == best, "ms": infos[run_key(r)].ms_per_query}
                for i, (r, v, label) in enumerate(zip(runs, values, labels(runs)))]
        relative = f"sweeps/{sweep.slug}.html"
        site.page(relative, "sweep.html", title=title, sweep=sweep, columns=[names[p] for p in sweep.swept],
                  paths=list(sweep.swept), metrics=metrics, rows=rows, best=rows[best],
                  fixed=infos[run_key(runs[best])].recipe,
                  plots=[_sweep_chart(sweep, values, scores, dimension, first) for dimension in sweep.dimensions],
                  charts=True)
        links.append({"href": relative, "title": title, "points": len(runs), "metric": first,
                      "best": rows[best]["metrics"][0], "dataset": sweep.dataset,
                      "best_values": ", ".join(f"{names[p]}={v}" for p, v in zip(sweep.swept, rows[best]["values"]))})
    return links


def _sweep_titles(sweeps: Sequence[Sweep]) -> list[str]:
    """Each sweep's title; sweeps of the same title are told apart by the fixed settings that differ among them."""
    same: dict[str, list[int]] = defaultdict(list)
    for i, sweep in enumerate(sweeps):
        same[sweep.title].append(i)
    titles = [sweep.title for sweep in sweeps]
    for title, members in same.items():
        if len(members) < 2:
            continue
        fixed = [sweeps[i].fixed() for i in members]
        paths = differing(fixed)
        short = short_paths(paths)
        for i, settings in zip(members, fixed):
            titles[i] = f"{title} at " + shorten(", ".join(f"{short[p]}={value_text(settings.get(p))}"
                                                           for p in paths))
    return titles


def _sweep_chart(sweep: Sweep, values: list[dict[str, Any]], scores: list[float | None],
                 dimension: Sequence[str], metric: str) -> dict[str, Any]:
    """The metric against one swept dimension: a line per combination of the other swept settings (markers where
    the dimension is not one number), or, past :data:`MAX_LINES` combinations, the spread over them at each value
    (a box with every point) and the best point's line."""
    name = sweep.dimension_name(dimension)
    numeric = len(dimension) == 1 and sweep.numeric(dimension[0])
    others = [p for d in sweep.dimensions if d != tuple(dimension) for p in d]

    def x_of(i: int) -> Any:
        return values[i][dimension[0]] if numeric else ", ".join(value_text(values[i][p]) for p in dimension)

    order = sorted(range(len(values)), key=lambda i: tuple(order_key(values[i][p]) for p in dimension))
    lines: dict[str, list[int]] = defaultdict(list)
    for i in order:
        lines[", ".join(f"{sweep.names[p]}={value_text(values[i][p])}" for p in others) or metric].append(i)
    hover = f"{name}=%{{x}}<br>{metric} %{{y:.4f}}<extra>%{{fullData.name}}</extra>"
    if len(lines) <= MAX_LINES:
        traces = [{"type": "scatter", "mode": "lines+markers" if numeric else "markers", "name": line,
                   "x": [x_of(i) for i in members], "y": [scores[i] for i in members], "hovertemplate": hover}
                  for line, members in lines.items()]
    else:
        best: dict[Any, float] = {}
        for i in order:
            if scores[i] is not None:
                best[x_of(i)] = max(best.get(x_of(i), -math.inf), scores[i])
        spread = f"over {len(lines)} combinations of {', '.join(sweep.names[p] for p in others)}"
        traces = [{"type": "box", "name": spread,
                   "x": [x_of(i) for i in order], "y": [scores[i] for i in order], "boxpoints": "all",
                   "jitter": 0.4, "pointpos": 0, "marker": {"size": 4, "opacity": 0.6}, "line": {"width": 1}},
                  {"type": "scatter", "mode": "lines+markers", "name": "best", "x": list(best),
                   "y": list(best.values()), "hovertemplate": hover}]
    return {"id": "plot-" + re.sub(r"[^A-Za-z0-9_-]", "-", name), "setting": name, "spec": {
        "data": traces, "layout": {
            "height": 380, "margin": {"l": 60, "r": 10, "t": 10, "b": 50},
            "xaxis": {"title": {"text": name}, "type": "linear" if numeric else "category"},
            "yaxis": {"title": {"text": metric}}, "showlegend": len(traces) > 1,
            "legend": {"font": {"size": 11}}}}}


# ------------------------------------------------------------------------------------------------ lists

def _run_groups(infos: Iterable[RunInfo]) -> list[dict[str, Any]]:
    """The runs list: per dataset, retriever and encoder, per labelling group (:func:`run_labels`)."""
    groups: dict[tuple[str, str, str], dict[str, list[RunInfo]]] = defaultdict(lambda: defaultdict(list))
    for info in infos:
        groups[(info.dataset, info.retriever, info.encoder)][info.group].append(info)
    return [{"dataset": d, "retriever": r, "encoder": e,
             "parts": [(name, sorted(members, key=lambda i: i.label)) for name, members in sorted(parts.items())],
             "metrics": [m for m, _ in next(iter(parts.values()))[0].primary],
             "n": sum(len(members) for members in parts.values())}
            for (d, r, e), parts in sorted(groups.items())]


def _dataset_counts(infos: Iterable[RunInfo]) -> list[tuple[str, int]]:
    counts: dict[str, int] = defaultdict(int)
    for info in infos:
        counts[info.dataset] += 1
    return sorted(counts.items())


# ------------------------------------------------------------------------------------------------ --compare

def build_comparison(options: Options, folders: Sequence[Path], say: Callable[[str], None]) -> Path:
    """``report --compare``: a page comparing each other run of ``folders`` with the first (the baseline), and their
    run pages, added to the site at ``options.out`` (created when absent). Runs on different benchmarks, data or
    splits are refused before anything is written."""
    from memrepro.compare import CompareError, check_comparable, load_run

    if len(folders) < 2:
        raise ReportError("--compare needs at least two run folders (the first is the baseline)")
    out = Path(options.out)
    _check_target(out)
    runs: list[Run] = []
    for folder in map(Path, folders):
        if (folder / QUERIES_XZ).is_file():  # a kept copy, read in place
            run: Run = KeptRun(folder)
            try:
                run.verify_listed()
            except DamagedFileError as exc:
                raise CompareError(f"{one_line(exc)}") from None
        else:
            run = load_run(folder)
        runs.append(run)
    base = runs[0]
    for other in runs[1:]:
        check_comparable(base, other, list(base.record.primary or base.record.metric_names))
    digest = hashlib.sha256(" ".join(run_key(r) for r in runs).encode()).hexdigest()[:8]
    site = Site(out, options.up_link, n_runs=len(runs), text_suffix=f"-{digest}")
    site.read_pools = lambda: read_pools({table_key(r.config.get("dataset") or {}): r.config.get("dataset") or {}
                                          for r in runs})
    out.mkdir(parents=True, exist_ok=True)
    pairings = [cmp.pair(base, other, resamples=options.resamples) for other in runs[1:]]
    prepared = prepare_runs(site, runs, lambda line: say(f"memrepro: warning: {line}"))
    if len(prepared) < len(runs):
        raise CompareError("a run's rows did not verify (named above); nothing compared")
    infos = {p.key: run_page(site, p, "report --compare", name)
             for p, name in zip(prepared, labels([p.run for p in prepared]))}
    written = []
    for other, pairing in zip(runs[1:], pairings):
        pair_labels = labels([base, other])
        name = f"compare/{run_key(base)[:8]}-vs-{run_key(other)[:8]}.html"
        comparison_page(site, name, f"{pair_labels[1]} vs {pair_labels[0]} ({base.dataset})", base, other, infos,
                        pairing, options.resamples)
        written.append(out / name)
    site.write_texts()
    site.assets()
    if not (out / MARKER).is_file():
        (out / MARKER).write_text("written by python -m memrepro report\n", encoding="utf-8")
    return written[0]
