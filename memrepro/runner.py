"""One run, orchestrated: load → encode (cached) → index → retrieve (batched) → freeze → metrics → results
folder.
The stages themselves are :mod:`memrepro.stages`; where a run is stored, :mod:`memrepro.runs`; its record,
:meth:`memrepro.runs.record.RunRecord.build`. Here: whether a run is computed, restored from its kept copy or
skipped, the training plan first, the batched and resumable retrieval pass, latency, and what the runs of one
command or sweep share (their :class:`memrepro.context.RunContext`: vectors and index, the batch-1 timing).

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
from memrepro.context import RunContext
from memrepro.errors import MemreproError, one_line
from memrepro.evaluation.freeze import freeze
from memrepro.logs import above_progress_bars
from memrepro.models.encoder import CachedEncoder, resolve_device
from memrepro.paths import shown
from memrepro.provenance import config_hash, hardware
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
                             score_rankings, search_options, vectorless_index)
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


def _prepare(cfg: DictConfig, retriever: Retriever | None, timings: dict[str, float],
             context: RunContext) -> _Prepared:
    """Everything up to the run id and folder, without torch: a complete run is skipped or restored from here."""
    from memrepro.validate import validate_run_config

    validate_run_config(cfg)  # every entry point (CLI, memrepro.evaluate, sweeps, experiments), before anything loads
    if cfg.runtime.torch_threads:  # set before anything reads it (the plan's forecast names the thread count)
        import torch

        torch.set_num_threads(int(cfg.runtime.torch_threads))

    device = resolve_device(cfg.runtime.device)
    start = time.perf_counter()
    benchmark, verification = load_benchmark(cfg.dataset, context)
    timings["load_s"] = time.perf_counter() - start
    encoder = build_once(cfg.encoder, context)
    retriever = as_retriever(retriever if retriever is not None else build(cfg.retriever))
    resolved = OmegaConf.to_container(cfg, resolve=True)
    identity = run_id_payload(resolved, benchmark.data_sha256, encoder.identity)
    run_id = config_hash(identity)
    folder = run_dir(cfg.paths.results_dir, benchmark.name, retriever.name, encoder.label, run_id)
    return _Prepared(device, benchmark, verification, encoder, retriever, resolved, identity, run_id, folder)


def run(cfg: DictConfig, retriever: Retriever | None = None, context: RunContext | None = None) -> RunOutcome:
    """One configured run; ``retriever`` (``memrepro.evaluate``) replaces the one ``cfg.retriever`` would build.
    ``context``: what this run shares with the others of its command or sweep (datasets, encoders, vectors and
    index, files hashed, the batch-1 timing); a fresh one when None, as in a new process."""
    context = context if context is not None else RunContext()
    timings: dict[str, float] = {}
    prepared = _prepare(cfg, retriever, timings, context)
    folder, run_id = prepared.folder, prepared.run_id
    checkpoint = RetrievalCheckpoint.for_run(folder, float(cfg.runtime.checkpoint_every_s))
    problem = run_problem(folder) if is_complete(folder) else None  # a damaged marker or file: incomplete
    kept = KeptRuns(Path(cfg.paths.results_dir), Path(cfg.paths.kept_dir))
    restored = None
    if cfg.overwrite or not is_complete(folder) or problem or stale_siblings(folder):
        with checkpoint.locked():  # one process per run: a second launch of the same run fails instead of racing
            recover(folder)  # a commit a kill interrupted: finished or undone, never listed as a run
            if cfg.overwrite:
                checkpoint.discard()
            elif problem or not is_complete(folder):  # a kept copy of this very run (said below, with its cost)
                restored = kept.restore_or_warn(folder, "the run is recomputed", announce=False)
            if problem and not cfg.overwrite:
                log.warning("%s; %s", problem, "restored from its kept copy" if restored else "the run is recomputed")
            # another process may have completed it meanwhile; a restore has just verified what it committed
            if cfg.overwrite or (restored is None and run_problem(folder)):
                reused = ReusedSplits() if cfg.overwrite else _reusable_splits(prepared, kept)
                with above_progress_bars():  # only here: a skip or restore draws none (the redirect loads asyncio)
                    return _compute(cfg, context, prepared, checkpoint, timings, reused)
            checkpoint.discard()  # complete (a commit finished by recover): its checkpoint is spent
    record = read_record(folder)
    if restored:
        log.info("restored run %s from its kept copy %s: %s; set overwrite=true to recompute it; its run.trec is "
                 "written on first use (eval of it, or keep --restore <run folder>)", run_id,
                 shown(kept.copy_of(folder)), recompute_cost(cfg, prepared, record))
    else:
        log.info("run %s is complete: skipped (set overwrite=true to redo it)", shown(folder))
    return RunOutcome(folder, True, record, {"query": 0, "document": 0}, restored is not None)


def dry_run(cfg: DictConfig, context: RunContext | None = None) -> str:
    """What ``run`` would do, as text, with nothing encoded, trained, computed or written (``run --dry-run``):
    the training plan of the models it would train, and whether the run would be computed, restored from its kept
    copy or skipped."""
    prepared = _prepare(cfg, None, {}, context if context is not None else RunContext())
    run_id, folder = prepared.run_id, prepared.folder
    kept = KeptRuns(Path(cfg.paths.results_dir), Path(cfg.paths.kept_dir))
    if not cfg.overwrite:
        if is_complete(folder) and not run_problem(folder):
            cost = recompute_cost(cfg, prepared, read_record(folder))
            return (f"dry run: run {run_id} is complete ({shown(folder)}): nothing to do; {cost}; overwrite=true "
                    f"recomputes it")
        copy = kept.copy_of(folder)
        if (copy / COMPLETE).is_file():
            cost = recompute_cost(cfg, prepared, read_record(copy))
            return (f"dry run: run {run_id} would be restored from its kept copy {shown(copy)}: {cost}; "
                    f"overwrite=true recomputes it")
    plan = _training_plan(cfg, prepared, prepared.benchmark.splits)
    lines = [plan.render()] if plan is not None else []
    return "\n".join([*lines, f"dry run: run {run_id} would be computed into {shown(folder)} (nothing was "
                                f"trained or written)"])


def _training_plan(cfg: DictConfig, prepared: _Prepared, splits: Sequence[Any]) -> TrainingPlan | None:
    """The models the run's retriever trains for ``splits`` (None when it has none), found or forecast without
    encoding or training anything: it is bound to a planning context (``memrepro.training.plan``)."""
    retriever = prepared.retriever
    if not per_seed_artifacts(retriever):
        return None
    retriever.bind_training(planning_context(prepared.benchmark, prepared.encoder, Path(cfg.paths.models_dir),
                                             prepared.device, retriever.uses_vectors))
    return training_plan(retriever, splits, prepared.device)


def recompute_cost(cfg: DictConfig, prepared: _Prepared, record: RunRecord) -> str:
    """``recomputing it takes about 2 h 10 min (...)``: the phases the run recorded (``metrics.json`` timings:
    loading, encoding, retrieval, scoring) plus the forecast of the models it would train now (absent ones)."""
    recorded, text = recorded_phases(record)
    try:
        plan = _training_plan(cfg, prepared, prepared.benchmark.splits)
    except MemreproError as exc:  # e.g. a configured checkpoint path that is gone: the run would fail there
        return f"recomputing it takes {text}, plus training (no forecast: {one_line(exc)})"
    if plan is None or not plan.to_do:
        return f"recomputing it takes {text}"
    return (f"recomputing it takes {duration(recorded + plan.seconds)} ({text}, plus {plan.summary()} on "
            f"{where(prepared.device)}, forecast)")


def recorded_phases(record: Any) -> tuple[float, str]:
    """The seconds of the phases a run recorded and ``about 19 min of encoding, retrieval and scoring as
    recorded``, with how many of its vectors the run read from the embedding cache instead of encoding them (those
    are not in the recorded time: a run on a warm cache records seconds where a fresh machine encodes for hours)."""
    recorded = sum(float(v) for k, v in record.timings.items() if k.endswith("_s"))
    text = f"{duration(recorded)} of encoding, retrieval and scoring as recorded"
    cached = sum(int(n) for n in (record.cache_hits or {}).values())
    if cached:
        text += f", with {cached:,} vectors read from the embedding cache (encoding them is not counted)"
    return recorded, text


def _reusable_splits(prepared: _Prepared, kept: KeptRuns | None = None) -> ReusedSplits:
    """Splits complete runs of this config over fewer of its ``dataset.seeds`` hold (``memrepro.runs.seed_reuse``)."""
    resolved, benchmark = prepared.resolved, prepared.benchmark
    seeds = (resolved.get("dataset") or {}).get("seeds")
    if not isinstance(seeds, list):  # a benchmark without split seeds
        return ReusedSplits()

    def run_id_for(subset: list[int]) -> str:
        variant = {**resolved, "dataset": {**resolved["dataset"], "seeds": subset}}
        return config_hash(run_id_payload(variant, benchmark.data_sha256, prepared.encoder.identity))

    return find_reusable(prepared.folder, seeds, run_id_for, benchmark, kept)


@dataclass
class _Vectors:
    """What retrieval reads: the index of every episode's memories, the query vectors, the encoder that made them
    (its counts: what was encoded, what came from the cache, which shards were repaired)."""

    index: EpisodeIndex
    queries: dict[str, np.ndarray]
    cached: Any


def _compute(cfg: DictConfig, context: RunContext, prepared: _Prepared, checkpoint: RetrievalCheckpoint,
             timings: dict[str, float], reused: ReusedSplits) -> RunOutcome:
    """Encode, retrieve (resuming from ``checkpoint``; ``reused`` splits are taken from other runs), score and
    write one run that is not complete yet: one stage a line."""
    plan = _announce_training(cfg, prepared, reused)
    vectors = _encode_and_index(cfg, context, prepared, timings)
    _bind_training(cfg, context, prepared, vectors, plan)
    rankings, traces, n_retrieved = _retrieve(cfg, prepared, vectors, checkpoint, timings, reused)
    batch1 = _batch1(cfg, context, prepared, vectors)
    search_report = _approximate_recall(cfg, prepared.benchmark, vectors)
    scored = _score(cfg, prepared.benchmark, rankings, traces, batch1, timings, reused)
    latency = _latency(prepared, timings, n_retrieved, batch1)
    record = _record(context, prepared, vectors, scored, timings, latency, search_report, reused)
    folder = write_run(prepared.folder, prepared.resolved, scored.rows, record, prepared.run_id)
    checkpoint.discard()
    log.info("wrote %s", shown(folder))
    return RunOutcome(folder, False, record, dict(vectors.cached.encoded))


def _announce_training(cfg: DictConfig, prepared: _Prepared, reused: ReusedSplits) -> TrainingPlan | None:
    """The training plan of the splits this run computes, printed before anything is encoded or trained when it
    has models to train: what they cost, model by model."""
    splits = needed_splits(prepared.benchmark.splits, reused.rows)
    plan = _training_plan(cfg, prepared, splits)
    if plan is not None and plan.to_do:
        print(plan.render(), flush=True)
    return plan


def _encode_and_index(cfg: DictConfig, context: RunContext, prepared: _Prepared,
                      timings: dict[str, float]) -> _Vectors:
    """The vectors and index (once per context: :func:`_indexed`), or for a retriever that reads no vectors (BM25)
    an index of the memories with placeholder vectors, nothing encoded."""
    if prepared.retriever.uses_vectors:
        held = _indexed(context, prepared.benchmark, prepared.encoder, Path(cfg.paths.cache_dir), prepared.device,
                        bool(cfg.runtime.progress), timings, search_options(cfg))
    else:
        held = vectorless_index(prepared.benchmark, prepared.device, timings)
    return _Vectors(*held)


def _indexed(context: RunContext, benchmark: Benchmark, encoder: Any, cache_dir: Path, device: str, progress: bool,
             timings: dict[str, float], options: SearchOptions):
    """``encode_and_index`` once per context for one (dataset, encoder, device, search options): the points of a
    sweep share the vectors and the index (both are read-only to retrievers), so a point costs its retrieval.
    A reused index reports zero encode/index time and no new encodes."""
    key = (id(benchmark), id(encoder), str(cache_dir), device, options)
    held = context.index
    if held is None or held[0] != key or held[1] is not benchmark or held[2] is not encoder:  # ids: unique while alive
        index, query_vectors, cached = encode_and_index(benchmark, encoder, cache_dir, device, progress, timings,
                                                        options, context)
        # one held: a sweep over several datasets does not accumulate indexes
        context.index = (key, benchmark, encoder, index, query_vectors, cached)
        return index, query_vectors, cached
    _, _, _, index, query_vectors, cached = held
    timings.update(encode_documents_s=0.0, encode_queries_s=0.0, model_load_s=0.0, index_s=0.0, index_reused=1.0)
    # fresh counters: nothing encoded
    reused = CachedEncoder(cached.inner, cached.cache_dir, progress=False, digests=context.digests)
    reused.cache_hits = {role: cached.cache_hits[role] + cached.encoded[role] for role in cached.cache_hits}
    return index, query_vectors, reused


def _bind_training(cfg: DictConfig, context: RunContext, prepared: _Prepared, vectors: _Vectors,
                   plan: TrainingPlan | None) -> None:
    """Hand the retriever what its trained models are found or trained with (retrieval never reads the gold this
    context holds), then build what it reads outside the timed pass (per-episode indexes etc.)."""
    from memrepro.artifacts.per_seed import TrainingContext

    prepared.retriever.bind_training(TrainingContext(
        prepared.benchmark, vectors.index, vectors.queries, prepared.encoder.identity, Path(cfg.paths.models_dir),
        prepared.device, bool(cfg.runtime.progress), float(cfg.runtime.checkpoint_every_s),
        plan_printed=bool(plan is not None and plan.to_do), run_context=context))


def _retrieve(cfg: DictConfig, prepared: _Prepared, vectors: _Vectors, checkpoint: RetrievalCheckpoint,
              timings: dict[str, float], reused: ReusedSplits) -> tuple[dict, dict, int]:
    """The timed batched pass (after the warm-up and the retriever's untimed preparation); splits ``reused`` from
    other runs count with the seconds those runs timed."""
    _warm_up(vectors.index, vectors.queries)
    start = time.perf_counter()
    prepared.retriever.prepare(vectors.index)
    timings["prepare_s"] = time.perf_counter() - start
    rankings, traces, timings["retrieve_s"], n_retrieved = _retrieve_all(
        prepared.benchmark, prepared.retriever, vectors.index, vectors.queries, int(cfg.runtime.batch_size),
        checkpoint, timings, skip=set(reused.rows))
    if reused.rows:  # their retrieval was timed in the runs that computed them
        timings["reused_queries"] = reused.n_queries
        timings["retrieve_s"] += reused.retrieve_s
        n_retrieved += reused.n_queries
    return rankings, traces, n_retrieved


def _batch1(cfg: DictConfig, context: RunContext, prepared: _Prepared, vectors: _Vectors) -> dict[str, Any]:
    """Batch-1 latency; with ``latency.batch1_once`` a context (a sweep) times it on its first point only, and the
    others name that point (``measured_on``)."""
    queries = int(cfg.latency.batch1_queries)
    once = bool(cfg.latency.get("batch1_once", False))
    if once and context.batch1_timed_by is not None:
        queries = 0
    batch1 = _batch1_latency(prepared.benchmark, prepared.retriever, vectors.index, vectors.queries, queries,
                             int(cfg.latency.warmup), prepared.device)
    if once:
        if context.batch1_timed_by is not None:
            batch1["measured_on"] = context.batch1_timed_by
        elif queries > 0:
            context.batch1_timed_by = prepared.run_id
    return batch1


def _approximate_recall(cfg: DictConfig, benchmark: Benchmark, vectors: _Vectors) -> dict[str, Any] | None:
    """An approximate search backend's recall against exact search on this run's queries (None for exact)."""
    if not vectors.index.options.approximate:
        return None
    sample = list(benchmark.queries)[: int(cfg.search.recall_queries)]
    report = approximate_recall(vectors.index, np.stack([vectors.queries[q.id] for q in sample]),
                                [q.episode_id for q in sample], int(cfg.search.recall_k))
    log.info("approximate search %s: recall@%d against exact = %.4f over %d queries", report["backend"],
             report["k"], report["recall_at_k"] or 0.0, report["n_queries"])
    return report


@dataclass
class _Scored:
    metric_names: list[str]
    rows: list[dict[str, Any]]  # per query, as queries.jsonl holds them
    counts: dict[str, Any]
    summary: dict[str, Any]


def _score(cfg: DictConfig, benchmark: Benchmark, rankings: Mapping, traces: Mapping, batch1: Mapping[str, Any],
           timings: dict[str, float], reused: ReusedSplits) -> _Scored:
    """The frozen rankings scored (:func:`memrepro.stages.score_rankings`); each row carries its batch-1 latency."""
    start = time.perf_counter()
    metric_names = metric_names_for(cfg, benchmark)
    rows, counts, summary = score_rankings(benchmark, rankings, traces, metric_names, batch1["per_query_ms"],
                                           int(cfg.output.top_n), reused.rows)
    timings["metrics_s"] = time.perf_counter() - start
    return _Scored(metric_names, rows, counts, summary)


def _latency(prepared: _Prepared, timings: Mapping[str, float], n_retrieved: int,
             batch1: Mapping[str, Any]) -> dict[str, Any]:
    """The record's two latency numbers, never mixed: the batched pass's amortized ms/query and batch-1's."""
    return {"batched_amortized_ms_per_query": 1000.0 * timings["retrieve_s"] / max(1, n_retrieved),
            "batch1": {k: v for k, v in batch1.items() if k != "per_query_ms"},
            "timed_region": prepared.retriever.timed_region}


def _record(context: RunContext, prepared: _Prepared, vectors: _Vectors, scored: _Scored, timings: dict[str, float],
            latency: Mapping[str, Any], search_report: Mapping[str, Any] | None, reused: ReusedSplits) -> RunRecord:
    """The run's record (:meth:`RunRecord.build`), with what only a computed run has: latency, encoding counts,
    hardware, the algorithm versions its id hashed and the warnings its context noted."""
    encoder, cached = prepared.encoder, vectors.cached
    return RunRecord.build(
        run_id=prepared.run_id, config=prepared.resolved, rows=scored.rows, benchmark=prepared.benchmark,
        verification=prepared.verification, retriever=prepared.retriever.describe(),
        encoder={"label": encoder.label, **encoder.identity,
                 **({"resolved": vars(encoder.resolved)} if hasattr(encoder, "resolved") else {})},
        metric_names=scored.metric_names, counts=scored.counts, summary=scored.summary, timings=timings,
        source=str(prepared.folder / "metrics.json"), quarantined=cached.quarantined,
        warnings=reused.notes() + context.take_warnings(), latency=latency, search=search_report,
        encoded=cached.encoded, cache_hits=cached.cache_hits, hardware=hardware(prepared.device),
        algorithm_versions=prepared.identity["algorithm"])


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


