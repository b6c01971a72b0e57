"""One run, orchestrated: load → encode (cached) → index → retrieve (batched) → freeze → metrics → results
folder.
The stages themselves are :mod:`memrepro.stages`; where a run is stored, :mod:`memrepro.runs`. Here: whether a run
is computed, restored from its kept copy or skipped, the training plan first, the batched and resumable retrieval
pass, latency, and the run record.

Two latency numbers, never mixed: the batched pass's amortized ms/query, and batch-1 latency (one query per
call, after a warm-up) on a fixed sample of queries. Timed region for both: retrieval given the query vector
(``search_only``); encoding is a separate phase timing.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from omegaconf import DictConfig, OmegaConf

from memrepro.artifacts.forecast import duration, where
from memrepro.checks import with_findings
from memrepro.errors import MemreproError, one_line
from memrepro.evaluation.freeze import TIE_RULE, freeze
from memrepro.models.encoder import CachedEncoder, resolve_device
from memrepro.paths import shown
from memrepro.provenance import config_hash, git_commit, hardware, package_versions, take_warnings
from memrepro.retrievers.base import Retriever, RetrieverBase
from memrepro.retrievers.external import as_retriever
from memrepro.runs.folder import (COMPLETE, is_complete, read_record, recover, run_dir, run_problem, stale_siblings,
                                  write_run)
from memrepro.runs.identity import run_id_payload
from memrepro.runs.kept import KeptRuns
from memrepro.runs.record import RunRecord
from memrepro.runs.resume import RetrievalCheckpoint
from memrepro.runs.seed_reuse import ReusedSplits, find_reusable
from memrepro.search import EpisodeIndex, SearchOptions, approximate_recall, search
from memrepro.stages import (build, build_once, encode_and_index, load_benchmark, metric_names_for, retrieval_inputs,
                             returned_stats, routing_summary, run_warnings, score_rankings, search_options,
                             vectorless_index)
from memrepro.training.plan import (TrainingPlan, needed_splits, per_seed_artifacts, planning_context,
                                    training_plan)
from memrepro.types import Benchmark

log = logging.getLogger("memrepro")


@dataclass
class RunOutcome:
    folder: Path
    skipped: bool
    record: RunRecord
    encoded: dict[str, int]
    restored: bool = False  # rebuilt from its kept copy (results/kept) instead of computed

    @property
    def metrics(self) -> dict[str, Any]:
        """The ``metrics.json`` document (``metrics["summary"]["pooled"]["mrr"]`` …)."""
        return self.record.to_json()


@dataclass
class _Prepared:
    """A configured run before anything is computed: what it reads, what it is (its id) and where it goes."""

    device: str
    benchmark: Benchmark
    verification: dict[str, Any]
    encoder: Any
    retriever: RetrieverBase
    resolved: dict[str, Any]  # the config resolved once per run: the run id and config.yaml both read it
    identity: dict[str, Any]
    run_id: str
    folder: Path


def _prepare(cfg: DictConfig, retriever: Retriever | None, timings: dict[str, float]) -> _Prepared:
    """Everything up to the run id and folder, without torch: a complete run is skipped or restored from here."""
    from memrepro.validate import validate_run_config

    validate_run_config(cfg)  # every entry point (CLI, memrepro.evaluate, sweeps, experiments), before anything loads
    if cfg.runtime.torch_threads:  # set before anything reads it (the plan's forecast names the thread count)
        import torch

        torch.set_num_threads(int(cfg.runtime.torch_threads))

    device = resolve_device(cfg.runtime.device)
    start = time.perf_counter()
    benchmark, verification = load_benchmark(cfg.dataset)
    timings["load_s"] = time.perf_counter() - start
    encoder = build_once(cfg.encoder)
    retriever = as_retriever(retriever if retriever is not None else build(cfg.retriever))
    resolved = OmegaConf.to_container(cfg, resolve=True)
    identity = run_id_payload(resolved, benchmark.data_sha256, encoder.identity)
    run_id = config_hash(identity)
    folder = run_dir(cfg.paths.results_dir, benchmark.name, retriever.name, encoder.label, run_id)
    return _Prepared(device, benchmark, verification, encoder, retriever, resolved, identity, run_id, folder)


def run(cfg: DictConfig, retriever: Retriever | None = None) -> RunOutcome:
    """One configured run; ``retriever`` (``memrepro.evaluate``) replaces the one ``cfg.retriever`` would build."""
    timings: dict[str, float] = {}
    prepared = _prepare(cfg, retriever, timings)
    device, benchmark, verification, encoder = (prepared.device, prepared.benchmark, prepared.verification,
                                                prepared.encoder)
    retriever, resolved, identity, run_id, folder = (prepared.retriever, prepared.resolved, prepared.identity,
                                                     prepared.run_id, prepared.folder)
    checkpoint = RetrievalCheckpoint.for_run(folder, float(cfg.runtime.checkpoint_every_s))
    problem = run_problem(folder) if is_complete(folder) else None  # a damaged marker or file: incomplete
    kept = KeptRuns(Path(cfg.paths.results_dir), Path(cfg.paths.kept_dir))
    restored = False
    if cfg.overwrite or not is_complete(folder) or problem or stale_siblings(folder):
        with checkpoint.locked():  # one process per run: a second launch of the same run fails instead of racing
            recover(folder)  # a commit a kill interrupted: finished or undone, never listed as a run
            if cfg.overwrite:
                checkpoint.discard()
            elif problem or not is_complete(folder):  # a kept copy of this very run (said below, with its cost)
                restored = kept.restore_or_warn(folder, "the run is recomputed", announce=False)
            if problem and not cfg.overwrite:
                log.warning("%s; %s", problem, "restored from its kept copy" if restored else "the run is recomputed")
            # another process may have completed it meanwhile
            if cfg.overwrite or run_problem(folder):
                reused = ReusedSplits() if cfg.overwrite else _reusable_splits(resolved, benchmark, encoder, folder,
                                                                               kept)
                return _compute(cfg, resolved, benchmark, encoder, retriever, folder, run_id, checkpoint, device,
                                timings, verification, identity["algorithm"], reused)
            checkpoint.discard()  # complete (a commit finished by recover): its checkpoint is spent
    record = read_record(folder)
    if restored:
        log.info("restored run %s from its kept copy %s: %s; set overwrite=true to recompute it", run_id,
                 shown(kept.copy_of(folder)), recompute_cost(cfg, benchmark, encoder, retriever, device, record))
    else:
        log.info("run %s is complete: skipped (set overwrite=true to redo it)", shown(folder))
    return RunOutcome(folder, True, record, {"query": 0, "document": 0}, restored)


def dry_run(cfg: DictConfig) -> str:
    """What ``run`` would do, as text, with nothing encoded, trained, computed or written (``run --dry-run``):
    the training plan of the models it would train, and whether the run would be computed, restored from its kept
    copy or skipped."""
    prepared = _prepare(cfg, None, {})
    device, benchmark, encoder, retriever = prepared.device, prepared.benchmark, prepared.encoder, prepared.retriever
    run_id, folder = prepared.run_id, prepared.folder
    kept = KeptRuns(Path(cfg.paths.results_dir), Path(cfg.paths.kept_dir))
    if not cfg.overwrite:
        if is_complete(folder) and not run_problem(folder):
            cost = recompute_cost(cfg, benchmark, encoder, retriever, device, read_record(folder))
            return (f"dry run: run {run_id} is complete ({shown(folder)}): nothing to do; {cost}; overwrite=true "
                    f"recomputes it")
        copy = kept.copy_of(folder)
        if (copy / COMPLETE).is_file():
            cost = recompute_cost(cfg, benchmark, encoder, retriever, device, read_record(copy))
            return (f"dry run: run {run_id} would be restored from its kept copy {shown(copy)}: {cost}; "
                    f"overwrite=true recomputes it")
    plan = _training_plan(cfg, benchmark, encoder, retriever, device, benchmark.splits)
    lines = [plan.render()] if plan is not None else []
    return "\n".join([*lines, f"dry run: run {run_id} would be computed into {shown(folder)} (nothing was "
                                f"trained or written)"])


def _training_plan(cfg: DictConfig, benchmark: Benchmark, encoder: Any, retriever: RetrieverBase, device: str,
                   splits: Sequence[Any]) -> TrainingPlan | None:
    """The models ``retriever`` trains for ``splits`` (None when it has none), found or forecast without
    encoding or training anything: it is bound to a planning context (``memrepro.training.plan``)."""
    if not per_seed_artifacts(retriever):
        return None
    retriever.bind_training(planning_context(benchmark, encoder, Path(cfg.paths.models_dir), device,
                                             retriever.uses_vectors))
    return training_plan(retriever, splits, device)


def recompute_cost(cfg: DictConfig, benchmark: Benchmark, encoder: Any, retriever: RetrieverBase, device: str,
                   record: RunRecord) -> str:
    """``recomputing it takes about 2 h 10 min (...)``: the phases the run recorded (``metrics.json`` timings:
    loading, encoding, retrieval, scoring) plus the forecast of the models it would train now (absent ones)."""
    recorded = sum(float(v) for k, v in record.timings.items() if k.endswith("_s"))
    text = f"{duration(recorded)} of encoding, retrieval and scoring as recorded"
    try:
        plan = _training_plan(cfg, benchmark, encoder, retriever, device, benchmark.splits)
    except MemreproError as exc:  # e.g. a configured checkpoint path that is gone: the run would fail there
        return f"recomputing it takes {text}, plus training (no forecast: {one_line(exc)})"
    if plan is None or not plan.to_do:
        return f"recomputing it takes {text}"
    return (f"recomputing it takes {duration(recorded + plan.seconds)} ({text}, plus {plan.summary()} on "
            f"{where(device)}, forecast)")


def _reusable_splits(resolved: Mapping[str, Any], benchmark: Benchmark, encoder: Any, folder: Path,
                     kept: KeptRuns | None = None) -> ReusedSplits:
    """Splits complete runs of this config over fewer of its ``dataset.seeds`` hold (``memrepro.runs.seed_reuse``)."""
    seeds = (resolved.get("dataset") or {}).get("seeds")
    if not isinstance(seeds, list):  # a benchmark without split seeds
        return ReusedSplits()

    def run_id_for(subset: list[int]) -> str:
        variant = {**resolved, "dataset": {**resolved["dataset"], "seeds": subset}}
        return config_hash(run_id_payload(variant, benchmark.data_sha256, encoder.identity))

    return find_reusable(folder, seeds, run_id_for, benchmark, kept)


def _compute(cfg: DictConfig, resolved: Mapping[str, Any], benchmark: Benchmark, encoder: Any,
             retriever: RetrieverBase, folder: Path, run_id: str, checkpoint: RetrievalCheckpoint, device: str,
             timings: dict[str, float], verification: Mapping[str, Any] | None = None,
             algorithm_versions: Mapping[str, int] | None = None, reused: ReusedSplits | None = None) -> RunOutcome:
    """Encode, retrieve (resuming from ``checkpoint``; ``reused`` splits are taken from other runs), score and
    write one run that is not complete yet. ``resolved`` is ``cfg`` resolved to plain containers (what
    ``config.yaml`` holds)."""
    reused = reused or ReusedSplits()
    plan = _training_plan(cfg, benchmark, encoder, retriever, device, needed_splits(benchmark.splits, reused.rows))
    if plan is not None and plan.to_do:  # before anything is encoded or trained: what it costs, model by model
        print(plan.render(), flush=True)
    if retriever.uses_vectors:
        index, query_vectors, cached = _indexed(benchmark, encoder, Path(cfg.paths.cache_dir), device,
                                                bool(cfg.runtime.progress), timings, search_options(cfg))
    else:  # e.g. BM25: nothing is encoded; the index carries the memories and placeholder vectors
        index, query_vectors, cached = vectorless_index(benchmark, device, timings)

    # trained models: found or trained per split (retrieval itself never reads the context's gold)
    from memrepro.artifacts.per_seed import TrainingContext

    retriever.bind_training(TrainingContext(benchmark, index, query_vectors, encoder.identity,
                                            Path(cfg.paths.models_dir), device, bool(cfg.runtime.progress),
                                            float(cfg.runtime.checkpoint_every_s),
                                            plan_printed=bool(plan is not None and plan.to_do)))
    _warm_up(index, query_vectors)
    start = time.perf_counter()  # per-episode indexes etc., built outside the timed pass
    retriever.prepare(index)
    timings["prepare_s"] = time.perf_counter() - start
    rankings, traces, timings["retrieve_s"], n_retrieved = _retrieve_all(benchmark, retriever, index, query_vectors,
                                                                        int(cfg.runtime.batch_size), checkpoint,
                                                                        timings, skip=set(reused.rows))
    if reused.rows:  # their retrieval was timed in the runs that computed them
        timings["reused_queries"] = reused.n_queries
        timings["retrieve_s"] += reused.retrieve_s
        n_retrieved += reused.n_queries
    batch1_queries = int(cfg.latency.batch1_queries)
    once = bool(cfg.latency.get("batch1_once", False))
    if once and _BATCH1_TIMED:  # a sweep times batch-1 latency on its first point only
        batch1_queries = 0
    batch1 = _batch1_latency(benchmark, retriever, index, query_vectors, batch1_queries,
                             int(cfg.latency.warmup), device)
    if once:
        if _BATCH1_TIMED:
            batch1["measured_on"] = _BATCH1_TIMED[0]
        elif batch1_queries > 0:
            _BATCH1_TIMED.append(run_id)

    search_report = None
    if index.options.approximate:  # always reported with its recall against exact search on the same run
        sample = list(benchmark.queries)[: int(cfg.search.recall_queries)]
        search_report = approximate_recall(index, np.stack([query_vectors[q.id] for q in sample]),
                                           [q.episode_id for q in sample], int(cfg.search.recall_k))
        log.info("approximate search %s: recall@%d against exact = %.4f over %d queries", search_report["backend"],
                 search_report["k"], search_report["recall_at_k"] or 0.0, search_report["n_queries"])

    start = time.perf_counter()
    metric_names = metric_names_for(cfg, benchmark)
    rows, counts, summary = score_rankings(benchmark, rankings, traces, metric_names, batch1["per_query_ms"],
                                           int(cfg.output.top_n), reused.rows)
    timings["metrics_s"] = time.perf_counter() - start

    record = RunRecord.new({
        "run_id": run_id,
        "dataset": benchmark.name,
        "data_verified": (verification or {}).get("data_verified"),
        "retriever": retriever.describe(),
        "encoder": {"label": encoder.label, **encoder.identity,
                    **({"resolved": vars(encoder.resolved)} if hasattr(encoder, "resolved") else {})},
        "metric_names": metric_names,
        "primary": list(benchmark.protocol.primary),
        "counts": {**counts, "loader": dict(benchmark.loader_counts)},
        "returned": returned_stats(rows),
        "summary": summary,
        "warnings": run_warnings(benchmark, verification, cached.quarantined) + reused.notes() + take_warnings(),
        "latency": {
            "batched_amortized_ms_per_query": 1000.0 * timings["retrieve_s"] / max(1, n_retrieved),
            "batch1": {k: v for k, v in batch1.items() if k != "per_query_ms"},
            "timed_region": retriever.timed_region,
        },
        "routing": routing_summary(rows),
        "search": search_report,
        "timings": timings,
        "encoded": dict(cached.encoded),
        "cache_hits": dict(cached.cache_hits),
        "cache_quarantined": list(cached.quarantined),
        "provenance": {
            "config_hash": run_id,
            "data_sha256": benchmark.data_sha256,
            "files": [vars(f) for f in benchmark.files],
            "data_files": (verification or {}).get("data_files", []),
            "loader_options": dict(benchmark.options),
            "tie_rule": TIE_RULE,
            "algorithm_versions": dict(algorithm_versions or {}),
            "git": git_commit(),
            "versions": package_versions(),
            "hardware": hardware(device),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    }, str(folder / "metrics.json"))
    record = with_findings(record, resolved, rows)
    folder = write_run(folder, resolved, rows, record, run_id)
    checkpoint.discard()
    log.info("wrote %s", shown(folder))
    return RunOutcome(folder, False, record, dict(cached.encoded))


_INDEXED: dict[tuple, tuple[Any, Any, EpisodeIndex, dict[str, np.ndarray], CachedEncoder]] = {}
_BATCH1_TIMED: list[str] = []  # run id of the point that timed batch-1 latency (latency.batch1_once)


def _indexed(benchmark: Benchmark, encoder: Any, cache_dir: Path, device: str, progress: bool,
             timings: dict[str, float], options: SearchOptions):
    """``encode_and_index`` once per process for one (dataset, encoder, device, search options): the points of a
    sweep share the vectors and the index (both are read-only to retrievers), so a point costs its retrieval.
    A reused index reports zero encode/index time and no new encodes."""
    key = (id(benchmark), id(encoder), str(cache_dir), device, options)
    held = _INDEXED.get(key)
    if held is None or held[0] is not benchmark or held[1] is not encoder:  # ids are only unique while alive
        index, query_vectors, cached = encode_and_index(benchmark, encoder, cache_dir, device, progress, timings,
                                                        options)
        _INDEXED.clear()  # keep one: a process sweeping several datasets does not accumulate indexes
        _INDEXED[key] = (benchmark, encoder, index, query_vectors, cached)
        return index, query_vectors, cached
    _, _, index, query_vectors, cached = held
    timings.update(encode_documents_s=0.0, encode_queries_s=0.0, model_load_s=0.0, index_s=0.0, index_reused=1.0)
    reused = CachedEncoder(cached.inner, cached.cache_dir, progress=False)  # fresh counters: nothing encoded
    reused.cache_hits = {role: cached.cache_hits[role] + cached.encoded[role] for role in cached.cache_hits}
    return index, query_vectors, reused


def _retrieve_all(benchmark: Benchmark, retriever: RetrieverBase, index: EpisodeIndex,
                  query_vectors: Mapping[str, np.ndarray], batch_size: int, checkpoint: RetrievalCheckpoint,
                  timings: dict[str, float], skip: set[str] = frozenset()):
    """The batched pass over every split not in ``skip``. Queries found in the checkpoint are not retrieved
    again; every finished batch is handed to it, and what is pending is written when anything (an error, Ctrl-C)
    stops the pass."""
    restored = checkpoint.load()
    rankings, traces, elapsed = restored.rankings, restored.traces, restored.retrieve_s
    # taken from another run now, with its own seconds (these queries' seconds stay in elapsed: a checkpoint
    # record's time is not split per query, so the amortized figure errs high, never low)
    for key in [key for key in rankings if key[0] in skip]:
        del rankings[key]
        traces.pop(key, None)
    timings["resumed_queries"] = len(rankings)
    if rankings:
        log.info("resuming: %d queries retrieved earlier (%s)", len(rankings), checkpoint.path)
    n = len(rankings)
    try:
        for number, split in enumerate(benchmark.splits, start=1):
            queries = [] if split.name in skip else [q for q in benchmark.split_queries(split)
                                                     if (split.name, q.id) not in rankings]
            if queries or number == len(benchmark.splits):  # e.g. one trained cross-encoder per split seed
                # the last split's model stays loaded, as after an uninterrupted pass (describe(), batch-1 latency)
                retriever.for_split(split)
            for start in range(0, len(queries), batch_size):
                batch = queries[start:start + batch_size]
                vectors = np.stack([query_vectors[q.id] for q in batch])
                began = time.perf_counter()
                retrieved = retriever.retrieve(retrieval_inputs(batch), vectors, index)
                _sync(index)
                seconds = time.perf_counter() - began
                elapsed += seconds
                n += len(batch)
                frozen = [freeze(q.id, r.hits, benchmark.episodes[q.episode_id], retriever.order)
                          for q, r in zip(batch, retrieved)]
                for query, ranking, result in zip(batch, frozen, retrieved):
                    rankings[(split.name, query.id)] = ranking
                    traces[(split.name, query.id)] = result.trace
                checkpoint.add(split.name, frozen, [r.trace for r in retrieved], seconds)
    except BaseException:
        checkpoint.flush()  # on success the pending batches are committed with the run, not written twice
        raise
    return rankings, traces, elapsed, n


def _warm_up(index: EpisodeIndex, query_vectors: Mapping[str, np.ndarray]) -> None:
    """One untimed one-query search before the timed pass, so that one-off library start-up (torch's first
    matmul and sort; 1.5 ms single-threaded here, far more while its thread pool starts) is not charged to the
    first batch of whichever retriever runs. Retrieval results do not depend on it."""
    vector = next(iter(query_vectors.values()), None)
    if vector is None or not index.episode_ids:
        return
    search(index, np.asarray(vector, dtype=np.float32)[None, :], [index.episode_ids[0]], k=1)
    _sync(index)


def _sync(index: EpisodeIndex) -> None:
    if index.device.type == "cuda":
        import torch

        torch.cuda.synchronize(index.device)


def _batch1_latency(benchmark: Benchmark, retriever: RetrieverBase, index: EpisodeIndex,
                    query_vectors: Mapping[str, np.ndarray], n_queries: int, warmup: int,
                    device: str) -> dict[str, Any]:
    """Per-query latency with one query per call; the first ``warmup`` calls are run and discarded."""
    sample = list(benchmark.queries[: n_queries + warmup]) if n_queries > 0 else []
    per_query: dict[str, float] = {}
    for i, query in enumerate(sample):
        vector = query_vectors[query.id][None, :]
        _sync(index)
        began = time.perf_counter()
        retriever.retrieve(retrieval_inputs([query]), vector, index)
        _sync(index)
        if i >= warmup:
            per_query[query.id] = 1000.0 * (time.perf_counter() - began)
    values = sorted(per_query.values())
    stats = {"n": len(values), "warmup": warmup, "device": device}
    if values:
        stats.update(mean_ms=statistics.fmean(values), median_ms=statistics.median(values),
                     p90_ms=float(np.percentile(values, 90)))
    return {**stats, "per_query_ms": per_query}


