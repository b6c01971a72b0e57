"""Recollection, faithful engine: RF-Mem's ``retrieve_pyramid_v2`` with "mean_group" expansion, one query at a time.

See docs/retrievers.md#recollection. The published PersonaBench numbers depend on details the paper does
not state, so this follows the official code operation by operation:

* exact top-N search, ``N = (B + r)·F`` per branch, float32 inner products, ties by pool position;
* candidates pass the floor (compared as Python floats, as the code does) and must not have been *emitted* in an
  earlier round (siblings of one round may share candidates);
* every candidate's carried score is MMR-adjusted against the branch's other candidates, in float64 like the
  code's Python arithmetic, but candidates keep their cosine order;
* scikit-learn KMeans (k = min(B, n), seed 42, defaults otherwise) on the float32 candidate vectors; one child
  per label in label order, child query ``norm(α·q_branch + (1−α)·norm(mean) + q0)`` in float32;
* children ranked by the cumulative **sum** of member scores (stable sort, so ties keep creation order), the
  top B kept, their hits emitted round by round in that order, stopping once K are emitted;
* an empty KMeans cluster (duplicate vectors) becomes a *dead branch*: no hits, the parent's score sum, never
  searched. The code builds a NaN query for it whose searches find nothing; we never build the NaN.

The output is in insertion order, truncated to K, possibly shorter (floor, exhausted pool, R reached).

Appendix D.8-D.9 alternatives (paper Tables 15-16)
--------------------------------------------------
The release has none of them and the paper gives one sentence of setup each (D.8.3 also the gate's formula),
so **every construction below is memrepro's own**: the most literal reading of the paper, with everything the
paper says stays fixed (candidate search, floor, dedup, MMR-carried scores, child scoring by cumulative sum,
beam of B, emission order, stop rule) left exactly as above. All default to off; with the defaults the code path
and the output are those of the released algorithm, bit for bit.

* ``clustering="dbscan"`` (D.8.1): scikit-learn ``DBSCAN(eps, min_samples)`` replaces KMeans on the same float32
  candidate vectors, Euclidean distance (scikit-learn's default; on unit vectors ‖x−y‖ = √(2−2cos), so the
  default eps 0.5 joins points with cosine ≥ 0.875). DBSCAN chooses its own number of clusters (not capped at B;
  the beam keeps the best B children as always). Clusters become children in DBSCAN's label order (the order in
  which it reaches each cluster's first core point in candidate order). Noise points: ``dbscan_noise =
  "singleton"`` (default) makes each its own child, after the clusters, in candidate order, so every candidate
  still belongs to a child as under KMeans; ``"drop"`` gives them no child (they are never emitted by this
  branch). ``min_samples`` defaults to 2, not scikit-learn's 5: PersonaBench's candidate sets hold 1-6 items
  (median 1 at F = 1), so 5 would make every candidate noise and DBSCAN a no-op. DBSCAN never leaves an empty
  cluster, so it never makes a dead branch.
* ``clustering="spectral"`` (D.8.2): scikit-learn ``SpectralClustering(n_clusters = min(B, n), random_state =
  kmeans_seed, gamma = spectral_gamma)`` with its other defaults (RBF affinity exp(−γ‖x−y‖²) as in Ng, Jordan and
  Weiss 2001, normalised Laplacian, k-means label assignment) replaces KMeans; k and the label-order loop are
  KMeans's. One cluster → every label 0; n = k (fewer candidates than B) → each candidate its own cluster (the
  only partition of n points into n clusters; SpectralClustering cannot embed n points in n dimensions). An
  empty cluster is a dead branch, as under KMeans.
* ``mixing="gated"`` (D.8.3): the paper's gate g = σ(x^(r)ᵀ g_b^(r)) takes α's place in the update,
  ``q' = norm(g·q_branch + (1−g)·g_b + q0)``, with g_b the same normalised centroid the α-mix uses and x^(r) the
  branch's query; σ is the logistic function, no learned parameters. On unit vectors g ∈ [σ(−1), σ(1)] ≈
  [0.27, 0.73]; a branch whose centroid agrees with its query keeps more of the query. The gates are traced.
* ``expansion="graph_bfs"`` (D.8.4, replaces the whole module): a kNN graph over the episode's pool, each
  memory linked to its ``graph_k`` (default F) most cosine-similar other memories (ties by pool position),
  keeping only edges with cosine ≥ ``graph_min_sim``. Breadth-first search from the seeds = round 0's candidates
  (dense top-B·F passing the floor, in cosine order); level r (= round r) visits, for each node of level r−1 in
  order, its neighbours in descending edge cosine, each unvisited one once. Items are emitted in BFS order
  with their cosine to q0 as score; the stop rule is the same (after a level once ≥ K are emitted, or after R
  levels), and a level that finds nothing new ends the search whatever ``after_empty_round`` says (BFS is
  exhausted). No clustering, mixing or MMR: those switches must stay default; α and λ_mmr are unused.
* ``full_exploration=True`` (D.9): the ≥ K early stop is off, so all R rounds run (an empty round still ends
  the search under ``after_empty_round="stop"``: nothing more is reachable); every emitted item (the beam's
  hits, as in the default; children pruned from the beam are not "collected") is then re-ranked by cosine to
  q0 (ties by position), as ``final_rerank="dense"`` does, and cut to K. Combines with any of the above.

The D.8 constructions exist in this engine only; the compiled engine (``compiled.py``) runs the released
algorithm, ``final_rerank`` and D.9 full exploration, which it shares with this one through ``result.finish``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from memrepro.retrievers.rfmem.params import RecollectionParams, validate_recollection
from memrepro.retrievers.rfmem.result import (EMPTY_ROUND, K_REACHED, NORM_EPS, ROUNDS_EXHAUSTED,
                                              RecollectionResult, finish, round_trace)


@dataclass
class _Branch:
    query: np.ndarray | None  # None: a dead branch (its cluster was empty), never searched
    score_sum: float
    hits: list[tuple[int, float]]


def l2_normalise(vector: np.ndarray) -> np.ndarray:
    """``v / (‖v‖ + 1e-12)`` in the vector's dtype (float32 stays float32); a zero vector stays zero."""
    return vector / (np.linalg.norm(vector) + NORM_EPS)


def _top_n(query: np.ndarray, pool: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``n`` by float32 inner product, ties by ascending pool position; never padding.

    Row-wise products (not one matrix-vector product, whose SIMD blocking can score identical rows a few ulps
    apart) so that duplicate memories tie exactly and the tie rule, not lane order, orders them.
    """
    scores = np.einsum("ij,j->i", pool, query)
    order = np.argsort(-scores, kind="stable")[:n]
    return order, scores[order]


def _mmr_scores(cosines: list[float], vectors: np.ndarray, mmr_lambda: float) -> list[float]:
    """``λ·s_i − (1−λ)·max_{j≠i} ⟨v_i, v_j⟩`` per candidate; the max term is 0 for a lone candidate.

    The similarities are float32 (the code takes ``float(np.dot(v_i, v_j))`` of float32 vectors); the
    combination is float64 Python arithmetic, in the code's order of operations.
    """
    if len(cosines) == 1:
        return [mmr_lambda * cosines[0] - (1.0 - mmr_lambda) * 0.0]
    gram = vectors @ vectors.T
    np.fill_diagonal(gram, -np.inf)
    nearest = gram.max(axis=1)
    return [mmr_lambda * s - (1.0 - mmr_lambda) * float(m) for s, m in zip(cosines, nearest)]


def _cluster_labels(vectors: np.ndarray, n_clusters: int, seed: int) -> np.ndarray:
    """KMeans labels with scikit-learn's defaults (k-means++, n_init="auto", lloyd), as the code calls it.

    Duplicate vectors make scikit-learn warn that it found fewer distinct clusters; that case is handled (dead
    branches), so the warning is silenced.
    """
    if n_clusters == 1:
        return np.zeros(len(vectors), dtype=np.int64)  # one cluster: every label is 0 whatever KMeans does
    # imported here, not at the top: scikit-learn (with scipy.stats) is about a third of a sweep process's
    # import time, and only this engine's clustering needs it (the compiled engine has its own KMeans)
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return KMeans(n_clusters=n_clusters, random_state=seed, n_init="auto").fit_predict(vectors)


def _spectral_labels(vectors: np.ndarray, n_clusters: int, seed: int, gamma: float) -> np.ndarray:
    """Spectral-clustering labels (our D.8.2 construction): scikit-learn's defaults but γ and the seed.

    ``n_clusters`` is ``min(B, n)``: one cluster labels everything 0, and ``n == n_clusters`` puts each point in
    its own cluster (scikit-learn cannot embed n points in n eigenvectors). scikit-learn's warnings (square
    input taken as data, k-means convergence on duplicates) are silenced: duplicates are handled downstream.
    """
    if n_clusters == 1:
        return np.zeros(len(vectors), dtype=np.int64)
    if len(vectors) <= n_clusters:
        return np.arange(len(vectors), dtype=np.int64)
    from sklearn.cluster import SpectralClustering  # lazily, as in _cluster_labels
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ConvergenceWarning is a UserWarning
        return SpectralClustering(n_clusters=n_clusters, gamma=gamma, random_state=seed).fit_predict(vectors)


def _dbscan_groups(vectors: np.ndarray, params: RecollectionParams) -> tuple[list[list[int]], int]:
    """DBSCAN clusters as member lists (our D.8.1 construction), then the noise points per ``dbscan_noise``.

    Returns the groups (clusters in label order, members in candidate order; noise singletons after them under
    "singleton") and the number of noise points.
    """
    from sklearn.cluster import DBSCAN  # lazily, as in _cluster_labels
    labels = DBSCAN(eps=params.dbscan_eps, min_samples=params.dbscan_min_samples).fit_predict(vectors)
    groups = [[i for i, lab in enumerate(labels) if lab == label] for label in range(int(labels.max()) + 1)]
    noise = [i for i, lab in enumerate(labels) if lab < 0]
    if params.dbscan_noise == "singleton":
        groups.extend([i] for i in noise)
    return groups, len(noise)


def _partition(vectors: np.ndarray, params: RecollectionParams) -> tuple[list[list[int]], int]:
    """The branch's candidates grouped into would-be children (member indices; an empty group is a dead branch).

    Returns the groups and the number of DBSCAN noise points (0 for the other methods). KMeans (the default):
    ``min(B, n)`` clusters in label order, exactly as the released code.
    """
    if params.clustering == "dbscan":
        return _dbscan_groups(vectors, params)
    n_clusters = min(params.beam, len(vectors))
    if params.clustering == "spectral":
        labels = _spectral_labels(vectors, n_clusters, params.kmeans_seed, params.spectral_gamma)
    else:
        labels = _cluster_labels(vectors, n_clusters, params.kmeans_seed)
    return [[i for i, lab in enumerate(labels) if lab == label] for label in range(n_clusters)], 0


def gated_weight(query: np.ndarray, centroid: np.ndarray) -> float:
    """D.8.3's gate ``σ(⟨x, g⟩)`` for a branch query and its (normalised) centroid; in (0, 1), float64."""
    return 1.0 / (1.0 + math.exp(-float(np.dot(query, centroid))))


def _sequential_sum(values: list[float]) -> float:
    """Left-to-right float64 sum, as Python ≤ 3.11's ``sum`` (3.12 compensates, which can flip exact ties)."""
    total = 0.0
    for value in values:
        total += value
    return total


def recollect_faithful(q0: np.ndarray, pool: np.ndarray, params: RecollectionParams,
                       validate: bool = True) -> RecollectionResult:
    """Recollection for one query against its pool, exactly as RF-Mem's released code runs it.

    ``q0`` is the query's unit vector ``(d,)``; ``pool`` the episode's ``(n, d)`` unit rows in pool order.
    Returns positions into ``pool`` in insertion order (round → beam rank → member cosine order) and the
    carried MMR scores (not comparable across branches; may be negative). With ``final_rerank="dense"`` every
    emitted item is re-sorted by cosine to ``q0`` (ties by position) before truncation to K, and the scores
    become those cosines (the paper's D.9 "full exploration" re-rank).
    """
    q0 = np.asarray(q0, dtype=np.float32).reshape(-1)
    pool = np.asarray(pool, dtype=np.float32)
    if pool.ndim != 2 or (len(pool) and pool.shape[1] != q0.shape[0]):
        raise ValueError(f"pool must be (n, {q0.shape[0]}), got {pool.shape}")
    if not np.all(np.isfinite(q0)):
        raise ValueError("query vector has a non-finite entry")
    if validate:  # a retriever checked its params once when it was built: not again on every query
        validate_recollection(params)
    if params.expansion == "graph_bfs":
        return _recollect_graph_bfs(q0, pool, params)

    floor = None if params.min_sim is None else float(params.min_sim)
    beam = [_Branch(q0, 0.0, [])]
    seen: set[int] = set()
    out: list[tuple[int, float]] = []
    items_per_round: list[int] = []
    candidates_per_round: list[int] = []
    dead_per_round: list[int] = []
    noise_per_round: list[int] = []  # DBSCAN only
    gates_per_round: list[list[float]] = []  # gated mixing only
    stop_reason = ROUNDS_EXHAUSTED

    for round_index in range(params.rounds):
        n_search = (params.beam + round_index) * params.fanout
        children: list[_Branch] = []
        candidates_this_round = 0
        dead_this_round = 0
        noise_this_round = 0
        gates_this_round: list[float] = []
        for branch in beam:
            if branch.query is None or len(pool) == 0:
                continue  # dead branch: its NaN query would find nothing anyway
            positions, scores = _top_n(branch.query, pool, n_search)
            candidates = [(int(p), float(s)) for p, s in zip(positions, scores)
                          if (floor is None or float(s) >= floor) and int(p) not in seen]
            if not candidates:
                continue
            candidates_this_round += len(candidates)
            ids = [c for c, _ in candidates]
            vectors = pool[ids]
            carried = _mmr_scores([s for _, s in candidates], vectors, params.mmr_lambda)
            groups, noise = _partition(vectors, params)
            noise_this_round += noise
            for members in groups:
                if not members:
                    dead_this_round += 1
                    if params.dead_branch_policy == "keep":
                        children.append(_Branch(None, branch.score_sum + 0.0, []))
                    continue
                centroid = l2_normalise(vectors[members].mean(axis=0))
                if params.mixing == "gated":
                    weight = gated_weight(branch.query, centroid)
                    gates_this_round.append(weight)
                else:
                    weight = params.alpha
                child_query = l2_normalise(weight * branch.query + (1.0 - weight) * centroid + q0)
                member_scores = [carried[i] for i in members]
                children.append(_Branch(child_query, branch.score_sum + _sequential_sum(member_scores),
                                        [(ids[i], carried[i]) for i in members]))
        candidates_per_round.append(candidates_this_round)
        dead_per_round.append(dead_this_round)
        noise_per_round.append(noise_this_round)
        gates_per_round.append(gates_this_round)

        if not children:
            items_per_round.append(0)
            if params.after_empty_round == "stop":
                stop_reason = EMPTY_ROUND
                break
            continue  # same beam next round; its N grows by F

        children.sort(key=lambda child: child.score_sum, reverse=True)  # stable: ties keep creation order
        beam = children[: params.beam]
        emitted = 0
        for branch in beam:
            for position, score in branch.hits:
                if position not in seen:
                    seen.add(position)
                    out.append((position, score))
                    emitted += 1
        items_per_round.append(emitted)
        if len(out) >= params.k and not params.full_exploration:
            stop_reason = K_REACHED
            break

    trace = round_trace(items_per_round, candidates_per_round, dead_per_round, stop_reason)
    if params.clustering == "dbscan":
        trace["noise_per_round"] = noise_per_round
    if params.mixing == "gated":
        trace["gates_per_round"] = gates_per_round
    return finish([p for p, _ in out], [s for _, s in out], q0, pool, params, trace)


def knn_neighbours(node: int, pool: np.ndarray, degree: int, edge_floor: float | None) -> list[tuple[int, float]]:
    """``node``'s out-edges in the kNN graph: its ``degree`` most cosine-similar *other* pool rows (float32
    inner products, ties by position), then only those with cosine >= ``edge_floor``; in descending order."""
    scores = pool @ pool[node]
    order = np.argsort(-scores, kind="stable")
    order = order[order != node][:degree]
    return [(int(p), float(scores[p])) for p in order if edge_floor is None or float(scores[p]) >= edge_floor]


def _recollect_graph_bfs(q0: np.ndarray, pool: np.ndarray, params: RecollectionParams) -> RecollectionResult:
    """D.8.4's graph-based recollection, our construction (see the module docstring): BFS over a kNN graph from
    round 0's seeds, one BFS level per round, items emitted in BFS order with their cosine to ``q0``.

    The graph is built lazily (only visited nodes' edges are computed); the result is that of the full graph.
    """
    floor = None if params.min_sim is None else float(params.min_sim)
    degree = params.fanout if params.graph_k is None else params.graph_k
    edge_floor = None if params.graph_min_sim is None else float(params.graph_min_sim)
    query_cosines = pool @ q0
    visited: set[int] = set()
    out: list[tuple[int, float]] = []
    items_per_round: list[int] = []
    candidates_per_round: list[int] = []
    frontier: list[int] = []
    stop_reason = ROUNDS_EXHAUSTED

    for level in range(params.rounds):
        fresh: list[int] = []
        if level == 0:
            positions, scores = _top_n(q0, pool, params.beam * params.fanout) if len(pool) else ([], [])
            fresh = [int(p) for p, s in zip(positions, scores) if floor is None or float(s) >= floor]
            candidates_per_round.append(len(fresh))
        else:
            examined = 0
            for node in frontier:
                neighbours = knn_neighbours(node, pool, degree, edge_floor)
                examined += len(neighbours)
                for position, _ in neighbours:
                    if position not in visited:
                        visited.add(position)
                        fresh.append(position)
            candidates_per_round.append(examined)
        if not fresh:
            items_per_round.append(0)
            stop_reason = EMPTY_ROUND  # BFS exhausted: no later level can find anything either
            break
        visited.update(fresh)  # the seeds (later levels are marked on discovery)
        out.extend((p, float(query_cosines[p])) for p in fresh)
        items_per_round.append(len(fresh))
        frontier = fresh
        if len(out) >= params.k and not params.full_exploration:
            stop_reason = K_REACHED
            break

    trace = round_trace(items_per_round, candidates_per_round, [0] * len(items_per_round), stop_reason)
    return finish([p for p, _ in out], [s for _, s in out], q0, pool, params, trace)
