"""The stages of a run, each one function, shared by ``run`` (:mod:`memrepro.runner`, which orders them), ``eval``,
``train``, ``export`` and the bench scripts: build a config node, load the benchmark (checksums verified), encode
and index (through the embedding cache), hand queries to a retriever without their gold, score frozen rankings,
and summarize the rows (returned items, routing, warnings). What the runs of a command or sweep share (datasets
and encoders built once, files hashed once) comes in as their :class:`memrepro.context.RunContext`.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from memrepro.context import RunContext
from memrepro.datasets.verify import enforce
from memrepro.errors import EXIT_BAD_INPUT, MemreproError
from memrepro.evaluation.freeze import FrozenRanking
from memrepro.models.encoder import CachedEncoder
from memrepro.retrievers.base import RetrievalInput
from memrepro.search import EpisodeIndex, SearchOptions, build_index
from memrepro.types import Benchmark, Query

log = logging.getLogger("memrepro")


def build(node: DictConfig, context: RunContext | None = None) -> Any:
    """``instantiate`` that lets memrepro's own errors through: Hydra wraps every exception raised by a target
    in InstantiationException, which would bury 'file X, record Y, field Z' under a Hydra traceback. A target whose
    constructor takes a ``context`` (an encoder that resolves model weights) is given ``context``."""
    try:
        if context is not None and _takes_context(node):
            # handed to the constructor itself: Hydra would copy a keyword argument into the config
            return instantiate(node, _partial_=True)(context=context)
        return instantiate(node)
    except InstantiationException as exc:
        _refused(node, exc.__cause__)
        raise
    except ValueError as exc:
        _refused(node, exc)
        raise


def _refused(node: DictConfig, cause: BaseException | None) -> None:
    """Raise memrepro's own error, or a constructor's ValueError as bad input named by its config group."""
    if isinstance(cause, MemreproError):
        raise cause from None
    if isinstance(cause, ValueError):
        raise BadValueError(f"config {_node_key(node)}: {cause}; fix the override or the config file") from None


class BadValueError(MemreproError, ValueError):
    exit_code = EXIT_BAD_INPUT


def _node_key(node: DictConfig) -> str:
    try:
        return str(node._get_full_key(None)) or "<config>"
    except Exception:  # noqa: BLE001 - only used to name the group in a message
        return "<config>"


def _takes_context(node: DictConfig) -> bool:
    import inspect

    from hydra.utils import get_object

    target = node.get("_target_")
    try:
        return "context" in inspect.signature(get_object(str(target))).parameters
    except (ImportError, AttributeError, TypeError, ValueError):  # Hydra's own call names what is wrong
        return False


def build_once(node: DictConfig, context: RunContext) -> Any:
    """Build a dataset or encoder once per context and config: the points of a Hydra sweep (the basic launcher
    runs them in one process, with one context) then cost retrieval only, with no reload of the data or the
    model."""
    key = json.dumps(OmegaConf.to_container(node, resolve=True), sort_keys=True, default=str)
    if key not in context.built:
        context.built[key] = build(node, context)
    return context.built[key]


def load_benchmark(node: DictConfig, context: RunContext | None = None) -> tuple[Benchmark, dict[str, Any]]:
    """The dataset a config names (built once per ``context``; a missing official file is fetched when online) and
    its files' checksum verification.

    ``allow_unverified`` and ``gold_labels`` are the runner's switches, not the loader's: they are taken off before
    the loader is built; ``gold_labels=corrected`` applies the benchmark's gold corrections to what it loaded."""
    from memrepro.datasets.autofetch import with_fetch
    from memrepro.datasets.gold_corrections import CORRECTED, apply_corrections
    from memrepro.datasets.io import data_root

    plain = OmegaConf.to_container(node, resolve=True)
    # dataset.allow_unverified=true, or MEMREPRO_ALLOW_UNVERIFIED=1 for every command of a session (own revisions)
    allow = bool(plain.pop("allow_unverified", False)) or os.environ.get("MEMREPRO_ALLOW_UNVERIFIED") == "1"
    labels = plain.pop("gold_labels", None)
    context = context if context is not None else RunContext()
    benchmark: Benchmark = with_fetch(lambda: build_once(OmegaConf.create(plain), context),
                                      data_root(plain.get("data_dir")))
    if labels == CORRECTED:
        benchmark = apply_corrections(benchmark)
    root = str(plain.get("data_dir") or "")
    verification = enforce(benchmark.files, root or "<data dir>", allow)
    for warning in benchmark.warnings:
        log.warning("%s", warning)
    if verification["data_verified"] is False:
        for check in verification["data_files"]:
            if check["state"] == "mismatch":
                log.warning("UNVERIFIED DATA: %s has sha256 %s, not the pinned %s (dataset.allow_unverified=true): "
                            "results from this run are labelled unverified", check["path"], check["actual"],
                            check["expected"])
    return benchmark, verification


def encode_and_index(benchmark: Benchmark, encoder: Any, cache_dir: Path, device: str, progress: bool,
                     timings: dict[str, float], options: SearchOptions | None = None,
                     context: RunContext | None = None) -> tuple[EpisodeIndex, dict[str, np.ndarray], CachedEncoder]:
    """Encode every memory and query through the embedding cache (its shards hashed once per ``context``) and
    stack the episodes on ``device``."""
    cached = CachedEncoder(encoder, cache_dir / "embeddings", progress=progress,
                           digests=context.digests if context is not None else None)
    start = time.perf_counter()
    doc_vectors = _encode_episodes(benchmark, cached)
    timings["encode_documents_s"] = time.perf_counter() - start
    start = time.perf_counter()
    query_vectors = _encode_queries(benchmark, cached)
    timings["encode_queries_s"] = time.perf_counter() - start
    timings["model_load_s"] = getattr(encoder, "load_seconds", 0.0)
    start = time.perf_counter()
    index = build_index(benchmark.episodes, doc_vectors, device=device, options=options)
    timings["index_s"] = time.perf_counter() - start
    return index, query_vectors, cached


@dataclass
class _NothingEncoded:
    encoded: dict[str, int]
    cache_hits: dict[str, int]
    quarantined: tuple = ()  # no embedding cache was read


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


def search_options(cfg: DictConfig) -> SearchOptions:
    """``cfg.search`` as :class:`SearchOptions` (defaults when the config has no ``search`` node)."""
    node = OmegaConf.to_container(cfg.search, resolve=True) if "search" in cfg else {}
    return SearchOptions(**{k: v for k, v in node.items() if k not in ("recall_k", "recall_queries")})


def metric_names_for(cfg: DictConfig, benchmark: Benchmark) -> list[str]:
    """``metrics.names`` (empty: the benchmark protocol's) plus ``metrics.extra``."""
    names = list(cfg.metrics.names) or list(benchmark.protocol.metrics)
    return names + [m for m in cfg.metrics.extra if m not in names]


def retrieval_inputs(queries: list[Query]) -> list[RetrievalInput]:
    return [RetrievalInput(q.id, q.text, q.episode_id) for q in queries]  # a retriever never sees the gold


def score_rankings(benchmark: Benchmark, rankings: Mapping[tuple[str, str], FrozenRanking], traces: Mapping,
                   metric_names: list[str], latency_ms: Mapping[str, float], top_n: int,
                   reused_rows: Mapping[str, list[dict[str, Any]]] | None = None):
    """Frozen rankings → (per-query rows, counts, aggregate summary): the one scoring path of ``run``, ``eval``
    and ``memrepro.evaluate``. A split in ``reused_rows`` takes those rows (``memrepro.runs.seed_reuse``), rescored
    from their stored gold ranks."""
    from memrepro.evaluation.aggregate import aggregate  # pandas: only when a run is scored

    with _no_gc():  # ~10^6 small containers per LoCoMo run: the cyclic GC would rescan every ranking many times
        rows, counts = _score(benchmark, rankings, traces, metric_names, latency_ms, top_n, reused_rows or {})
    summary = aggregate([{"split": r["split"], "category": r["category"], **r["metrics"]}
                         for r in rows if r["excluded"] is None],
                        metric_names, benchmark.protocol.category_names)
    return rows, counts, summary


@contextlib.contextmanager
def _no_gc():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _score(benchmark: Benchmark, rankings: Mapping[tuple[str, str], FrozenRanking], traces: Mapping,
           metric_names: list[str], latency_ms: Mapping[str, float], top_n: int,
           reused_rows: Mapping[str, list[dict[str, Any]]]):
    from memrepro.evaluation.metrics import compute_metrics

    rows: list[dict[str, Any]] = []
    counts = {"n_total": 0, "n_scored": 0, "n_excluded": {}}
    chars_of: dict[str, dict[str, int]] = {}  # per episode, built once (not once per query)
    for split in benchmark.splits:
        queries = list(benchmark.split_queries(split))
        if split.name in reused_rows:  # rescored here from where each gold item sits (all a metric reads)
            stored = {row["query_id"]: row for row in reused_rows[split.name]}
            values = compute_metrics({q.id: FrozenRanking.from_gold_ranks(q.id, stored[q.id]["gold_ranks"],
                                                                          stored[q.id]["n_returned"])
                                      for q in queries}, queries, metric_names,
                                     gold_ranks={q.id: stored[q.id]["gold_ranks"] for q in queries})
            for query in queries:  # this run's batch-1 sample decides every row's latency_ms
                rows.append({**stored[query.id], "pool": len(benchmark.episodes[query.episode_id]),
                             "latency_ms": latency_ms.get(query.id), "metrics": values.get(query.id, {})})
                _count(counts, query.excluded)
            continue
        gold_ranks = {q.id: rankings[(split.name, q.id)].ranks_of(tuple(dict.fromkeys(q.gold))) for q in queries}
        values = compute_metrics({q.id: rankings[(split.name, q.id)] for q in queries}, queries, metric_names,
                                 gold_ranks=gold_ranks)
        for query in queries:
            ranking = rankings[(split.name, query.id)]
            text_of = chars_of.get(query.episode_id)
            if text_of is None:
                text_of = chars_of[query.episode_id] = {m.id: len(m.text) for m in
                                                        benchmark.episodes[query.episode_id].memories}
            _count(counts, query.excluded)
            rows.append({
                "split": split.name,
                "seed": split.seed,
                "query_id": query.id,
                "episode_id": query.episode_id,
                "category": query.category,
                "excluded": query.excluded,
                "gold": list(query.gold),
                "gold_ranks": gold_ranks[query.id],
                "n_returned": len(ranking.memory_ids),
                "pool": len(text_of),  # the candidate pool: the memories of the query's episode
                "returned_chars": sum(map(text_of.__getitem__, ranking.memory_ids[:top_n])),
                "top": list(zip(ranking.memory_ids[:top_n], ranking.scores[:top_n])),  # (id, score) pairs: JSON arrays
                "latency_ms": latency_ms.get(query.id),
                "trace": traces.get((split.name, query.id)) or None,
                "metrics": values.get(query.id, {}),
            })
    return rows, counts


def _count(counts: dict[str, Any], excluded: str | None) -> None:
    counts["n_total"] += 1
    if excluded is None:
        counts["n_scored"] += 1
    else:
        counts["n_excluded"][excluded] = counts["n_excluded"].get(excluded, 0) + 1
