"""RF-Mem retrievers behind memrepro's Retriever protocol: Recollection alone, and the gated RF-Mem composition.

See docs/retrievers.md#rf-mem. Both keep their algorithm's own order (``order = "native"``):
Recollection emits in insertion order and must not be re-sorted; a Familiarity-path result is already in the
project's score order (score descending, position ascending), so native order keeps it as it is.

Parameters come whole, one dataclass per component (``params.py``: ``recollection``, ``gate``, ``familiarity``);
the Hydra configs nest the same dataclasses, so every value is overridable on the command line
(``retriever=rfmem_personabench retriever.recollection.alpha=0.3 retriever.gate.tau=0.3``).

Two engines run Recollection: ``engine="faithful"``, the per-query reference that mirrors the official code
(``recollection.recollect_faithful``), and ``engine="compiled"``, the same loop as numba machine code over a
whole group of queries (``compiled.recollect_compiled``; compiled or loaded once at construction, not inside a
timed call). The paper's Appendix D.8 alternatives (``clustering``, ``mixing``, ``expansion``; see
``recollection.py``) exist in the faithful engine only and are refused for ``compiled`` at construction; D.9 full
exploration and the dense re-rank run in both.

Latency: the trace holds ``gate_ms`` (probe + rule) and ``path_ms`` (the chosen path only, RF-Mem's own timer)
per query; ``latency_ms`` is ``path_ms`` under ``latency_scope="path_only"`` (what the paper's tables report)
and ``gate_ms + path_ms`` under ``"gate_plus_path"``. The compiled engine times whole groups and reports each
query's amortised share.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from memrepro.retrievers.base import RetrievalInput, Retrieved, RetrieverBase
from memrepro.retrievers.rfmem.gate import (FAMILIARITY, GateDecision, gate_from_top_scores, gate_many,
                                            top_scores_exact)
from memrepro.retrievers.rfmem.params import FamiliarityParams, GateParams, RecollectionParams, as_params
from memrepro.retrievers.rfmem.recollection import recollect_faithful
from memrepro.retrievers.rfmem.result import RecollectionResult
from memrepro.search import DEFAULT_CHUNK_BYTES, EpisodeIndex, Hits, search
from memrepro.parameters import validate_arguments
from memrepro.retrievers.schemas import RecollectionRetrieverConfig, RFMemRetrieverConfig

log = logging.getLogger("memrepro")


def _load_compiled() -> None:
    """Import the compiled engine only when asked for (the faithful engine does not need numba) and compile or
    load its kernels here rather than inside a timed call."""
    from memrepro.retrievers.rfmem import compiled
    compiled.require_numba()
    compiled.warm_up()


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


def _probe_compiled(index: EpisodeIndex, vectors: np.ndarray, episode_ids: Sequence[str], k: int) -> list[Hits]:
    """Each query's unfloored dense top-``k`` from the compiled engine's own products (``top_k_compiled``;
    rounding may differ from torch's ``search`` in the last float32 bit, duplicates still tie exactly), for the
    gate and the Familiarity path."""
    from memrepro.retrievers.rfmem.compiled import top_k_compiled
    positions, scores, counts = top_k_compiled(vectors, *_host_pools(index, episode_ids), k)
    return [Hits(positions[i, :n], scores[i, :n]) for i, n in enumerate(counts.tolist())]


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


class RecollectionRetriever(RetrieverBase):
    """Recollection only (RF-Mem's "reco" mode): every query takes the Recollection path."""

    name = "recollection"
    ALGORITHM_VERSION = 1  # bump when a change alters its rankings: its old runs get new ids (runs/identity.py)
    order: Literal["score", "native"] = "native"

    def __init__(self, recollection: RecollectionParams | Mapping[str, Any] | None = None, engine: str = "faithful",
                 latency_scope: str = "path_only") -> None:
        # checked as the config node is (memrepro.parameters): at construction, not on the first query
        validate_arguments(RecollectionRetrieverConfig, {"recollection": recollection, "engine": engine,
                                                         "latency_scope": latency_scope})
        self.recollection = as_params(RecollectionParams, recollection)
        if engine == "compiled":
            _load_compiled()
        self.engine = engine
        self.latency_scope = latency_scope  # no gate here: both scopes time the same region

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]:
        vectors = np.asarray(query_vectors, dtype=np.float32)
        if self.engine == "compiled":
            began = time.perf_counter()
            results = _recollect_compiled(vectors, [q.episode_id for q in queries], index, self.recollection)
            share_ms = 1000.0 * (time.perf_counter() - began) / max(1, len(queries))
            return [Retrieved(_hits(r), _recollection_trace(r, share_ms)) for r in results]
        pools = _EpisodePools(index)
        out: list[Retrieved] = []
        for query, vector in zip(queries, vectors):
            pool = pools(query.episode_id)
            began = time.perf_counter()
            result = recollect_faithful(vector, pool, self.recollection, validate=False)
            path_ms = 1000.0 * (time.perf_counter() - began)
            out.append(Retrieved(_hits(result), _recollection_trace(result, path_ms)))
        return out

    def describe(self) -> dict:
        return {"name": self.name, "engine": self.engine, "latency_scope": self.latency_scope,
                "recollection": dict(vars(self.recollection))}


class RFMemRetriever(RetrieverBase):
    """RF-Mem: the familiarity gate routes each query to dense top-K (Familiarity) or Recollection."""

    name = "rfmem"
    ALGORITHM_VERSION = 1  # bump when a change alters its rankings: its old runs get new ids (runs/identity.py)
    order: Literal["score", "native"] = "native"

    def __init__(self, gate: GateParams | Mapping[str, Any] | None = None,
                 recollection: RecollectionParams | Mapping[str, Any] | None = None,
                 familiarity: FamiliarityParams | Mapping[str, Any] | None = None, engine: str = "faithful",
                 latency_scope: str = "path_only", chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        """``chunk_bytes`` bounds the memory of the faithful engine's Familiarity-path search (``search``)."""
        validate_arguments(RFMemRetrieverConfig, {"gate": gate, "recollection": recollection,
                                                  "familiarity": familiarity, "engine": engine,
                                                  "latency_scope": latency_scope, "chunk_bytes": chunk_bytes})
        self.gate = as_params(GateParams, gate)
        self.recollection = as_params(RecollectionParams, recollection)
        familiarity = as_params(FamiliarityParams, familiarity)
        # K of the Familiarity path: its own, or the Recollection K (the same K for both paths unless set)
        self.familiarity = FamiliarityParams(k=self.recollection.k if familiarity.k is None else familiarity.k,
                                             min_sim=familiarity.min_sim)
        if engine == "compiled":
            _load_compiled()
        self.engine, self.latency_scope, self.chunk_bytes = engine, latency_scope, chunk_bytes

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
        if self.engine == "compiled":
            return self._retrieve_grouped(queries, vectors, index)
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
                result = recollect_faithful(vector, pool, self.recollection, validate=False)
                hits = _hits(result)
            path_ms = 1000.0 * (time.perf_counter() - began)
            out.append(Retrieved(hits, self._trace(decision, gate_ms, path_ms, result)))
        return out

    def _retrieve_grouped(self, queries: Sequence[RetrievalInput], vectors: np.ndarray,
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
        probes = _probe_compiled(index, vectors, episode_ids, depth)
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
            batch = _recollect_compiled(vectors[recollect], [episode_ids[i] for i in recollect], index,
                                        self.recollection)
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
