"""RF-Mem retrievers behind memrepro's Retriever protocol: Recollection alone, and the gated RF-Mem composition.

Spec: ``../shared/specs/retrievers.md`` §2-§5. Both keep their algorithm's own order (``order = "native"``):
Recollection emits in insertion order and must not be re-sorted; a Familiarity-path result is already in the
project's score order (score descending, position ascending), so native order keeps it as it is.

Constructor keyword arguments are flat so a Hydra preset is one flat YAML and every value can be overridden
on the command line (``retriever=rfmem_personabench retriever.alpha=0.3``).

``engine="faithful"`` runs the per-query reference implementation (``recollection.recollect_faithful``);
``engine="batched"`` runs ``memrepro.retrievers.rfmem.batched.recollect_batched`` over many queries at once;
``engine="projected"`` runs the same batched engine on each pool's span coordinates (``pool_span_coordinates``:
every inner product kept, ``L + 1`` instead of ``d`` dimensions; rounding differs from the faithful engine's);
``engine="compiled"`` runs the faithful engine's per-query loop as numba machine code on one core
(``memrepro.retrievers.rfmem.compiled``; compiled or loaded once at construction, not inside a timed call).
The paper's Appendix D.8-D.9 alternatives (``clustering``, ``mixing``, ``expansion``, ``full_exploration``; see
``recollection.py``) exist in the faithful engine only: the group engines refuse them at construction.

Latency: the trace holds ``gate_ms`` (probe + rule) and ``path_ms`` (the chosen path only, RF-Mem's own timer)
per query; ``latency_ms`` is ``path_ms`` under ``latency_scope="path_only"`` (what the paper's tables report)
and ``gate_ms + path_ms`` under ``"gate_plus_path"``. The batched engine times whole groups and reports each
query's amortised share.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch

from memrepro.retrievers.base import RetrievalInput, Retrieved
from memrepro.retrievers.rfmem.gate import (FAMILIARITY, GateDecision, gate_from_top_scores, gate_many,
                                            top_scores_exact)
from memrepro.retrievers.rfmem.params import FamiliarityParams, GateParams, RecollectionParams
from memrepro.retrievers.rfmem.recollection import (RecollectionResult, nondefault_variants, recollect_faithful,
                                                     validate_params)
from memrepro.search import DEFAULT_CHUNK_BYTES, EpisodeIndex, Hits, search

log = logging.getLogger("memrepro")

ENGINES = ("faithful", "batched", "projected", "compiled")
BATCHED_ENGINES = ("batched", "projected", "compiled")  # engines that take a whole group of queries at once
LATENCY_SCOPES = ("path_only", "gate_plus_path")

# recollect(query_vectors, episode_ids, index, params) -> one result per query, in order
GroupRecollect = Callable[[np.ndarray, Sequence[str], EpisodeIndex, RecollectionParams], list[RecollectionResult]]


def load_group_engine(engine: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> GroupRecollect:
    """The group engine ``engine`` names, imported only when asked for (the faithful engine depends on neither
    torch kernels of ``batched`` nor numba), compiled/warmed here rather than inside a timed call."""
    if engine == "compiled":
        from memrepro.retrievers.rfmem import compiled
        compiled.require_numba()
        compiled.warm_up()
        return _recollect_compiled
    try:
        from memrepro.retrievers.rfmem.batched import recollect_batched
    except ImportError as exc:
        raise ImportError(
            f"engine={engine!r} needs memrepro.retrievers.rfmem.batched.recollect_batched, which could not be "
            f"imported ({exc}); use engine='faithful'") from exc

    def run(vectors: np.ndarray, episode_ids: Sequence[str], index: EpisodeIndex,
            params: RecollectionParams) -> list[RecollectionResult]:
        return _recollect_batched_chunks(recollect_batched, vectors, episode_ids, index, params, chunk_bytes,
                                         project=engine == "projected")
    return run


def _host_pools(index: EpisodeIndex, episode_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The index's padded pools, their lengths and each query's pool row as NumPy, for the compiled kernels (no
    copy on CPU; on CUDA the pools are copied to the host once per call)."""
    return (index.matrix.detach().cpu().numpy(), index.lengths.cpu().numpy(),
            index.rows(episode_ids).cpu().numpy())


def _recollect_compiled(vectors: np.ndarray, episode_ids: Sequence[str], index: EpisodeIndex,
                        params: RecollectionParams) -> list[RecollectionResult]:
    """The compiled engine over the index's padded pools as they are (no per-query copy of a pool)."""
    from memrepro.retrievers.rfmem.compiled import recollect_compiled
    canonical = None if index.canonical is None else index.canonical.cpu().numpy()
    batch = recollect_compiled(vectors, *_host_pools(index, episode_ids), params, canonical)
    if batch.fallbacks:
        log.info("engine=compiled: %d of %d queries recomputed by the faithful engine (ambiguous empty-cluster "
                 "relocation in KMeans)", batch.fallbacks, len(batch.results))
    return batch.results


def _probe_search(index: EpisodeIndex, vectors: np.ndarray, episode_ids: Sequence[str], k: int,
                  chunk_bytes: int) -> list[Hits]:
    """Each query's unfloored dense top-``k`` (torch ``search``), for the gate and the Familiarity path."""
    return search(index, vectors, episode_ids, k=k, min_sim=None, chunk_bytes=chunk_bytes)


def _probe_compiled(index: EpisodeIndex, vectors: np.ndarray, episode_ids: Sequence[str], k: int,
                    chunk_bytes: int) -> list[Hits]:
    """The same top-``k`` from the compiled engine's own products (``top_k_compiled``; rounding may differ from
    torch's in the last float32 bit, duplicates still tie exactly)."""
    from memrepro.retrievers.rfmem.compiled import top_k_compiled
    positions, scores, counts = top_k_compiled(vectors, *_host_pools(index, episode_ids), k)
    return [Hits(positions[i, :n], scores[i, :n]) for i, n in enumerate(counts.tolist())]


def _check_choice(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def _hits(result: RecollectionResult) -> Hits:
    """Recollection output as Hits, refusing anything the freezer would reject later with a vaguer message."""
    positions = np.asarray(result.positions, dtype=np.int64)
    scores = np.asarray(result.scores, dtype=np.float32)
    if not np.all(np.isfinite(scores)):
        raise RuntimeError("recollection produced a non-finite score")
    if len(np.unique(positions)) != len(positions):
        raise RuntimeError("recollection returned a memory twice")
    return Hits(positions, scores)


class _EpisodePools:
    """Each episode's ``(n, d)`` float32 pool as NumPy, copied off the index device once per retrieve call."""

    def __init__(self, index: EpisodeIndex) -> None:
        self.index = index
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, episode_id: str) -> np.ndarray:
        if episode_id not in self._cache:
            row = self.index.row_of[episode_id]
            length = int(self.index.lengths[row])
            self._cache[episode_id] = self.index.matrix[row, :length].detach().cpu().numpy().astype(
                np.float32, copy=False)
        return self._cache[episode_id]


def _recollect_batched_chunks(engine: Callable[..., list[RecollectionResult]], query_vectors: np.ndarray,
                              episode_ids: Sequence[str], index: EpisodeIndex, params: RecollectionParams,
                              chunk_bytes: int, project: bool = False) -> list[RecollectionResult]:
    """Run the batched engine on chunks of queries whose gathered pools fit ``chunk_bytes``; with ``project``,
    on each chunk's distinct pools in span coordinates (factorised once per pool, not per query)."""
    if not len(episode_ids):
        return []
    _, width, dim = index.matrix.shape
    chunk = max(1, chunk_bytes // max(1, width * dim * 4))
    results: list[RecollectionResult] = []
    queries = torch.as_tensor(np.asarray(query_vectors, dtype=np.float32), device=index.device)
    rows = index.rows(episode_ids)
    if project:  # lazily, like the engine: the faithful engine must not depend on the batched module
        from memrepro.retrievers.rfmem.batched import pool_span_coordinates
    for start in range(0, len(episode_ids), chunk):
        row_chunk = rows[start:start + chunk]
        lengths = index.lengths.index_select(0, row_chunk)
        if project:
            distinct, pool_of_query = torch.unique(row_chunk, return_inverse=True)
            coords, q_coords, ids = pool_span_coordinates(index.matrix.index_select(0, distinct),
                                                          index.lengths.index_select(0, distinct),
                                                          queries[start:start + chunk], pool_of_query)
            results.extend(engine(q_coords, coords.index_select(0, pool_of_query), lengths, params,
                                  row_ids=ids.index_select(0, pool_of_query)))
        else:
            results.extend(engine(queries[start:start + chunk], index.matrix.index_select(0, row_chunk), lengths,
                                  params))
    return results


class RecollectionRetriever:
    """Recollection only (RF-Mem's "reco" mode): every query takes the Recollection path."""

    name = "recollection"
    order: Literal["score", "native"] = "native"

    def __init__(self, engine: str = "faithful", k: int = 10, beam: int = 3, fanout: int = 2, alpha: float = 0.8,
                 rounds: int = 10, mmr_lambda: float = 0.95, min_sim: float | None = 0.0,
                 after_empty_round: str = "continue", dead_branch_policy: str = "keep", final_rerank: str = "none",
                 kmeans_seed: int = 42,
                 # Appendix D.8-D.9 alternatives (our constructions; faithful engine only)
                 clustering: str = "kmeans", dbscan_eps: float = 0.5, dbscan_min_samples: int = 2,
                 dbscan_noise: str = "singleton", spectral_gamma: float = 1.0, mixing: str = "alpha",
                 expansion: str = "cluster", graph_k: int | None = None, graph_min_sim: float | None = 0.0,
                 full_exploration: bool = False,
                 latency_scope: str = "path_only", chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        _check_choice("engine", engine, ENGINES)
        _check_choice("latency_scope", latency_scope, LATENCY_SCOPES)
        self.engine = engine
        self.latency_scope = latency_scope  # no gate here: both scopes time the same region
        self.chunk_bytes = chunk_bytes
        self.recollection = RecollectionParams(
            k=k, beam=beam, fanout=fanout, alpha=alpha, rounds=rounds, mmr_lambda=mmr_lambda, min_sim=min_sim,
            after_empty_round=after_empty_round, dead_branch_policy=dead_branch_policy, final_rerank=final_rerank,
            kmeans_seed=kmeans_seed, clustering=clustering, dbscan_eps=dbscan_eps,
            dbscan_min_samples=dbscan_min_samples, dbscan_noise=dbscan_noise, spectral_gamma=spectral_gamma,
            mixing=mixing, expansion=expansion, graph_k=graph_k, graph_min_sim=graph_min_sim,
            full_exploration=full_exploration)  # type: ignore[arg-type]
        _validate_recollection(self.recollection, engine)
        self._group = load_group_engine(engine, chunk_bytes) if engine in BATCHED_ENGINES else None

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]:
        vectors = np.asarray(query_vectors, dtype=np.float32)
        if self._group is not None:
            began = time.perf_counter()
            results = self._group(vectors, [q.episode_id for q in queries], index, self.recollection)
            share_ms = 1000.0 * (time.perf_counter() - began) / max(1, len(queries))
            return [Retrieved(_hits(r), _recollection_trace(r, share_ms)) for r in results]
        pools = _EpisodePools(index)
        out: list[Retrieved] = []
        for query, vector in zip(queries, vectors):
            pool = pools(query.episode_id)
            began = time.perf_counter()
            result = recollect_faithful(vector, pool, self.recollection)
            path_ms = 1000.0 * (time.perf_counter() - began)
            out.append(Retrieved(_hits(result), _recollection_trace(result, path_ms)))
        return out

    def describe(self) -> dict:
        return {"name": self.name, "engine": self.engine, "latency_scope": self.latency_scope,
                "recollection": dict(vars(self.recollection))}


class RFMemRetriever:
    """RF-Mem: the familiarity gate routes each query to dense top-K (Familiarity) or Recollection."""

    name = "rfmem"
    order: Literal["score", "native"] = "native"

    def __init__(self, engine: str = "faithful",
                 # gate (§2)
                 probe_k: int = 10, probe_floor: float | None = 0.0, probe_floor_ignored: bool = False,
                 lam: float = 20.0, eps: float = 1e-12, theta_high: float = 0.60, theta_low: float = 0.30,
                 tau: float = 0.20, entropy_form: str = "code_mean",
                 # recollection (§3); k is the K of both paths unless familiarity_k says otherwise
                 k: int = 10, beam: int = 3, fanout: int = 2, alpha: float = 0.8, rounds: int = 10,
                 mmr_lambda: float = 0.95, min_sim: float | None = 0.0, after_empty_round: str = "continue",
                 dead_branch_policy: str = "keep", final_rerank: str = "none", kmeans_seed: int = 42,
                 # Appendix D.8-D.9 alternatives of the Recollection path (our constructions; faithful engine only)
                 clustering: str = "kmeans", dbscan_eps: float = 0.5, dbscan_min_samples: int = 2,
                 dbscan_noise: str = "singleton", spectral_gamma: float = 1.0, mixing: str = "alpha",
                 expansion: str = "cluster", graph_k: int | None = None, graph_min_sim: float | None = 0.0,
                 full_exploration: bool = False,
                 # familiarity (§1)
                 familiarity_k: int | None = None, familiarity_min_sim: float | None = 0.0,
                 latency_scope: str = "path_only", chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        _check_choice("engine", engine, ENGINES)
        _check_choice("latency_scope", latency_scope, LATENCY_SCOPES)
        _check_choice("entropy_form", entropy_form, ("code_mean", "shannon_sum"))
        if probe_k < 1:
            raise ValueError(f"probe_k must be >= 1, got {probe_k}")
        self.engine, self.latency_scope, self.chunk_bytes = engine, latency_scope, chunk_bytes
        self.gate = GateParams(probe_k=probe_k, probe_floor=probe_floor, probe_floor_ignored=probe_floor_ignored,
                               lam=lam, eps=eps, theta_high=theta_high, theta_low=theta_low, tau=tau,
                               entropy_form=entropy_form)  # type: ignore[arg-type]
        self.recollection = RecollectionParams(
            k=k, beam=beam, fanout=fanout, alpha=alpha, rounds=rounds, mmr_lambda=mmr_lambda, min_sim=min_sim,
            after_empty_round=after_empty_round, dead_branch_policy=dead_branch_policy, final_rerank=final_rerank,
            kmeans_seed=kmeans_seed, clustering=clustering, dbscan_eps=dbscan_eps,
            dbscan_min_samples=dbscan_min_samples, dbscan_noise=dbscan_noise, spectral_gamma=spectral_gamma,
            mixing=mixing, expansion=expansion, graph_k=graph_k, graph_min_sim=graph_min_sim,
            full_exploration=full_exploration)  # type: ignore[arg-type]
        _validate_recollection(self.recollection, engine)
        self.familiarity = FamiliarityParams(k=k if familiarity_k is None else familiarity_k,
                                             min_sim=familiarity_min_sim)
        if self.familiarity.k < 1:
            raise ValueError(f"familiarity_k must be >= 1, got {self.familiarity.k}")
        self._group = load_group_engine(engine, chunk_bytes) if engine in BATCHED_ENGINES else None
        self._probe = _probe_compiled if engine == "compiled" else _probe_search

    # -- gate ---------------------------------------------------------------------------------------------

    def _gate_one(self, vector: np.ndarray, pool: np.ndarray) -> GateDecision:
        _, scores = top_scores_exact(vector, pool, self.gate.probe_k)
        return gate_from_top_scores(scores, len(pool), self.gate)

    def _familiarity(self, vectors: np.ndarray, episode_ids: Sequence[str], index: EpisodeIndex) -> list[Hits]:
        return search(index, vectors, episode_ids, k=self.familiarity.k, min_sim=self.familiarity.min_sim,
                      chunk_bytes=self.chunk_bytes)

    def _trace(self, decision: GateDecision, gate_ms: float, path_ms: float,
               result: RecollectionResult | None) -> dict[str, Any]:
        trace: dict[str, Any] = decision.trace()
        trace.update(rounds=None, items_per_round=None, candidates_per_round=None)
        if result is not None:
            trace.update(rounds=result.trace.get("rounds"), items_per_round=result.trace.get("items_per_round"),
                         candidates_per_round=result.trace.get("candidates_per_round"),
                         stop_reason=result.trace.get("stop_reason"))
        trace.update(gate_ms=gate_ms, path_ms=path_ms,
                     latency_ms=path_ms if self.latency_scope == "path_only" else gate_ms + path_ms)
        return trace

    # -- retrieval ----------------------------------------------------------------------------------------

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]:
        vectors = np.asarray(query_vectors, dtype=np.float32)
        if self._group is not None:
            return self._retrieve_batched(queries, vectors, index)
        pools = _EpisodePools(index)
        out: list[Retrieved] = []
        for query, vector in zip(queries, vectors):
            pool = pools(query.episode_id)
            began = time.perf_counter()
            decision = self._gate_one(vector, pool)
            gate_ms = 1000.0 * (time.perf_counter() - began)
            began = time.perf_counter()  # RF-Mem's timer: the chosen path only
            if decision.path == FAMILIARITY:
                hits, result = self._familiarity(vector[None, :], [query.episode_id], index)[0], None
            else:
                result = recollect_faithful(vector, pool, self.recollection)
                hits = _hits(result)
            path_ms = 1000.0 * (time.perf_counter() - began)
            out.append(Retrieved(hits, self._trace(decision, gate_ms, path_ms, result)))
        return out

    def _retrieve_batched(self, queries: Sequence[RetrievalInput], vectors: np.ndarray,
                          index: EpisodeIndex) -> list[Retrieved]:
        """Gate all queries with one probe search, then run each path once over its group.

        The probe ranks each pool to ``max(probe_k, familiarity k)`` once: its first ``probe_k`` scores feed the
        gate (``gate_many``, bit for bit the per-query gate) and its first ``k`` hits, floored, are the
        Familiarity result, exactly what a second ``search(k, min_sim)`` would return (same scores, same stable
        order, the same float32 floor). So the Familiarity path's own time here is that slice; the search is
        in ``gate_ms``.
        """
        episode_ids = [q.episode_id for q in queries]
        began = time.perf_counter()
        depth = max(self.gate.probe_k, self.familiarity.k)
        probes = self._probe(index, vectors, episode_ids, depth, self.chunk_bytes)
        lengths = index.lengths.cpu().numpy()
        decisions = gate_many([p.scores[:self.gate.probe_k] for p in probes],
                              [int(lengths[index.row_of[e]]) for e in episode_ids], self.gate)
        gate_ms = 1000.0 * (time.perf_counter() - began) / max(1, len(queries))

        familiar = [i for i, d in enumerate(decisions) if d.path == FAMILIARITY]
        recollect = [i for i, d in enumerate(decisions) if d.path != FAMILIARITY]
        hits: dict[int, Hits] = {}
        results: dict[int, RecollectionResult] = {}
        share: dict[int, float] = {}
        if familiar:
            began = time.perf_counter()
            for i in familiar:
                hits[i] = _familiarity_from_probe(probes[i], self.familiarity)
            each = 1000.0 * (time.perf_counter() - began) / len(familiar)
            share.update({i: each for i in familiar})
        if recollect:
            began = time.perf_counter()
            batch = self._group(vectors[recollect], [episode_ids[i] for i in recollect], index, self.recollection)
            each = 1000.0 * (time.perf_counter() - began) / len(recollect)
            for i, r in zip(recollect, batch):
                results[i], hits[i], share[i] = r, _hits(r), each
        return [Retrieved(hits[i], self._trace(decisions[i], gate_ms, share[i], results.get(i)))
                for i in range(len(queries))]

    def describe(self) -> dict:
        return {"name": self.name, "engine": self.engine, "latency_scope": self.latency_scope,
                "gate": dict(vars(self.gate)), "recollection": dict(vars(self.recollection)),
                "familiarity": dict(vars(self.familiarity))}


def _familiarity_from_probe(probe: Hits, params: FamiliarityParams) -> Hits:
    """Dense top-``k`` with the floor, cut from a deeper unfloored probe of the same pool: ``search`` truncates
    to ``k`` then keeps ``score >= float32(min_sim)``, and so does this."""
    positions, scores = probe.positions[:params.k], probe.scores[:params.k]
    if params.min_sim is not None:
        keep = scores >= np.float32(params.min_sim)
        positions, scores = positions[keep], scores[keep]
    return Hits(positions, scores)


def _recollection_trace(result: RecollectionResult, path_ms: float) -> dict[str, Any]:
    return {"path": "recollection", "rounds": result.trace.get("rounds"),
            "items_per_round": result.trace.get("items_per_round"),
            "candidates_per_round": result.trace.get("candidates_per_round"),
            "stop_reason": result.trace.get("stop_reason"), "path_ms": path_ms, "latency_ms": path_ms}


def _validate_recollection(params: RecollectionParams, engine: str) -> None:
    """Fail at construction (config time) rather than on the first query."""
    validate_params(params)
    variants = nondefault_variants(params)
    if engine in BATCHED_ENGINES and variants:
        raise ValueError(f"the Appendix D.8-D.9 recollection variants ({', '.join(variants)}) exist in the "
                         "faithful engine only; use engine='faithful' or the default clustering='kmeans', "
                         "mixing='alpha', expansion='cluster', full_exploration=False")
