"""Recollection, faithful engine: RF-Mem's ``retrieve_pyramid_v2`` with "mean_group" expansion, one query at a time.

Spec: ``../shared/specs/retrievers.md`` §3. The published PersonaBench numbers depend on details the paper does
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
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from memrepro.retrievers.rfmem.params import RecollectionParams

NORM_EPS = 1e-12


@dataclass(frozen=True)
class RecollectionResult:
    """One query's Recollection output: pool positions and carried scores in insertion order, plus a trace."""

    positions: list[int]
    scores: list[float]
    trace: dict = field(default_factory=dict)


@dataclass
class _Branch:
    query: np.ndarray | None  # None: a dead branch (its cluster was empty), never searched
    score_sum: float
    hits: list[tuple[int, float]]


def l2_normalise(vector: np.ndarray) -> np.ndarray:
    """``v / (‖v‖ + 1e-12)`` in the vector's dtype (float32 stays float32); a zero vector stays zero."""
    return vector / (np.linalg.norm(vector) + NORM_EPS)


def _top_n(query: np.ndarray, pool: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``n`` by float32 inner product, ties by ascending pool position; never padding."""
    scores = pool @ query
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return KMeans(n_clusters=n_clusters, random_state=seed, n_init="auto").fit_predict(vectors)


def _sequential_sum(values: list[float]) -> float:
    """Left-to-right float64 sum, as Python ≤ 3.11's ``sum`` (3.12 compensates, which can flip exact ties)."""
    total = 0.0
    for value in values:
        total += value
    return total


def recollect_faithful(q0: np.ndarray, pool: np.ndarray, params: RecollectionParams) -> RecollectionResult:
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
    validate_params(params)

    floor = None if params.min_sim is None else float(params.min_sim)
    beam = [_Branch(q0, 0.0, [])]
    seen: set[int] = set()
    out: list[tuple[int, float]] = []
    items_per_round: list[int] = []
    candidates_per_round: list[int] = []
    dead_per_round: list[int] = []
    stop_reason = "rounds_exhausted"

    for round_index in range(params.rounds):
        n_search = (params.beam + round_index) * params.fanout
        children: list[_Branch] = []
        candidates_this_round = 0
        dead_this_round = 0
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
            n_clusters = min(params.beam, len(candidates))
            labels = _cluster_labels(vectors, n_clusters, params.kmeans_seed)
            for label in range(n_clusters):
                members = [i for i, lab in enumerate(labels) if lab == label]
                if not members:
                    dead_this_round += 1
                    if params.dead_branch_policy == "keep":
                        children.append(_Branch(None, branch.score_sum + 0.0, []))
                    continue
                centroid = l2_normalise(vectors[members].mean(axis=0))
                child_query = l2_normalise(params.alpha * branch.query + (1.0 - params.alpha) * centroid + q0)
                member_scores = [carried[i] for i in members]
                children.append(_Branch(child_query, branch.score_sum + _sequential_sum(member_scores),
                                        [(ids[i], carried[i]) for i in members]))
        candidates_per_round.append(candidates_this_round)
        dead_per_round.append(dead_this_round)

        if not children:
            items_per_round.append(0)
            if params.after_empty_round == "stop":
                stop_reason = "empty_round"
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
        if len(out) >= params.k:
            stop_reason = "k_reached"
            break

    if params.final_rerank == "dense" and out:
        cosines = pool[[p for p, _ in out]] @ q0
        order = np.lexsort((np.array([p for p, _ in out]), -cosines.astype(np.float64)))
        out = [(out[i][0], float(cosines[i])) for i in order]
    out = out[: params.k]
    trace = {"rounds": len(items_per_round), "items_per_round": items_per_round,
             "candidates_per_round": candidates_per_round, "dead_branches_per_round": dead_per_round,
             "stop_reason": stop_reason}
    return RecollectionResult([p for p, _ in out], [s for _, s in out], trace)


def validate_params(params: RecollectionParams) -> None:
    """Reject settings the algorithm has no meaning for, with the offending field named."""
    if params.k < 1:
        raise ValueError(f"recollection k must be >= 1, got {params.k}")
    if params.beam < 1 or params.fanout < 1:
        raise ValueError(f"recollection beam and fanout must be >= 1, got B={params.beam}, F={params.fanout}")
    if params.rounds < 1:
        raise ValueError(f"recollection rounds must be >= 1, got {params.rounds}")
    if params.after_empty_round not in ("continue", "stop"):
        raise ValueError(f"after_empty_round must be 'continue' or 'stop', got {params.after_empty_round!r}")
    if params.dead_branch_policy not in ("keep", "drop"):
        raise ValueError(f"dead_branch_policy must be 'keep' or 'drop', got {params.dead_branch_policy!r}")
    if params.final_rerank not in ("none", "dense"):
        raise ValueError(f"final_rerank must be 'none' or 'dense', got {params.final_rerank!r}")
