"""One run: load → encode (cached) → index → retrieve (batched) → freeze → metrics → results folder.

Two latency numbers, never mixed: the batched pass's amortized ms/query, and batch-1 latency (one query per
call, after a warm-up) on a fixed sample of queries. Timed region for both: retrieval given the query vector
(``search_only``); encoding is a separate phase timing.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from memrepro.config import NON_SEMANTIC_KEYS
from memrepro.errors import MemreproError
from memrepro.evaluation.aggregate import aggregate
from memrepro.evaluation.freeze import TIE_RULE, FrozenRanking, freeze
from memrepro.evaluation.metrics import compute_metrics
from memrepro.models.encoder import CachedEncoder, resolve_device
from memrepro.provenance import config_hash, git_commit, hardware, package_versions
from memrepro.resume import RetrievalCheckpoint
from memrepro.results import RunWriter, is_complete, read_metrics, run_dir
from memrepro.retrievers.base import RetrievalInput, Retriever
from memrepro.search import EpisodeIndex, build_index, search
from memrepro.types import Benchmark, Query

log = logging.getLogger("memrepro")


@dataclass
class RunOutcome:
    folder: Path
    skipped: bool
    metrics: dict[str, Any]
    encoded: dict[str, int]


def build(node: DictConfig) -> Any:
    """``instantiate`` that lets memrepro's own errors through: Hydra wraps every exception raised by a target
    in InstantiationException, which would bury 'file X, record Y, field Z' under a Hydra traceback."""
    try:
        return instantiate(node)
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, (MemreproError, ValueError)):
            raise cause from None
        raise


_REUSABLE: dict[str, Any] = {}


def _reused(node: DictConfig) -> Any:
    """Build a dataset or encoder once per process and config: the points of a Hydra sweep (the basic launcher
    runs them in one process) then cost retrieval only, with no reload of the data or the model."""
    key = json.dumps(OmegaConf.to_container(node, resolve=True), sort_keys=True, default=str)
    if key not in _REUSABLE:
        _REUSABLE[key] = build(node)
    return _REUSABLE[key]


def load_benchmark(cfg: DictConfig) -> Benchmark:
    """The configured benchmark (once per process); a missing official file is fetched when online."""
    from memrepro.datasets.autofetch import with_fetch
    from memrepro.datasets.io import data_root

    return with_fetch(lambda: _reused(cfg.dataset), data_root(cfg.dataset.get("data_dir") or cfg.paths.data_dir))


def semantic_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config minus keys that change no ranking or metric (paths, device, latency sampling)."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    for key in NON_SEMANTIC_KEYS:
        resolved.pop(key, None)
    for group in ("dataset", "encoder"):  # where the data lives and which device encodes are not identity
        if isinstance(resolved.get(group), dict):
            for key in ("data_dir", "device", "show_progress", "batch_size"):
                resolved[group].pop(key, None)
    return resolved


def run(cfg: DictConfig, retriever: Retriever | None = None) -> RunOutcome:
    """One configured run; ``retriever`` (``memrepro.evaluate``) replaces the one ``cfg.retriever`` would build."""
    import torch

    timings: dict[str, float] = {}
    if cfg.runtime.torch_threads:
        torch.set_num_threads(int(cfg.runtime.torch_threads))
    device = resolve_device(cfg.runtime.device)

    start = time.perf_counter()
    benchmark: Benchmark = load_benchmark(cfg)
    timings["load_s"] = time.perf_counter() - start
    encoder = _reused(cfg.encoder)
    retriever = retriever if retriever is not None else build(cfg.retriever)

    semantic = semantic_config(cfg)
    run_id = config_hash({"config": semantic, "data_sha256": benchmark.data_sha256, "encoder": encoder.identity})
    folder = run_dir(cfg.paths.results_dir, benchmark.name, retriever.name, encoder.label, run_id)
    checkpoint = RetrievalCheckpoint.for_run(folder, float(cfg.runtime.checkpoint_every_s))
    if cfg.overwrite or not is_complete(folder):
        with checkpoint.locked():  # one process per run: a second launch of the same run fails instead of racing
            if cfg.overwrite:
                checkpoint.discard()
            if cfg.overwrite or not is_complete(folder):  # another process may have completed it meanwhile
                return _compute(cfg, benchmark, encoder, retriever, folder, run_id, checkpoint, device, timings)
    log.info("run %s is complete: skipped (set overwrite=true to redo it)", folder)
    return RunOutcome(folder, True, read_metrics(folder), {"query": 0, "document": 0})


def _compute(cfg: DictConfig, benchmark: Benchmark, encoder: Any, retriever: Retriever, folder: Path, run_id: str,
             checkpoint: RetrievalCheckpoint, device: str, timings: dict[str, float]) -> RunOutcome:
    """Encode, retrieve (resuming from ``checkpoint``), score and write one run that is not complete yet."""
    if getattr(retriever, "uses_vectors", True):
        index, query_vectors, cached = encode_and_index(benchmark, encoder, Path(cfg.paths.cache_dir), device,
                                                        bool(cfg.runtime.progress), timings)
    else:  # e.g. BM25: nothing is encoded; the index carries the memories and placeholder vectors
        index, query_vectors, cached = vectorless_index(benchmark, device, timings)

    _warm_up(index, query_vectors)
    if hasattr(retriever, "prepare"):  # optional hook: per-episode indexes etc., built outside the timed pass
        start = time.perf_counter()
        retriever.prepare(index)
        timings["prepare_s"] = time.perf_counter() - start
    rankings, traces, timings["retrieve_s"], n_retrieved = _retrieve_all(benchmark, retriever, index, query_vectors,
                                                                        int(cfg.runtime.batch_size), checkpoint,
                                                                        timings)
    batch1 = _batch1_latency(benchmark, retriever, index, query_vectors, int(cfg.latency.batch1_queries),
                             int(cfg.latency.warmup), device)

    start = time.perf_counter()
    metric_names = metric_names_for(cfg, benchmark)
    rows, counts, summary = score_rankings(benchmark, rankings, traces, metric_names, batch1["per_query_ms"],
                                           int(cfg.output.top_n))
    timings["metrics_s"] = time.perf_counter() - start

    metrics_doc = {
        "run_id": run_id,
        "dataset": benchmark.name,
        "retriever": retriever.describe(),
        "encoder": {"label": encoder.label, **encoder.identity,
                    **({"resolved": vars(encoder.resolved)} if hasattr(encoder, "resolved") else {})},
        "metric_names": metric_names,
        "primary": list(benchmark.protocol.primary),
        "counts": {**counts, "loader": dict(benchmark.loader_counts)},
        # gold-free diagnostics, for every retrieved row (PersonaMem has no gold at all)
        "returned": {"mean_items": _mean([r["n_returned"] for r in rows]),
                     "mean_chars_top_n": _mean([r["returned_chars"] for r in rows])},
        "summary": summary,
        "latency": {
            "batched_amortized_ms_per_query": 1000.0 * timings["retrieve_s"] / max(1, n_retrieved),
            "batch1": {k: v for k, v in batch1.items() if k != "per_query_ms"},
            "timed_region": getattr(retriever, "timed_region",
                                    "retriever call, query vector given (encoding is timed as a phase)"),
        },
        "routing": _routing(rows),
        "timings": timings,
        "encoded": dict(cached.encoded),
        "cache_hits": dict(cached.cache_hits),
        "provenance": {
            "config_hash": run_id,
            "data_sha256": benchmark.data_sha256,
            "files": [vars(f) for f in benchmark.files],
            "loader_options": dict(benchmark.options),
            "tie_rule": TIE_RULE,
            "git": git_commit(),
            "versions": package_versions(),
            "hardware": hardware(device),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    }
    folder = write_run(folder, cfg, rows, metrics_doc, run_id)
    checkpoint.discard()
    log.info("wrote %s", folder)
    return RunOutcome(folder, False, metrics_doc, dict(cached.encoded))


def metric_names_for(cfg: DictConfig, benchmark: Benchmark) -> list[str]:
    """``metrics.names`` (empty: the benchmark protocol's) plus ``metrics.extra``."""
    names = list(cfg.metrics.names) or list(benchmark.protocol.metrics)
    return names + [m for m in cfg.metrics.extra if m not in names]


def score_rankings(benchmark: Benchmark, rankings: Mapping[tuple[str, str], FrozenRanking], traces: Mapping,
                   metric_names: list[str], latency_ms: Mapping[str, float], top_n: int):
    """Frozen rankings → (per-query rows, counts, aggregate summary): the one scoring path of ``run``, ``eval``
    and ``memrepro.evaluate``."""
    rows, counts = _score(benchmark, rankings, traces, metric_names, latency_ms, top_n)
    summary = aggregate([{"split": r["split"], "category": r["category"], **r["metrics"]}
                         for r in rows if r["excluded"] is None],
                        metric_names, benchmark.protocol.category_names)
    return rows, counts, summary


def write_run(folder: Path, cfg: DictConfig | Mapping[str, Any], rows: list[dict[str, Any]],
              metrics_doc: Mapping[str, Any], run_id: str) -> Path:
    """The results folder (config.yaml, queries.jsonl, run.trec, metrics.json, COMPLETE), atomically."""
    writer = RunWriter(folder)
    try:
        config = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(dict(cfg))
        writer.write_text("config.yaml", OmegaConf.to_yaml(config, resolve=True))
        writer.write_jsonl("queries.jsonl", rows)
        writer.write_text("run.trec", _trec(rows, run_id))
        writer.write_json("metrics.json", metrics_doc)
        return writer.commit()
    except BaseException:
        writer.abort()
        raise


def encode_and_index(benchmark: Benchmark, encoder: Any, cache_dir: Path, device: str, progress: bool,
                     timings: dict[str, float]) -> tuple[EpisodeIndex, dict[str, np.ndarray], CachedEncoder]:
    """Encode every memory and query through the embedding cache and stack the episodes on ``device``."""
    cached = CachedEncoder(encoder, cache_dir / "embeddings", progress=progress)
    start = time.perf_counter()
    doc_vectors = _encode_episodes(benchmark, cached)
    timings["encode_documents_s"] = time.perf_counter() - start
    start = time.perf_counter()
    query_vectors = _encode_queries(benchmark, cached)
    timings["encode_queries_s"] = time.perf_counter() - start
    timings["model_load_s"] = getattr(encoder, "load_seconds", 0.0)
    start = time.perf_counter()
    index = build_index(benchmark.episodes, doc_vectors, device=device)
    timings["index_s"] = time.perf_counter() - start
    return index, query_vectors, cached


@dataclass
class _NothingEncoded:
    encoded: dict[str, int]
    cache_hits: dict[str, int]


def vectorless_index(benchmark: Benchmark, device: str, timings: dict[str, float]):
    """For retrievers that declare ``uses_vectors = False``: an index of the memories with 1-d zero vectors."""
    start = time.perf_counter()
    index = build_index(benchmark.episodes, {e: np.zeros((len(ep), 1), np.float32)
                                             for e, ep in benchmark.episodes.items()}, device=device, dim=1)
    timings["index_s"] = time.perf_counter() - start
    query_vectors = {q.id: np.zeros(1, np.float32) for q in benchmark.queries}
    return index, query_vectors, _NothingEncoded({"query": 0, "document": 0}, {"query": 0, "document": 0})


def _encode_episodes(benchmark: Benchmark, encoder: CachedEncoder) -> dict[str, np.ndarray]:
    texts = [m.text for e in benchmark.episodes.values() for m in e.memories]
    matrix = encoder.encode(texts, "document")
    out, offset = {}, 0
    for episode_id, episode in benchmark.episodes.items():
        out[episode_id] = matrix[offset:offset + len(episode)]
        offset += len(episode)
    return out


def _encode_queries(benchmark: Benchmark, encoder: CachedEncoder) -> dict[str, np.ndarray]:
    matrix = encoder.encode([q.text for q in benchmark.queries], "query")
    return {q.id: matrix[i] for i, q in enumerate(benchmark.queries)}


def _inputs(queries: list[Query]) -> list[RetrievalInput]:
    return [RetrievalInput(q.id, q.text, q.episode_id) for q in queries]  # gold never leaves this module


def _retrieve_all(benchmark: Benchmark, retriever: Retriever, index: EpisodeIndex,
                  query_vectors: Mapping[str, np.ndarray], batch_size: int, checkpoint: RetrievalCheckpoint,
                  timings: dict[str, float]):
    """The batched pass. Queries found in the checkpoint are not retrieved again; every finished batch is handed
    to it, and what is pending is written when anything (an error, Ctrl-C) stops the pass."""
    restored = checkpoint.load()
    rankings, traces, elapsed = restored.rankings, restored.traces, restored.retrieve_s
    timings["resumed_queries"] = len(rankings)
    if rankings:
        log.info("resuming: %d queries retrieved earlier (%s)", len(rankings), checkpoint.path)
    n = len(rankings)
    per_split = hasattr(retriever, "for_split")  # e.g. one trained cross-encoder per split seed
    try:
        for number, split in enumerate(benchmark.splits, start=1):
            queries = [q for q in benchmark.split_queries(split) if (split.name, q.id) not in rankings]
            if per_split and (queries or number == len(benchmark.splits)):
                # the last split's model stays loaded, as after an uninterrupted pass (describe(), batch-1 latency)
                retriever.for_split(split)
            for start in range(0, len(queries), batch_size):
                batch = queries[start:start + batch_size]
                vectors = np.stack([query_vectors[q.id] for q in batch])
                began = time.perf_counter()
                retrieved = retriever.retrieve(_inputs(batch), vectors, index)
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


def _batch1_latency(benchmark: Benchmark, retriever: Retriever, index: EpisodeIndex,
                    query_vectors: Mapping[str, np.ndarray], n_queries: int, warmup: int,
                    device: str) -> dict[str, Any]:
    """Per-query latency with one query per call; the first ``warmup`` calls are run and discarded."""
    sample = list(benchmark.queries[: n_queries + warmup]) if n_queries > 0 else []
    per_query: dict[str, float] = {}
    for i, query in enumerate(sample):
        vector = query_vectors[query.id][None, :]
        _sync(index)
        began = time.perf_counter()
        retriever.retrieve(_inputs([query]), vector, index)
        _sync(index)
        if i >= warmup:
            per_query[query.id] = 1000.0 * (time.perf_counter() - began)
    values = sorted(per_query.values())
    stats = {"n": len(values), "warmup": warmup, "device": device}
    if values:
        stats.update(mean_ms=statistics.fmean(values), median_ms=statistics.median(values),
                     p90_ms=float(np.percentile(values, 90)))
    return {**stats, "per_query_ms": per_query}


def _score(benchmark: Benchmark, rankings: Mapping[tuple[str, str], FrozenRanking], traces: Mapping,
           metric_names: list[str], latency_ms: Mapping[str, float], top_n: int):
    rows: list[dict[str, Any]] = []
    counts = {"n_total": 0, "n_scored": 0, "n_excluded": {}}
    for split in benchmark.splits:
        queries = list(benchmark.split_queries(split))
        values = compute_metrics({q.id: rankings[(split.name, q.id)] for q in queries}, queries, metric_names)
        for query in queries:
            ranking = rankings[(split.name, query.id)]
            text_of = {m.id: m.text for m in benchmark.episodes[query.episode_id].memories}
            counts["n_total"] += 1
            if query.excluded is None:
                counts["n_scored"] += 1
            else:
                counts["n_excluded"][query.excluded] = counts["n_excluded"].get(query.excluded, 0) + 1
            rows.append({
                "split": split.name,
                "seed": split.seed,
                "query_id": query.id,
                "episode_id": query.episode_id,
                "category": query.category,
                "excluded": query.excluded,
                "gold": list(query.gold),
                "gold_ranks": ranking.ranks_of(tuple(dict.fromkeys(query.gold))),
                "n_returned": len(ranking.memory_ids),
                "returned_chars": sum(len(text_of[m]) for m in ranking.memory_ids[:top_n]),
                "top": [[m, s] for m, s in zip(ranking.memory_ids[:top_n], ranking.scores[:top_n])],
                "latency_ms": latency_ms.get(query.id),
                "trace": traces.get((split.name, query.id)) or None,
                "metrics": values.get(query.id, {}),
            })
    return rows, counts


def _routing(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per path (a trace's ``path``): query count and the mean of every numeric ``*_ms`` trace field.

    RF-Mem reports its latency with the timer around the chosen path only (``path_ms``); the gate's probe is
    timed separately (``gate_ms``), so both the paper's number and the full cost can be read here.
    """
    by_path: dict[str, list[dict]] = {}
    for row in rows:
        trace = row.get("trace") or {}
        if "path" in trace:
            by_path.setdefault(str(trace["path"]), []).append(trace)
    if not by_path:
        return None
    out: dict[str, Any] = {}
    for path, traces in sorted(by_path.items()):
        timing_keys = sorted({k for t in traces for k, v in t.items() if k.endswith("_ms") and
                              isinstance(v, (int, float))})
        out[path] = {"n": len(traces), **{f"mean_{k}": _mean([t[k] for t in traces if k in t]) for k in timing_keys}}
    return out


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _trec(rows: list[dict[str, Any]], tag: str) -> str:
    multi_split = len({r["split"] for r in rows}) > 1
    lines = []
    for row in rows:
        qid = f"{row['split']}::{row['query_id']}" if multi_split else row["query_id"]
        for rank, (memory_id, score) in enumerate(row["top"], start=1):
            lines.append(f"{qid} Q0 {memory_id} {rank} {score:.9g} {tag}")  # 9 digits: float32 round-trips
    return "\n".join(lines) + ("\n" if lines else "")
