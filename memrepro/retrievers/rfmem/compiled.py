"""Recollection, compiled engine: the faithful engine's per-query algorithm in numba machine code.

See docs/retrievers.md#recollection. ``recollection.recollect_faithful`` runs RF-Mem's
``retrieve_pyramid_v2`` one query at a time in Python with scikit-learn's KMeans; for PersonaBench-sized pools
nearly all of its time is interpreter and scikit-learn call overhead (87 % in ``KMeans.fit_predict``, of which the
Lloyd iterations are about a tenth). This engine compiles the per-query loop itself: the same steps in the same
order as the faithful engine, with scikit-learn's KMeans replayed operation by operation (the host-side inputs of
the replay, scikit-learn's random stream among them, are in ``kmeans_replay.py``): data centred by a row-by-row
float32 mean; k-means++ on the centred data with
``RandomState(seed)``'s stream (the first centre from ``choice``, ``2 + int(log k)`` uniform draws per further
centre), squared distances computed in float64 as ``-2·a·b + ‖a‖² + ‖b‖²`` and rounded to float32, the cumulative
potential in the installed release's precision, first-minimum choices; Lloyd in float32 (E-step ``‖c‖² − 2·x·c``,
M-step summed row by row, centres scaled by ``float32(1/w)``, an empty cluster placed at the heaviest one), strict
or ``tol`` convergence, the final E-step.

What differs from the faithful engine is rounding: inner products are summed in SIMD lanes (``fastmath``
reassociation, deterministic for a given machine) rather than in OpenBLAS's or NumPy's order, so a ranking can
differ where two scores tie to about one float32 ulp; identical memories still score bit for bit alike (the same
instructions on the same data), so the tie rule decides between duplicates, as in the faithful engine.

One scikit-learn step is replayed only where it is unambiguous: relocating an empty cluster while some point lies
away from its centre (``_relocate_empty_clusters_dense`` picks the farthest points with ``np.argpartition``, whose
order among equal distances is an implementation detail). With one empty cluster and one clearly farthest point the
engine moves it, as scikit-learn does; otherwise (tied far points, several empty clusters: duplicate memories
cause both) the query is flagged and recomputed by the faithful engine, so its result is the faithful one;
``RecollectionBatch.fallbacks`` counts them and the retriever logs the count (none on any of the 12 benchmark
settings we ran: the four PersonaBench Table 2 presets and both LongMemEval-S presets, each with both encoders).

Queries run one after another on one core, like the faithful engine: a query takes tens of microseconds, so
threads would mostly add start-up and, next to torch's OpenMP pool, spin-wait contention (measured: 10x slower
with two numba threads beside torch's on this 2-core machine). The first call compiles the kernels (about 20 s;
cached on disk afterwards, numba's ``cache=True``); callers that time retrieval call ``warm_up()`` first, as a
model is loaded before it is timed.

It runs the released algorithm, the dense re-rank and D.9 full exploration (the stop rule's only switch), all
checked against the faithful engine; the D.8 constructions (DBSCAN, spectral clustering, gated mixing, graph BFS)
are the faithful engine's only and refused here.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from memrepro.retrievers.rfmem.kmeans_replay import (KMEANS_MAX_ITER, KMEANS_TOL, first_centres, n_local_trials,
                                                     sklearn_cumsum_is_float32, uniform_stream)
from memrepro.retrievers.rfmem.params import (RecollectionParams, refuse_faithful_only_variants,
                                              validate_recollection)
from memrepro.retrievers.rfmem.recollection import recollect_faithful
from memrepro.retrievers.rfmem.result import NORM_EPS, STOP_REASONS, RecollectionResult, finish, round_trace

try:
    import numba
    from numba import njit
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None

KMEANS_OK, KMEANS_RELOCATED, KMEANS_NOT_REPLAYED = 0, 1, -1
# reassociation lets LLVM sum inner products in SIMD lanes; no 'nnan'/'ninf': infinities must compare correctly
FAST = {"reassoc", "contract"}


def require_numba() -> None:
    """Raise a clear error where numba is not installed (the other engines do not need it)."""
    if numba is None:
        raise ImportError("engine='compiled' needs numba (pip install 'memrepro[compiled]' or pip install numba); "
                          "use engine='faithful' without it")


@dataclass(frozen=True)
class RecollectionBatch:
    """The compiled engine's output: one result per query, and how many were recomputed by the faithful engine."""

    results: list[RecollectionResult]
    fallbacks: int


# ----------------------------------------------------------------------------------------------------------
# kernels

if numba is not None:

    @njit(fastmath=FAST, cache=True)
    def _dot32(a, b):
        acc = np.float32(0.0)
        for j in range(a.shape[0]):
            acc += a[j] * b[j]
        return acc

    @njit(fastmath=FAST, cache=True)
    def _dot64(a, b):
        acc = 0.0
        for j in range(a.shape[0]):
            acc += np.float64(a[j]) * np.float64(b[j])
        return acc

    @njit(fastmath=FAST, cache=True)
    def _sqdist32(a, b):
        acc = np.float32(0.0)
        for j in range(a.shape[0]):
            diff = a[j] - b[j]
            acc += diff * diff
        return acc

    @njit(cache=True)
    def _l2norm_into(v, out):
        """``v / (‖v‖ + 1e-12)`` in float32 (NumPy's ``np.linalg.norm`` then the division), into ``out``."""
        norm = np.float32(np.sqrt(_dot32(v, v))) + np.float32(NORM_EPS)
        for j in range(v.shape[0]):
            out[j] = v[j] / norm

    @njit(cache=True)
    def _top_n_stable(scores, n, n_top, order):
        """The first ``n_top`` positions of ``argsort(-scores[:n], kind="stable")`` into ``order`` (score
        descending, ties by ascending position), by insertion into a sorted buffer: O(n) when, as here, n_top is
        small and most scores fall below the buffer's last."""
        filled = 0
        for p in range(n):
            s = scores[p]
            if filled == n_top and not s > scores[order[filled - 1]]:
                continue  # not better than the worst kept (an equal score at a later position ranks after it)
            j = filled if filled < n_top else n_top - 1
            while j > 0 and scores[order[j - 1]] < s:
                order[j] = order[j - 1]
                j -= 1
            order[j] = p
            if filled < n_top:
                filled += 1
        return filled

    @njit(cache=True)
    def _canonical_rows(pool, n, out):
        """``out[i]``: the first row of ``pool[:n]`` bitwise equal to row ``i`` (``-0.0`` equal to ``0.0``)."""
        d = pool.shape[1]
        for i in range(n):
            out[i] = i
            for j in range(i):
                if out[j] != j:
                    continue
                same = True
                for t in range(d):
                    if pool[i, t] != pool[j, t]:
                        same = False
                        break
                if same:
                    out[i] = j
                    break

    @njit(cache=True)
    def _sq_distances_to(a, gram, ids, out):
        """scikit-learn's float32 ``_euclidean_distances(xc[a], xc, squared=True)`` (upcast path): float64
        ``-2·x_a·x_i + ‖x_a‖² + ‖x_i‖²``, rounded to float32, clipped at 0; bitwise-equal rows get exactly 0.
        ``gram`` holds the float64 inner products of the centred rows (its diagonal: the squared norms)."""
        for i in range(gram.shape[0]):
            if ids[i] == ids[a]:
                out[i] = np.float32(0.0)
            else:
                value = -2.0 * gram[a, i]
                value += gram[a, a]
                value += gram[i, i]
                out[i] = max(np.float32(value), np.float32(0.0))

    @njit(cache=True)
    def _assign(xc, centres, cn, k, labels):
        """Lloyd's E-step as scikit-learn computes it: ``‖c‖² − 2·x·c`` in float32, first minimum wins.
        Returns the label of each row in ``labels``; ``cn`` receives the centres' squared norms."""
        for c in range(k):
            cn[c] = _dot32(centres[c], centres[c])
        for i in range(xc.shape[0]):
            best = 0
            best_d = cn[0] + np.float32(-2.0) * _dot32(xc[i], centres[0])
            for c in range(1, k):
                dc = cn[c] + np.float32(-2.0) * _dot32(xc[i], centres[c])
                if dc < best_d:
                    best_d = dc
                    best = c
            labels[i] = best

    @njit(cache=True)
    def _kmeans_labels(x, ids, k, stream, first_centre, cumsum_f32, labels):
        """``KMeans(n_clusters=k, random_state=seed).fit_predict(x)`` replayed; labels into ``labels``.

        Returns ``KMEANS_OK``, ``KMEANS_RELOCATED`` (an empty cluster was relocated to the farthest point, replayed)
        or ``KMEANS_NOT_REPLAYED`` (a relocation whose pick is ambiguous: the caller falls back to the faithful
        engine).
        """
        n, d = x.shape
        status = KMEANS_OK
        if k == 1:
            labels[:] = 0
            return status
        # centring: NumPy's mean(axis=0) adds rows one at a time in float32
        mean = np.zeros(d, dtype=np.float32)
        for i in range(n):
            for j in range(d):
                mean[j] += x[i, j]
        for j in range(d):
            mean[j] = mean[j] / np.float32(n)
        xc = np.empty((n, d), dtype=np.float32)
        for i in range(n):
            for j in range(d):
                xc[i, j] = x[i, j] - mean[j]
        # every k-means++ distance is between two rows: one float64 Gram matrix serves them all (the same
        # products, computed once each rather than once per trial)
        gram = np.empty((n, n), dtype=np.float64)
        total = 0.0
        for i in range(n):
            for j in range(i + 1):
                gram[i, j] = gram[j, i] = _dot64(xc[i], xc[j])
            total += gram[i, i]
        tol = np.float32(np.float32(total / (n * max(d, 1))) * np.float32(KMEANS_TOL))

        # k-means++
        trials = 2 + int(math.log(k))
        centres_idx = np.empty(k, dtype=np.int64)
        centres_idx[0] = first_centre[n]
        closest = np.empty(n, dtype=np.float32)
        _sq_distances_to(centres_idx[0], gram, ids, closest)
        potential = 0.0
        for i in range(n):
            potential += closest[i]
        potential = np.float64(np.float32(potential))
        cum = np.empty(n, dtype=np.float64)
        cand = np.empty(trials, dtype=np.int64)
        dist = np.empty((trials, n), dtype=np.float32)
        pots = np.empty(trials, dtype=np.float32)
        for c in range(1, k):
            if cumsum_f32:
                acc32 = np.float32(0.0)
                for i in range(n):
                    acc32 += closest[i]
                    cum[i] = acc32
            else:
                acc = 0.0
                for i in range(n):
                    acc += closest[i]
                    cum[i] = acc
            for t in range(trials):
                value = stream[1 + (c - 1) * trials + t] * potential
                pick = np.searchsorted(cum, value)  # side="left", as np.searchsorted
                cand[t] = min(pick, n - 1)
                _sq_distances_to(cand[t], gram, ids, dist[t])
                pot = 0.0
                for i in range(n):
                    if closest[i] < dist[t, i]:
                        dist[t, i] = closest[i]
                    pot += dist[t, i]
                pots[t] = np.float32(pot)
            best = 0
            for t in range(1, trials):
                if pots[t] < pots[best]:
                    best = t
            potential = np.float64(pots[best])
            closest[:] = dist[best]
            centres_idx[c] = cand[best]

        # Lloyd
        centres = np.empty((k, d), dtype=np.float32)
        for c in range(k):
            centres[c] = xc[centres_idx[c]]
        new = np.empty((k, d), dtype=np.float32)
        cn = np.empty(k, dtype=np.float32)
        weights = np.empty(k, dtype=np.float32)
        labels_old = np.full(n, -1, dtype=np.int64)
        strict = False
        for _ in range(KMEANS_MAX_ITER):
            _assign(xc, centres, cn, k, labels)
            new[:] = 0.0
            weights[:] = 0.0
            for i in range(n):  # M-step sums row by row, in float32, as scikit-learn's chunk loop
                weights[labels[i]] += np.float32(1.0)
                for j in range(d):
                    new[labels[i], j] += xc[i, j]
            n_empty = 0
            for c in range(k):
                if weights[c] == 0:
                    n_empty += 1
            if n_empty:
                # _relocate_empty_clusters_dense: the point farthest from its centre becomes the empty cluster's
                # only member. Its pick is np.argpartition's, replayed only where it is unambiguous: one empty
                # cluster and a farthest point clear of the runner-up by more than summation order can move.
                far, far_d, second_d = -1, np.float32(0.0), np.float32(0.0)
                for i in range(n):
                    s = _sqdist32(xc[i], centres[labels[i]])
                    if s > far_d:
                        far, far_d, second_d = i, s, far_d
                    elif s > second_d:
                        second_d = s
                if far_d != 0:  # all zero: more clusters than distinct points, scikit-learn leaves them
                    if n_empty > 1 or far_d - second_d <= np.float32(1e-5) * far_d:
                        return KMEANS_NOT_REPLAYED
                    target = 0
                    while weights[target] != 0:
                        target += 1
                    owner = labels[far]
                    for j in range(d):
                        new[owner, j] -= xc[far, j]
                        new[target, j] = xc[far, j]
                    weights[target] = np.float32(1.0)
                    weights[owner] -= np.float32(1.0)
                    status = KMEANS_RELOCATED
            heaviest = 0
            for c in range(1, k):
                if weights[c] > weights[heaviest]:
                    heaviest = c
            for c in range(k):
                if weights[c] > 0:
                    scale = np.float32(1.0 / np.float64(weights[c]))
                    for j in range(d):
                        new[c, j] *= scale
                else:  # at the heaviest cluster as it stands now (scaled already if it comes earlier)
                    for j in range(d):
                        new[c, j] = new[heaviest, j]
            shift_tot = np.float32(0.0)
            for c in range(k):
                shift = np.float32(np.sqrt(_sqdist32(new[c], centres[c])))
                shift_tot += shift * shift
            centres, new = new, centres
            same = True
            for i in range(n):
                if labels[i] != labels_old[i]:
                    same = False
                    break
            if same:
                strict = True
                break
            if shift_tot <= tol:
                break
            labels_old[:] = labels
        if not strict:  # the final E-step with the last centres
            _assign(xc, centres, cn, k, labels)
        return status

    @njit(cache=True)
    def _recollect_one(q0, pool, n, canonical, K, B, F, R, alpha, lam, floor, has_floor, keep_dead,
                       stop_on_empty, full_exploration, stream, first_centre, cumsum_f32,
                       out_pos, out_score, tr_items, tr_cands, tr_dead):
        """One query; fills ``out_*`` and the per-round trace rows. Returns (emitted, rounds, stop code, ok)."""
        d = q0.shape[0]
        n_max = (B + R - 1) * F  # the most candidates a branch can have
        if n_max > n:
            n_max = n
        alpha32 = np.float32(alpha)
        beta32 = np.float32(1.0 - alpha)
        # beam: at most B branches
        beam_q = np.zeros((B, d), dtype=np.float32)
        beam_sum = np.zeros(B, dtype=np.float64)
        beam_live = np.zeros(B, dtype=np.bool_)
        beam_q[0] = q0
        beam_live[0] = True
        n_beam = 1
        # children of one round: at most B per branch
        n_slots = B * B
        child_q = np.zeros((n_slots, d), dtype=np.float32)
        child_sum = np.zeros(n_slots, dtype=np.float64)
        child_live = np.zeros(n_slots, dtype=np.bool_)
        child_n = np.zeros(n_slots, dtype=np.int64)
        child_pos = np.zeros((n_slots, max(n_max, 1)), dtype=np.int64)
        child_score = np.zeros((n_slots, max(n_max, 1)), dtype=np.float64)
        seen = np.zeros(max(n, 1), dtype=np.bool_)
        scores = np.empty(max(n, 1), dtype=np.float32)
        cand_p = np.empty(max(n_max, 1), dtype=np.int64)
        cand_s = np.empty(max(n_max, 1), dtype=np.float32)
        vectors = np.empty((max(n_max, 1), d), dtype=np.float32)
        ids = np.empty(max(n_max, 1), dtype=np.int64)
        carried = np.empty(max(n_max, 1), dtype=np.float64)
        labels = np.empty(max(n_max, 1), dtype=np.int64)
        mix = np.empty(d, dtype=np.float32)
        centroid = np.empty(d, dtype=np.float32)
        order_slots = np.empty(n_slots, dtype=np.int64)
        order = np.empty(max(n_max, 1), dtype=np.int64)
        emitted = 0
        stop = 0
        rounds = 0
        for r in range(R):
            n_search = (B + r) * F
            n_top = min(n_search, n)
            n_children = 0
            cands_round = 0
            dead_round = 0
            can_grow = False
            for bi in range(n_beam):
                if not beam_live[bi] or n == 0:
                    continue
                q = beam_q[bi]
                for i in range(n):
                    scores[i] = _dot32(pool[i], q)
                _top_n_stable(scores, n, n_top, order)
                if n > n_top and (not has_floor or np.float64(scores[order[n_top - 1]]) >= floor):
                    can_grow = True  # a deeper search (a larger N later) could still find something
                c_n = 0
                for t in range(n_top):
                    p = order[t]
                    s = scores[p]
                    if (not has_floor or np.float64(s) >= floor) and not seen[p]:
                        cand_p[c_n] = p
                        cand_s[c_n] = s
                        c_n += 1
                if c_n == 0:
                    continue
                cands_round += c_n
                for i in range(c_n):
                    vectors[i] = pool[cand_p[i]]
                    ids[i] = canonical[cand_p[i]]
                # MMR: λ·s − (1−λ)·max_{j≠i} ⟨v_i, v_j⟩, float64 combination of float32 similarities
                if c_n == 1:
                    carried[0] = lam * np.float64(cand_s[0]) - (1.0 - lam) * 0.0
                else:
                    for i in range(c_n):
                        nearest = -np.inf
                        for j in range(c_n):
                            if j != i:
                                g = _dot32(vectors[i], vectors[j])
                                if g > nearest:
                                    nearest = g
                        carried[i] = lam * np.float64(cand_s[i]) - (1.0 - lam) * np.float64(nearest)
                k = min(B, c_n)
                if _kmeans_labels(vectors[:c_n], ids[:c_n], k, stream, first_centre, cumsum_f32,
                                  labels[:c_n]) == KMEANS_NOT_REPLAYED:
                    return emitted, rounds, stop, False
                for label in range(k):
                    size = 0
                    centroid[:] = 0.0
                    for i in range(c_n):
                        if labels[i] == label:
                            for j in range(d):
                                centroid[j] += vectors[i, j]
                            size += 1
                    if size == 0:
                        dead_round += 1
                        if keep_dead:
                            child_live[n_children] = False
                            child_sum[n_children] = beam_sum[bi] + 0.0
                            child_n[n_children] = 0
                            n_children += 1
                        continue
                    for j in range(d):
                        centroid[j] = centroid[j] / np.float32(size)
                    _l2norm_into(centroid.copy(), centroid)
                    for j in range(d):
                        mix[j] = alpha32 * q[j] + beta32 * centroid[j] + q0[j]
                    _l2norm_into(mix, child_q[n_children])
                    total = 0.0
                    m = 0
                    for i in range(c_n):
                        if labels[i] == label:
                            total += carried[i]
                            child_pos[n_children, m] = cand_p[i]
                            child_score[n_children, m] = carried[i]
                            m += 1
                    child_sum[n_children] = beam_sum[bi] + total
                    child_n[n_children] = m
                    child_live[n_children] = True
                    n_children += 1
            tr_cands[r] = cands_round
            tr_dead[r] = dead_round
            rounds = r + 1
            if n_children == 0:
                tr_items[r] = 0
                if stop_on_empty:
                    stop = 2
                    break
                if not can_grow:  # the same beam, nothing new to find: every later round is empty too
                    for rr in range(r + 1, R):
                        tr_items[rr] = 0
                        tr_cands[rr] = 0
                        tr_dead[rr] = 0
                    rounds = R
                    break
                continue
            # stable descending sort by score sum (insertion sort: ties keep creation order)
            for i in range(n_children):
                order_slots[i] = i
            for i in range(1, n_children):
                cur = order_slots[i]
                j = i - 1
                while j >= 0 and child_sum[order_slots[j]] < child_sum[cur]:
                    order_slots[j + 1] = order_slots[j]
                    j -= 1
                order_slots[j + 1] = cur
            n_beam = min(B, n_children)
            items = 0
            for bi in range(n_beam):
                slot = order_slots[bi]
                beam_q[bi] = child_q[slot]
                beam_sum[bi] = child_sum[slot]
                beam_live[bi] = child_live[slot]
                for t in range(child_n[slot]):
                    p = child_pos[slot, t]
                    if not seen[p]:
                        seen[p] = True
                        out_pos[emitted] = p
                        out_score[emitted] = child_score[slot, t]
                        emitted += 1
                        items += 1
            tr_items[r] = items
            if emitted >= K and not full_exploration:
                stop = 1
                break
        return emitted, rounds, stop, True

    @njit(cache=True)
    def _recollect_all(q0s, pools, lengths, pool_of_query, canonical, K, B, F, R, alpha, lam, floor, has_floor,
                       keep_dead, stop_on_empty, full_exploration, stream, first_centre, cumsum_f32,
                       out_pos, out_score, out_n, tr_items, tr_cands, tr_dead, rounds, stop, ok):
        for i in range(q0s.shape[0]):
            e = pool_of_query[i]
            emitted, used, code, fine = _recollect_one(
                q0s[i], pools[e], lengths[e], canonical[e], K, B, F, R, alpha, lam, floor, has_floor, keep_dead,
                stop_on_empty, full_exploration, stream, first_centre, cumsum_f32, out_pos[i], out_score[i],
                tr_items[i], tr_cands[i], tr_dead[i])
            out_n[i] = emitted
            rounds[i] = used
            stop[i] = code
            ok[i] = fine

    @njit(cache=True)
    def _top_k_all(q0s, pools, lengths, pool_of_query, k, out_pos, out_score, out_n):
        scores = np.empty(max(pools.shape[1], 1), dtype=np.float32)
        order = np.empty(max(k, 1), dtype=np.int64)
        for i in range(q0s.shape[0]):
            e = pool_of_query[i]
            n = lengths[e]
            for p in range(n):
                scores[p] = _dot32(pools[e, p], q0s[i])
            m = _top_n_stable(scores, n, min(k, n), order)
            for t in range(m):
                out_pos[i, t] = order[t]
                out_score[i, t] = scores[order[t]]
            out_n[i] = m

    @njit(cache=True)
    def _canonical_all(pools, lengths, used, out):
        for u in range(used.shape[0]):
            e = used[u]
            _canonical_rows(pools[e], lengths[e], out[e])


# ----------------------------------------------------------------------------------------------------------
# host side


def recollect_compiled(q0s: np.ndarray, pools: np.ndarray, lengths: np.ndarray, pool_of_query: np.ndarray,
                       params: RecollectionParams, canonical: np.ndarray | None = None) -> RecollectionBatch:
    """Recollection for ``b`` queries, each against one of ``E`` pools, in compiled code.

    ``q0s`` ``(b, d)`` unit query vectors; ``pools`` ``(E, L, d)`` float32 with pool ``e`` in rows
    ``[0, lengths[e])``; ``pool_of_query`` ``(b,)`` indexes ``pools`` (queries may share pools; nothing is
    copied per query). ``canonical`` ``(E, L)`` (optional): each row's first bitwise-equal row in its pool
    (``EpisodeIndex.canonical``), computed here when not given. Returns the same results, order and trace keys
    as ``recollect_faithful`` gives query by query.
    """
    require_numba()
    validate_recollection(params)
    refuse_faithful_only_variants(params, "compiled")
    q0s = np.ascontiguousarray(q0s, dtype=np.float32)
    pools = np.ascontiguousarray(pools, dtype=np.float32)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    pool_of_query = np.ascontiguousarray(pool_of_query, dtype=np.int64)
    if q0s.ndim != 2 or pools.ndim != 3 or lengths.shape != (pools.shape[0],) or pool_of_query.shape != (len(q0s),):
        raise ValueError(f"expected q0s (b, d), pools (E, L, d), lengths (E,), pool_of_query (b,); got "
                         f"{q0s.shape}, {pools.shape}, {lengths.shape}, {pool_of_query.shape}")
    b = len(q0s)
    E, L, d = pools.shape
    if b == 0:
        return RecollectionBatch([], 0)
    if L and q0s.shape[1] != d:
        raise ValueError(f"query dimension {q0s.shape[1]} != pool dimension {d}")
    if not np.all(np.isfinite(q0s)):
        raise ValueError("query vector has a non-finite entry")
    if len(lengths) and (lengths.min() < 0 or lengths.max() > L):
        raise ValueError("lengths must lie in [0, L]")
    if pool_of_query.min() < 0 or pool_of_query.max() >= E:
        raise ValueError(f"pool_of_query must index the {E} pools")
    if L == 0:  # no memories anywhere: one zero row keeps the shapes valid (never a candidate)
        pools = np.zeros((E, 1, q0s.shape[1]), dtype=np.float32)
        L, d = 1, q0s.shape[1]
    if canonical is None:
        canonical = np.tile(np.arange(L, dtype=np.int64), (E, 1))
        _canonical_all(pools, lengths, np.unique(pool_of_query), canonical)
    canonical = np.ascontiguousarray(canonical, dtype=np.int64)

    B, F, R, K = params.beam, params.fanout, params.rounds, params.k
    k_max = min(B, (B + R - 1) * F, max(L, 1))
    draws = 1 + max(k_max - 1, 0) * n_local_trials(max(k_max, 1))  # enough for every problem's k <= k_max
    stream = uniform_stream(params.kmeans_seed, draws)
    first_centre = first_centres(params.kmeans_seed, max(L, 1))
    floor = 0.0 if params.min_sim is None else float(params.min_sim)
    full_exploration = bool(params.full_exploration)

    out_pos = np.zeros((b, L), dtype=np.int64)
    out_score = np.zeros((b, L), dtype=np.float64)
    out_n = np.zeros(b, dtype=np.int64)
    tr_items = np.zeros((b, R), dtype=np.int64)
    tr_cands = np.zeros((b, R), dtype=np.int64)
    tr_dead = np.zeros((b, R), dtype=np.int64)
    rounds = np.zeros(b, dtype=np.int64)
    stop = np.zeros(b, dtype=np.int64)
    ok = np.zeros(b, dtype=np.bool_)
    _recollect_all(q0s, pools, lengths, pool_of_query, canonical, K, B, F, R, float(params.alpha),
                   float(params.mmr_lambda), floor, params.min_sim is not None,
                   params.dead_branch_policy == "keep", params.after_empty_round == "stop", full_exploration,
                   stream, first_centre, sklearn_cumsum_is_float32(), out_pos, out_score, out_n, tr_items,
                   tr_cands, tr_dead, rounds, stop, ok)

    results: list[RecollectionResult] = []
    fallbacks = 0
    for i in range(b):
        e = int(pool_of_query[i])
        if not ok[i]:
            fallbacks += 1
            results.append(recollect_faithful(q0s[i], pools[e, :lengths[e]], params))
            continue
        count, m = int(out_n[i]), int(rounds[i])
        trace = round_trace(tr_items[i, :m].tolist(), tr_cands[i, :m].tolist(), tr_dead[i, :m].tolist(),
                            STOP_REASONS[int(stop[i])])
        results.append(finish(out_pos[i, :count].tolist(), out_score[i, :count].tolist(), q0s[i], pools[e], params,
                              trace))
    return RecollectionBatch(results, fallbacks)


def top_k_compiled(q0s: np.ndarray, pools: np.ndarray, lengths: np.ndarray, pool_of_query: np.ndarray,
                   k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact top-``k`` of each query's pool by float32 inner product, ties by ascending position (the project tie
    rule), with the engine's own products: bitwise-equal memories score alike, so duplicates are ordered by the
    rule. Returns ``(positions (b, k), scores (b, k), counts (b,))``; row ``i`` is valid up to ``counts[i]``.
    The compiled engine's gate probe and Familiarity path use it (one pass over each pool, no torch kernels)."""
    require_numba()
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    q0s = np.ascontiguousarray(q0s, dtype=np.float32)
    pools = np.ascontiguousarray(pools, dtype=np.float32)
    b = len(q0s)
    positions = np.zeros((b, k), dtype=np.int64)
    scores = np.zeros((b, k), dtype=np.float32)
    counts = np.zeros(b, dtype=np.int64)
    if b:
        _top_k_all(q0s, pools, np.ascontiguousarray(lengths, dtype=np.int64),
                   np.ascontiguousarray(pool_of_query, dtype=np.int64), k, positions, scores, counts)
    return positions, scores, counts


def kmeans_labels(x: np.ndarray, k: int, seed: int = 42) -> tuple[np.ndarray, int]:
    """``KMeans(n_clusters=k, random_state=seed).fit_predict(x)`` as the engine replays it, with its status
    (``KMEANS_OK``, ``KMEANS_RELOCATED`` or ``KMEANS_NOT_REPLAYED``, where the labels are not scikit-learn's)."""
    require_numba()
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = len(x)
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    ids = np.empty(n, dtype=np.int64)
    _canonical_rows(x, n, ids)
    stream = uniform_stream(seed, 1 + (k - 1) * n_local_trials(k))
    labels = np.zeros(n, dtype=np.int64)
    status = _kmeans_labels(x, ids, k, stream, first_centres(seed, n), sklearn_cumsum_is_float32(), labels)
    return labels, int(status)


@functools.cache  # once per process: a sweep builds a retriever per point (a failed call is not cached)
def warm_up() -> None:
    """Compile (or load from numba's cache) every kernel on a tiny input, so no timed call pays for it."""
    require_numba()
    rng = np.random.default_rng(0)
    pools = rng.standard_normal((1, 6, 4)).astype(np.float32)
    pools /= np.linalg.norm(pools, axis=-1, keepdims=True)
    recollect_compiled(pools[0, :2], pools, np.array([6]), np.zeros(2, dtype=np.int64),
                       RecollectionParams(k=3, beam=2, fanout=2, rounds=2))
    top_k_compiled(pools[0, :2], pools, np.array([6]), np.zeros(2, dtype=np.int64), 3)
