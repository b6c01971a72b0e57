"""Recollection, batched engine: RF-Mem's ``retrieve_pyramid_v2`` ("mean_group") for many queries at once.

Spec: ``../shared/specs/retrievers.md`` §3 (semantics) and §5 (hyper-parameters). The faithful engine
(``recollection.recollect_faithful``) runs one query at a time with scikit-learn's KMeans, which costs
milliseconds per branch and per round; this engine keeps every query × beam branch of a batch in one set of
tensors so a round is a handful of batched kernels (CUDA when the pool tensor lives there, CPU otherwise):

1. search — one batched matmul of the beam queries against each query's own padded pool, a stable descending
   sort (ties by pool position, the project tie rule), top-N truncation, then the floor, padding and "emitted
   in an earlier round" masks; surviving candidates are compacted in cosine order;
2. MMR — batched Gram matrices of each branch's candidates (the carried score, in float64 as the code's Python
   arithmetic, candidates never reordered);
3. KMeans — a batched re-implementation of scikit-learn's ``KMeans(random_state=seed)`` (k-means++ seeding on
   centred data, Lloyd iterations with ``max_iter``/``tol``, empty-cluster relocation, the final E-step), one
   clustering problem per searched branch;
4. children — per cluster label: normalised member mean, child query, cumulative score sum; an empty cluster is
   a *dead branch* (kept or dropped per ``dead_branch_policy``);
5. beam — a stable descending sort of each query's children (creation order: parent beam rank, then label),
   the first B kept; emission in beam order with a per-query "seen" mask; queries that reached K, hit an empty
   round under ``after_empty_round="stop"``, or can no longer change leave the batch.

Why re-implement KMeans rather than approximate it: the output order depends on the *partition* (which
candidates share a child) and, through exact score ties, on the label order. scikit-learn's labels are the
order of its k-means++ picks, and the picks come from ``np.random.RandomState(seed)``; every clustering call
re-seeds, so every problem consumes the same stream (one draw for the first centre, ``2 + int(log k)`` per
further centre). The engine takes those draws from NumPy once and replays scikit-learn's arithmetic (data
centred by a row-by-row float32 mean, float64 upcast distances, the cumulative potential in the installed
release's precision, first-minimum argmin, float32 Lloyd with ``max_iter``/``tol``, scikit-learn's empty-cluster
relocation and its "copy the heaviest cluster" placement, the final E-step) in torch. What cannot be replayed
bit for bit is BLAS summation order (scikit-learn's ``sgemm``/``sgemv`` round differently from torch's
kernels), so a decision that hinges on about one float32 ulp (two k-means++ trial potentials, a point midway
between two centres) can go the other way; with k == n (e.g. F = 1) the partition is the same whatever happens.

Exact duplicates (repeated turns or sessions) get special care, because there ties are exact rather than rare:
rows are identified by their bit patterns (``_row_ids``); every copy of a memory is scored with its first copy's
score, so the project tie rule (score descending, position ascending) orders copies, not BLAS rounding (NumPy's
``pool @ q`` can round two identical rows differently); distances between identical rows are exactly 0 in the
k-means++ seeding; and for branches holding duplicates the Lloyd M-step and the member means are summed row by
row in float32, as NumPy does.

Results do not depend on which other queries share the batch, except that BLAS blocking depends on the padded
shapes, so a score may differ in its last float32 bit (and a ranking only at such a near-tie).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import numpy as np
import torch

from memrepro.retrievers.rfmem.params import RecollectionParams

# one result type and one parameter check for both engines, so callers never care which engine ran
from memrepro.retrievers.rfmem.recollection import (RecollectionResult, refuse_faithful_only_variants,
                                                     validate_params)

NORM_EPS = 1e-12
KMEANS_MAX_ITER = 300  # scikit-learn defaults, as the code calls KMeans
KMEANS_TOL = 1e-4
QR_DTYPE = torch.float32  # pool_span_coordinates; float64 costs about 1.8x more on CPU

__all__ = ["RecollectionResult", "recollect_batched", "kmeans_labels_batched", "pool_span_coordinates"]


# ----------------------------------------------------------------------------------------------------------
# scikit-learn KMeans, batched


def _n_local_trials(k: int) -> int:
    """scikit-learn's k-means++ trials per centre after the first: ``2 + int(log k)``."""
    return 2 + int(np.log(k))


@functools.lru_cache(maxsize=4096)
def _first_centre(seed: int, n: int) -> int:
    """The first k-means++ centre scikit-learn picks among ``n`` unit-weight samples.

    ``RandomState(seed).choice(n, p=w / w.sum())`` with float32 weights: a float64 cdf of the float32
    probabilities, normalised by its last entry, searched (side="right") with the stream's first double.
    """
    p = np.ones(n, dtype=np.float32) / np.float32(n)
    cdf = p.astype(np.float64).cumsum()
    cdf /= cdf[-1]
    return int(cdf.searchsorted(_uniform_stream(seed, 1)[0], side="right"))


@functools.lru_cache(maxsize=64)
def _uniform_stream(seed: int, count: int) -> np.ndarray:
    """The first ``count`` doubles of ``RandomState(seed)``: what ``choice`` and ``uniform`` consume in order."""
    return np.random.RandomState(seed).random_sample(count)


@functools.lru_cache(maxsize=1)
def _sklearn_cumsum_is_float32() -> bool:
    """Whether the installed scikit-learn forms the k-means++ cumulative potential in float32.

    Releases up to 1.6 (RF-Mem pins 1.6.1) used ``stable_cumsum`` (float64); later ones call ``np.cumsum`` on
    the float32 distances. The engine follows the installed library so that it agrees with the faithful engine
    run in the same environment; without scikit-learn it follows the pinned 1.6.1.
    """
    try:
        import inspect

        from sklearn.cluster import _kmeans
        source = inspect.getsource(_kmeans._kmeans_plusplus)
    except Exception:  # pragma: no cover - no scikit-learn, or no source
        return False
    return "stable_cumsum" not in source


def _sequential_cumsum_f32(values: torch.Tensor) -> torch.Tensor:
    """Left-to-right float32 cumulative sum along the last axis (NumPy's ``cumsum``; torch accumulates in
    double on CPU and scans in parallel on CUDA, both of which round differently)."""
    out = torch.empty_like(values)
    acc = torch.zeros(values.shape[:-1], dtype=values.dtype, device=values.device)
    for j in range(values.shape[-1]):
        acc = acc + values[..., j]
        out[..., j] = acc
    return out


def _sequential_row_sum(x: torch.Tensor) -> torch.Tensor:
    """``Σ_j x[:, j]`` row by row in float32, as NumPy's ``X.sum(axis=0)`` / ``X.mean(axis=0)`` add rows.

    ``x`` is ``(P, C, d)`` with zero rows past each problem's length (adding an exact zero changes nothing).
    """
    acc = torch.zeros((x.shape[0], x.shape[2]), dtype=x.dtype, device=x.device)
    for j in range(x.shape[1]):
        acc = acc + x[:, j]
    return acc


def _group_sums(x: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, groups: int,
                sequential: torch.Tensor) -> torch.Tensor:
    """Per-group sums of the rows of ``x`` ``(P, C, d)`` by ``labels`` ``(P, C)``; returns ``(P, groups, d)``.

    One batched matmul in general. For the problems flagged in ``sequential`` ``(P,)`` (those holding duplicate
    vectors) the rows are added one at a time in row order, as NumPy's ``mean(axis=0)`` and scikit-learn's Lloyd
    M-step do: with duplicates, exact distance ties are common and the last ulp decides them. Elsewhere a
    one-ulp difference can only matter at a near-tie.
    """
    onehot = ((labels.unsqueeze(-1) == torch.arange(groups, device=x.device)) & valid.unsqueeze(-1))
    sums = torch.bmm(onehot.transpose(1, 2).to(x.dtype), x)
    if bool(sequential.any()):
        sel = sequential.nonzero().squeeze(1)
        xs, hot = x.index_select(0, sel), onehot.index_select(0, sel).to(x.dtype)
        acc = torch.zeros((len(sel), groups, x.shape[2]), dtype=x.dtype, device=x.device)
        for j in range(x.shape[1]):
            acc.addcmul_(hot[:, j].unsqueeze(-1), xs[:, j].unsqueeze(1))  # acc + 1·x or acc + 0·x: exact
        sums[sel] = acc
    return sums


def _row_ids(x: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Per group of rows, an int64 id per row such that bitwise-equal rows (``-0.0`` = ``0.0``) share an id.

    ``x`` is ``(G, L, d)``; ids are comparable within a group only. Rows outside ``valid`` ``(G, L)`` get ids of
    their own. Rows are hashed on the bit patterns of their first 64 coordinates (wrapping integer arithmetic:
    exact and order-independent on every device, unlike a float hash that two kernels may round differently),
    sorted by hash, and neighbours with equal hashes are compared in full, so a hash collision never merges
    distinct rows.
    """
    G, L, d = x.shape
    width = min(d, 64)
    gen = torch.Generator().manual_seed(0x5EED)
    weights = (torch.randint(-(1 << 30), 1 << 30, (width,), generator=gen, dtype=torch.int32) * 2 + 1).to(x.device)
    bits = (x[..., :width].to(torch.float32) + 0.0).view(torch.int32)  # + 0.0 turns -0.0 into 0.0
    hashed = (bits * weights).sum(-1, dtype=torch.int64)  # |hash| < 2^37
    if valid is not None:
        own = -(1 << 40) - torch.arange(L, device=x.device)
        hashed = torch.where(valid, hashed, own)
    sorted_hash, order = torch.sort(hashed, dim=1, stable=True)
    same = sorted_hash[:, 1:] == sorted_hash[:, :-1]  # (G, L-1): neighbours in hash order
    group, j = same.nonzero(as_tuple=True)
    if len(group):
        first = x[group, order[group, j]]
        second = x[group, order[group, j + 1]]
        same[group, j] = (first == second).all(-1)
    starts = torch.ones((G, L), dtype=torch.long, device=x.device)
    starts[:, 1:] = (~same).long()
    return torch.empty_like(order).scatter_(1, order, starts.cumsum(1) - 1)


def _flatten_pools(pools: torch.Tensor, lengths: torch.Tensor,
                   ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Pools as ``(b·L [+1], d)`` rows with their ids, plus the index of an all-zero row.

    Padded candidate slots point at that zero row, so gathered candidate matrices need no masking pass. It is a
    padding row of the batch when one exists (checked to be zero), else one appended row (a copy of the pools).
    """
    b, L, d = pools.shape
    flat_pools, flat_ids = pools.reshape(b * L, d), ids.reshape(-1)
    short = (lengths < L).nonzero().squeeze(1)
    zero_row = int(short[0]) * L + L - 1 if len(short) else -1
    if zero_row < 0 or bool(flat_pools[zero_row].any()):
        flat_pools = torch.cat([flat_pools, torch.zeros((1, d), dtype=pools.dtype, device=pools.device)])
        flat_ids = torch.cat([flat_ids, torch.zeros(1, dtype=ids.dtype, device=ids.device)])
        zero_row = b * L
    return flat_pools, flat_ids, zero_row


def _first_occurrence(ids: torch.Tensor) -> torch.Tensor | None:
    """For ``ids`` ``(b, L)``, the position of the first row with the same id, per row; None without repeats.

    A BLAS matmul may round the scores of two identical rows differently (its blocking depends on the row's
    position: NumPy's ``pool @ q`` does this), which would let rounding rather than the tie rule order exact
    duplicates. Reading every copy's score from its first copy makes the ties exact.
    """
    sorted_ids, order = torch.sort(ids, dim=1, stable=True)
    starts = torch.ones_like(sorted_ids, dtype=torch.bool)
    starts[:, 1:] = sorted_ids[:, 1:] != sorted_ids[:, :-1]
    if bool(starts.all()):
        return None
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    start_at = torch.where(starts, positions, 0).cummax(dim=1).values
    first = torch.gather(order, 1, start_at)  # stable sort: the smallest position of each id group
    return torch.empty_like(order).scatter_(1, order, first)


def _upcast_sq_distances(rows: torch.Tensor, rr: torch.Tensor, x64: torch.Tensor, xx: torch.Tensor,
                         identical: torch.Tensor) -> torch.Tensor:
    """scikit-learn's float32 ``_euclidean_distances(rows, X, squared=True)``: computed in float64 as
    ``-2·r·x + ‖r‖² + ‖x‖²``, clipped at 0, returned as float32. ``rows`` ``(P, m, d)`` float64 with squared
    norms ``rr`` ``(P, m)``; ``x64`` ``(P, C, d)`` with ``xx`` ``(P, C)``.

    ``identical`` ``(P, m, C)`` marks pairs of bitwise-equal vectors, whose distance is set to exactly 0.
    scikit-learn leaves BLAS rounding noise there (about 1e-16, zero or clipped to zero in most of its calls);
    that noise only matters once every remaining distance is zero (more clusters than distinct points), where
    an exact zero reproduces scikit-learn's choice far more often than torch's own noise would.
    """
    d = torch.bmm(rows, x64.transpose(1, 2)).mul_(-2.0)
    d += rr.unsqueeze(-1)
    d += xx.unsqueeze(1)
    return d.to(torch.float32).clamp_min_(0.0).masked_fill_(identical, 0.0)


def _gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[p, index[p, t]]`` for ``x`` ``(P, C, ...)`` and ``index`` ``(P, m)``, via one ``index_select``
    (much faster on CPU than advanced indexing)."""
    P, C = x.shape[:2]
    flat = (torch.arange(P, device=x.device).unsqueeze(1) * C + index).reshape(-1)
    return x.reshape(P * C, *x.shape[2:]).index_select(0, flat).reshape(*index.shape, *x.shape[2:])


def _kmeans_plusplus(xc: torch.Tensor, n: torch.Tensor, k: torch.Tensor, seed: int,
                     row_ids: torch.Tensor) -> torch.Tensor:
    """Indices of the k-means++ centres scikit-learn picks, per problem, ``(P, max k)`` (−1 past ``k``).

    ``xc`` is the centred float32 data ``(P, C, d)`` (rows past ``n`` ignored). Every problem replays the same
    RandomState stream; trials per centre depend on its own k. ``row_ids`` ``(P, C)``: equal ids, equal rows.
    """
    P, C, _ = xc.shape
    device = xc.device
    kmax = int(k.max())
    trials_of = torch.tensor([_n_local_trials(max(int(kk), 1)) for kk in range(kmax + 1)], device=device)
    trials = trials_of[k]
    tmax = int(trials.max())
    stream = torch.as_tensor(_uniform_stream(seed, 1 + max(kmax - 1, 0) * tmax), dtype=torch.float64,
                             device=device)
    valid = torch.arange(C, device=device).unsqueeze(0) < n.unsqueeze(1)
    x64 = xc.to(torch.float64)
    xx = torch.linalg.vector_norm(x64, dim=-1).square()  # float64: the sqrt round trip is far below float32
    rows = torch.arange(P, device=device)

    def distances(index: torch.Tensor) -> torch.Tensor:
        same = _gather_rows(row_ids, index).unsqueeze(-1) == row_ids.unsqueeze(1)
        return _upcast_sq_distances(_gather_rows(x64, index), torch.gather(xx, 1, index), x64, xx, same)

    first_of = {m: _first_centre(seed, m) for m in set(n.tolist())}
    first = torch.tensor([first_of[m] for m in n.tolist()], dtype=torch.long, device=device)
    centres = torch.full((P, kmax), -1, dtype=torch.long, device=device)
    centres[:, 0] = first
    closest = distances(first.unsqueeze(1))[:, 0, :].masked_fill(~valid, 0.0)
    potential = closest.to(torch.float64).sum(-1).to(torch.float32)  # float32 dot with unit weights
    cumsum_f32 = _sklearn_cumsum_is_float32()
    t = torch.arange(tmax, device=device)
    for c in range(1, kmax):
        active = k > c
        offsets = 1 + (c - 1) * trials
        draw = stream[(offsets.unsqueeze(1) + t).clamp(max=len(stream) - 1)]
        rand_vals = draw * potential.to(torch.float64).unsqueeze(1)
        if cumsum_f32:
            cum = _sequential_cumsum_f32(closest).to(torch.float64)
        else:
            cum = torch.cumsum(closest.to(torch.float64), dim=-1)
        cand = torch.searchsorted(cum.contiguous(), rand_vals.contiguous(), side="left")
        cand = torch.minimum(cand, (n - 1).unsqueeze(1))
        dist = torch.minimum(distances(cand), closest.unsqueeze(1)).masked_fill(~valid.unsqueeze(1), 0.0)
        cand_pot = dist.to(torch.float64).sum(-1).to(torch.float32)
        cand_pot = cand_pot.masked_fill(t.unsqueeze(0) >= trials.unsqueeze(1), float("inf"))
        best = cand_pot.argmin(-1)  # first minimum, as np.argmin
        potential = torch.where(active, cand_pot[rows, best], potential)
        closest = torch.where(active.unsqueeze(1), dist[rows, best], closest)
        centres[:, c] = torch.where(active, cand[rows, best], centres[:, c])
    return centres


def _assign(xc: torch.Tensor, centres: torch.Tensor, cluster_ok: torch.Tensor) -> torch.Tensor:
    """Lloyd E-step as scikit-learn computes it: ``‖c‖² − 2·x·c`` in float32, first minimum wins."""
    cn = (centres * centres).sum(-1)
    dist = torch.baddbmm(cn.unsqueeze(1), xc, centres.transpose(1, 2), alpha=-2.0)
    dist = dist.masked_fill(~cluster_ok.unsqueeze(1), float("inf"))
    return dist.argmin(-1)


def _relocate_empty(xc: np.ndarray, centres_old: np.ndarray, sums: np.ndarray, weights: np.ndarray,
                    labels: np.ndarray) -> None:
    """scikit-learn's ``_relocate_empty_clusters_dense`` on one problem, in place, in NumPy (rare: it needs
    an empty cluster while some point is away from its centre, so a per-problem loop costs nothing)."""
    empty = np.where(weights == 0)[0].astype(np.int32)
    if len(empty) == 0:
        return
    distances = ((xc - centres_old[labels]) ** 2).sum(axis=1)
    far = np.argpartition(distances, -len(empty))[:-len(empty) - 1:-1].astype(np.int32)
    if np.max(distances) == 0:
        return  # more clusters than distinct points: scikit-learn leaves them
    for new_id, far_idx in zip(empty, far):
        old_id = labels[far_idx]
        sums[old_id] -= xc[far_idx]
        sums[new_id] = xc[far_idx]
        weights[new_id] = 1.0
        weights[old_id] -= 1.0


def _select(x: torch.Tensor, idx: torch.Tensor, full: bool) -> torch.Tensor:
    """``x[idx]`` along dim 0, without a copy when ``idx`` is every row."""
    return x if full else x.index_select(0, idx)


def _lloyd(xc: torch.Tensor, n: torch.Tensor, k: torch.Tensor, init: torch.Tensor, tol: torch.Tensor,
           sequential: torch.Tensor, max_iter: int = KMEANS_MAX_ITER) -> torch.Tensor:
    """scikit-learn's ``_kmeans_single_lloyd`` for every problem at once; returns labels ``(P, C)``.

    Per iteration: E-step, M-step (float32 sums, centres scaled by ``float32(1/w)``), empty-cluster relocation
    and placement at the heaviest cluster, centre shift. A problem stops on strict convergence (labels unchanged,
    keep them) or when the squared shift total is ``<= tol`` (then one more E-step with the new centres), or
    after ``max_iter`` (likewise). ``sequential`` ``(P,)``: problems whose sums are added row by row (see
    ``_group_sums``).

    Finished problems stay in the working set (their results are already recorded) until fewer than half of it
    is still running; then it is compacted. Copying the data every iteration would cost more than the wasted
    arithmetic.
    """
    P, C, d = xc.shape
    device = xc.device
    kmax = init.shape[1]
    cluster_ids = torch.arange(kmax, device=device)
    valid = torch.arange(C, device=device).unsqueeze(0) < n.unsqueeze(1)
    cluster_ok = cluster_ids.unsqueeze(0) < k.unsqueeze(1)
    final_labels = torch.zeros((P, C), dtype=torch.long, device=device)
    final_centres = torch.zeros((P, kmax, d), dtype=xc.dtype, device=device)
    final_e_step = torch.zeros(P, dtype=torch.bool, device=device)

    # working set
    ws = torch.arange(P, device=device)
    x, ok_x, ok, tol_w, seq_w, n_w, k_w = xc, valid, cluster_ok, tol, sequential, n, k
    centres = _gather_rows(xc, init.clamp_min(0)) * cluster_ok.unsqueeze(-1)
    labels_old = torch.full((P, C), -1, dtype=torch.long, device=device)
    running = torch.ones(P, dtype=torch.bool, device=device)
    for _ in range(max_iter):
        n_running = int(running.sum())
        if n_running == 0:
            break
        if 2 * n_running < len(ws):
            keep = running.nonzero().squeeze(1)
            ws, x, ok_x, ok = ws[keep], x[keep], ok_x[keep], ok[keep]
            tol_w, seq_w, n_w, k_w = tol_w[keep], seq_w[keep], n_w[keep], k_w[keep]
            centres, labels_old, running = centres[keep], labels_old[keep], running[keep]
        labels = _assign(x, centres, ok)
        weights = ((labels.unsqueeze(-1) == cluster_ids) & ok_x.unsqueeze(-1)).sum(1).to(torch.float32)
        sums = _group_sums(x, labels, ok_x, kmax, seq_w & running)
        empty = (weights == 0) & ok & running.unsqueeze(1)
        if bool(empty.any()):
            for j in empty.any(1).nonzero().squeeze(1).tolist():
                m, kk = int(n_w[j]), int(k_w[j])
                s_np, w_np = sums[j, :kk].cpu().numpy().copy(), weights[j, :kk].cpu().numpy().copy()
                _relocate_empty(x[j, :m].cpu().numpy(), centres[j, :kk].cpu().numpy(), s_np, w_np,
                                labels[j, :m].cpu().numpy().astype(np.int64))
                sums[j, :kk] = torch.from_numpy(s_np).to(device)
                weights[j, :kk] = torch.from_numpy(w_np).to(device)
        # _average_centers: scale by float32(1/w); an empty cluster copies the heaviest one as it stands at
        # that point of the loop (already scaled if it comes earlier, the raw sum if later).
        scale = torch.where(weights > 0, (1.0 / weights.to(torch.float64)).to(torch.float32),
                            torch.ones_like(weights))
        averaged = sums * scale.unsqueeze(-1)
        heaviest = weights.masked_fill(~ok, -1.0).argmax(-1, keepdim=True)
        heavy_avg = torch.gather(averaged, 1, heaviest.unsqueeze(-1).expand(-1, -1, d))
        heavy_sum = torch.gather(sums, 1, heaviest.unsqueeze(-1).expand(-1, -1, d))
        later = (cluster_ids.unsqueeze(0) > heaviest).unsqueeze(-1)
        c_new = torch.where((weights > 0).unsqueeze(-1), averaged, torch.where(later, heavy_avg, heavy_sum))
        c_new = c_new * ok.unsqueeze(-1)
        shift = torch.sqrt(((centres - c_new) ** 2).sum(-1)).masked_fill(~ok, 0.0)
        shift_tot = (shift * shift).sum(-1)
        same = ((labels == labels_old) | ~ok_x).all(-1)
        labels = torch.where(ok_x, labels, 0)
        finished = running & (same | (shift_tot <= tol_w))
        if bool(finished.any()):
            rows = finished.nonzero().squeeze(1)
            target = ws[rows]
            final_labels[target] = labels[rows]
            final_centres[target] = c_new[rows]
            final_e_step[target] = ~same[rows]
        centres = torch.where(running.view(-1, 1, 1), c_new, centres)
        labels_old = torch.where(running.unsqueeze(1), labels, labels_old)
        running = running & ~finished
    if bool(running.any()):  # max_iter reached: one more E-step with the last centres
        rows = running.nonzero().squeeze(1)
        final_centres[ws[rows]] = centres[rows]
        final_e_step[ws[rows]] = True
    redo = final_e_step.nonzero().squeeze(1)
    if len(redo):
        relabel = _assign(xc.index_select(0, redo), final_centres.index_select(0, redo),
                          cluster_ok.index_select(0, redo))
        final_labels[redo] = torch.where(valid.index_select(0, redo), relabel, 0)
    return final_labels


def kmeans_labels_batched(x: torch.Tensor, n: torch.Tensor, k: torch.Tensor, seed: int = 42,
                          max_iter: int = KMEANS_MAX_ITER, tol: float = KMEANS_TOL,
                          row_ids: torch.Tensor | None = None, zero_padded: bool = False) -> torch.Tensor:
    """``KMeans(n_clusters=k[p], random_state=seed).fit_predict(x[p, :n[p]])`` for every problem ``p`` at once.

    ``x`` is ``(P, C, d)`` float32 (rows past ``n[p]`` are ignored), ``n`` and ``k`` ``(P,)`` with
    ``1 <= k <= n``. Returns labels ``(P, C)`` (0 past ``n``). Follows scikit-learn step by step (see the module
    docstring); a problem with ``k == 1`` is all zeros, as scikit-learn's would be. ``row_ids`` ``(P, C)``
    (optional): equal ids mark equal rows (``_row_ids``), computed here when not given. ``zero_padded``: the
    caller guarantees zero rows past ``n`` (saves a pass over ``x``).
    """
    P, C, d = x.shape
    device = x.device
    labels = torch.zeros((P, C), dtype=torch.long, device=device)
    multi = (k > 1).nonzero().squeeze(1)
    if len(multi) == 0:
        return labels
    full = len(multi) == P
    ns, ks = _select(n, multi, full), _select(k, multi, full)
    valid = torch.arange(C, device=device).unsqueeze(0) < ns.unsqueeze(1)
    xs = _select(x, multi, full).to(torch.float32)
    if not zero_padded:
        xs = xs * valid.unsqueeze(-1)
    ids = _row_ids(xs, valid) if row_ids is None else _select(row_ids, multi, full)
    ids = torch.where(valid, ids, torch.arange(C, device=device) - C)  # padding: distinct, matching nothing real
    has_duplicates = ((ids.unsqueeze(2) == ids.unsqueeze(1)).sum((1, 2)) > C)
    counts = ns.to(torch.float32).unsqueeze(-1)
    # scikit-learn centres the data (float32, NumPy's row-by-row mean) before seeding and Lloyd.
    mean = _sequential_row_sum(xs) / counts
    xc = (xs - mean.unsqueeze(1)).masked_fill_(~valid.unsqueeze(-1), 0.0)
    # tol is scaled by the mean per-feature variance of the data (np.var): Σ_rows ‖x_c‖² / (n·d). Computed in
    # float64 rather than NumPy's float32; it only decides when Lloyd stops short of strict convergence.
    sq_norms = torch.linalg.vector_norm(xc, dim=-1).to(torch.float64).square().sum(-1)
    scaled_tol = (sq_norms / (ns.to(torch.float64) * max(d, 1))).to(torch.float32) * np.float32(tol)
    init = _kmeans_plusplus(xc, ns, ks, seed, ids)
    result = _lloyd(xc, ns, ks, init, scaled_tol, has_duplicates, max_iter)
    if full:
        return result
    labels[multi] = result
    return labels


# ----------------------------------------------------------------------------------------------------------
# Recollection


def _l2norm(v: torch.Tensor) -> torch.Tensor:
    """``v / (‖v‖ + 1e-12)`` along the last axis in float32, as the code's ``_l2norm``; zero stays zero."""
    return v / (torch.linalg.vector_norm(v, dim=-1, keepdim=True) + NORM_EPS)


STOP_REASONS = ("rounds_exhausted", "k_reached", "empty_round")  # as recollect_faithful names them


def _buckets(n: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
    """Problems grouped by candidate count into power-of-two bands: ``[(indices, max count in the band)]``."""
    band = torch.ceil(torch.log2(n.to(torch.float64))).to(torch.long)  # 1 -> 0, 2 -> 1, 3..4 -> 2, ...
    out = []
    for value in torch.unique(band).tolist():
        sel = (band == value).nonzero().squeeze(1)
        out.append((sel, int(n.index_select(0, sel).max())))
    return out


def _expand(flat: torch.Tensor, cand_s: torch.Tensor, n: torch.Tensor, flat_pools: torch.Tensor,
            flat_ids: torch.Tensor, parent_q: torch.Tensor, q0: torch.Tensor, lam: float, alpha: float,
            beam: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps 2-4 of a round for ``P`` branch problems: MMR scores, KMeans labels, child queries.

    ``flat`` ``(P, C)`` indexes each candidate's row in ``flat_pools`` (padding slots point at a zero row),
    ``cand_s`` ``(P, C)`` their float32 cosines to the branch query, ``n`` ``(P,)`` their counts; ``parent_q``
    and ``q0`` ``(P, d)``. Returns ``mmr`` ``(P, C)`` float64, ``labels`` ``(P, C)`` and child queries
    ``(P, B, d)`` (zero for empty clusters and unused label slots).
    """
    P, C = flat.shape
    d = flat_pools.shape[1]
    device = flat.device
    valid = torch.arange(C, device=device).unsqueeze(0) < n.unsqueeze(1)
    vecs = flat_pools.index_select(0, flat.reshape(-1)).reshape(P, C, d)  # zero rows past n
    ids = flat_ids.index_select(0, flat.reshape(-1)).reshape(P, C)

    # 2. MMR: λ·s − (1−λ)·max_{j≠i} ⟨v_i, v_j⟩ (0 for a lone candidate), float64 like the code's Python floats
    if C > 1:
        gram = torch.bmm(vecs, vecs.transpose(1, 2))
        excluded = ~(valid.unsqueeze(1) & valid.unsqueeze(2)) | torch.eye(C, dtype=torch.bool, device=device)
        nearest = gram.masked_fill(excluded, float("-inf")).max(-1).values
        nearest = torch.where(n.unsqueeze(1) > 1, nearest, torch.zeros_like(nearest))
    else:
        nearest = torch.zeros((P, C), dtype=torch.float32, device=device)
    mmr = (lam * cand_s.to(torch.float64) - (1.0 - lam) * nearest.to(torch.float64)).masked_fill(~valid, 0.0)

    # 3. KMeans per branch, k = min(B, n)
    k = n.clamp(max=beam)
    labels = kmeans_labels_batched(vecs, n, k, seed, row_ids=ids, zero_padded=True)

    # 4. child query per label: norm(α·q_branch + (1−α)·norm(mean of members) + q0), float32
    member_ids = torch.where(valid, ids, torch.arange(C, device=device) - C)
    has_duplicates = (member_ids.unsqueeze(2) == member_ids.unsqueeze(1)).sum((1, 2)) > C
    sizes = ((labels.unsqueeze(-1) == torch.arange(beam, device=device)) & valid.unsqueeze(-1)).sum(1)
    centroid = _l2norm(_group_sums(vecs, labels, valid, beam, has_duplicates)
                       / sizes.clamp_min(1).to(torch.float32).unsqueeze(-1))
    child_q = _l2norm(alpha * parent_q.unsqueeze(1) + (1.0 - alpha) * centroid + q0.unsqueeze(1))
    return mmr, labels, child_q.masked_fill(~(sizes > 0).unsqueeze(-1), 0.0)


def pool_span_coordinates(pools: torch.Tensor, lengths: torch.Tensor, queries: torch.Tensor,
                          pool_of_query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each pool and its queries in ``L + 1`` coordinates that keep every inner product: the ``projected`` engine.

    Recollection only ever combines a query with its own pool (searches, MMR Gram matrices, k-means, member means,
    child queries ``norm(α·q + (1−α)·c + q0)``), so everything it computes lies in ``span(pool) + q0``. With a QR
    factorisation ``poolᵀ = Q·R`` (``QR_DTYPE``, Householder: ``Q`` orthonormal whatever the rank; the query
    products in float64), a memory's coordinates are its column of ``R`` and a query's are ``Qᵀ·q0`` plus one
    coordinate for the part of ``q0`` outside the pool's span. Inner products, norms and means are those of the
    original vectors up to float rounding, and the engine then works on ``L + 1`` instead of ``d`` dimensions (111
    vs 768 on PersonaBench).
    Rounding is not the faithful engine's, so a ranking can differ where two scores tie to about 1e-7; exact
    duplicates keep bitwise-equal coordinates (copied from their first occurrence), as the tie rule needs.

    ``pools`` ``(E, L, d)`` float32, zero past ``lengths``; ``queries`` ``(b, d)``; ``pool_of_query`` ``(b,)``
    indexes ``pools``. Returns ``(E, L, L + 1)`` pool coordinates (last column zero), ``(b, L + 1)`` queries and
    the ``(E, L)`` row ids of the original vectors (``_row_ids``: equal ids, bitwise-equal memories), which
    ``recollect_batched(row_ids=…)`` takes so that it does not hash every query's copy of a shared pool again.
    """
    E, L, d = pools.shape
    q_mat, r_mat = torch.linalg.qr(pools.to(QR_DTYPE).transpose(1, 2), mode="reduced")  # (E,d,m), (E,m,L)
    q_mat, r_mat = q_mat.to(torch.float64), r_mat.to(torch.float64)  # the products below accumulate in float64
    m = r_mat.shape[1]  # min(d, L)
    coords = torch.zeros((E, L, L + 1), dtype=torch.float64, device=pools.device)
    coords[:, :, :m] = r_mat.transpose(1, 2)
    valid = torch.arange(L, device=pools.device).unsqueeze(0) < lengths.unsqueeze(1)
    coords = coords.masked_fill(~valid.unsqueeze(-1), 0.0).to(torch.float32)
    ids = _row_ids(pools, valid)
    first = _first_occurrence(ids)
    if first is not None:  # copies of one memory must stay bitwise equal (the tie rule relies on exact ties)
        coords = torch.gather(coords, 1, first.unsqueeze(-1).expand(-1, -1, L + 1))
    q64 = queries.to(torch.float64)
    b = len(queries)
    per_pool = torch.bincount(pool_of_query, minlength=E)
    if b == E and bool((per_pool == 1).all()):  # one query per pool (LongMemEval): one batched product
        positions = torch.arange(b, device=pools.device)
        query_of_pool = torch.empty_like(pool_of_query).scatter_(0, pool_of_query, positions)
        by_pool = torch.bmm(q_mat.transpose(1, 2), q64.index_select(0, query_of_pool).unsqueeze(-1)).squeeze(-1)
        inside = by_pool.index_select(0, pool_of_query)
    else:  # few pools shared by many queries (PersonaBench, LoCoMo): one product per pool, no basis copies
        inside = torch.empty((b, m), dtype=torch.float64, device=pools.device)
        for e in per_pool.nonzero().squeeze(1).tolist():
            members = (pool_of_query == e).nonzero().squeeze(1)
            inside[members] = q64.index_select(0, members) @ q_mat[e]
    # the part of q0 outside the pool's span, from the norms (float64: no cancellation worth a d-sized residual)
    outside = (q64.square().sum(-1) - inside.square().sum(-1)).clamp_min(0.0).sqrt()
    q_coords = torch.zeros((b, L + 1), dtype=torch.float64, device=pools.device)
    q_coords[:, :m] = inside
    q_coords[:, L] = outside
    return coords, q_coords.to(torch.float32), ids


@contextlib.contextmanager
def _full_fp32_matmul() -> Iterator[None]:
    """Force IEEE float32 matmuls for the duration (no TF32 / bf16 shortcuts on GPUs): the engine's agreement
    with the faithful engine rests on float32 inner products, and TF32 keeps only 10 mantissa bits."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def recollect_batched(q0s: torch.Tensor, pools: torch.Tensor, lengths: torch.Tensor,
                      params: RecollectionParams, row_ids: torch.Tensor | None = None) -> list[RecollectionResult]:
    """Recollection for ``b`` queries at once, each against its own pool.

    ``q0s`` ``(b, d)`` unit query vectors; ``pools`` ``(b, L, d)`` float32, query i's pool in rows
    ``[0, lengths[i])`` (zero padding after, never emitted); ``lengths`` ``(b,)``. Runs on ``pools.device``.
    Returns one ``RecollectionResult`` per query with the same fields, order and trace keys as
    ``recollect_faithful``: pool positions in insertion order, carried MMR scores, truncated to K.

    Memory: about ``b·B·L`` scores plus ``b·B·N·d`` gathered candidates (float64 for the k-means++ distances)
    per round, N = (B + r)·F; callers chunk large batches (the retriever does).
    """
    with _full_fp32_matmul(), torch.no_grad():
        return _recollect(q0s, pools, lengths, params, row_ids)


def _recollect(q0s: torch.Tensor, pools: torch.Tensor, lengths: torch.Tensor,
               params: RecollectionParams, row_ids: torch.Tensor | None = None) -> list[RecollectionResult]:
    """The body of ``recollect_batched`` (see there)."""
    validate_params(params)
    refuse_faithful_only_variants(params, "batched")  # D.9 full exploration it does run
    full_exploration = bool(getattr(params, "full_exploration", False))
    if q0s.ndim != 2 or pools.ndim != 3 or lengths.ndim != 1:
        raise ValueError(f"expected q0s (b, d), pools (b, L, d), lengths (b,); got {tuple(q0s.shape)}, "
                         f"{tuple(pools.shape)}, {tuple(lengths.shape)}")
    b, L, d = pools.shape
    if q0s.shape[0] != b or lengths.shape[0] != b or (q0s.shape[1] != d and L > 0):
        raise ValueError(f"shape mismatch: q0s {tuple(q0s.shape)}, pools {tuple(pools.shape)}, "
                         f"lengths {tuple(lengths.shape)}")
    if b == 0:
        return []
    device = pools.device
    pools = pools.to(torch.float32)
    q0s = q0s.to(device=device, dtype=torch.float32)
    lengths = lengths.to(device=device, dtype=torch.long)
    if not bool(torch.isfinite(q0s).all()):
        raise ValueError("query vector has a non-finite entry")
    if int(lengths.max()) > L or int(lengths.min()) < 0:
        raise ValueError("lengths must lie in [0, L]")
    if L == 0:  # no memories anywhere: pad one zero row so shapes stay valid (it is never a candidate)
        pools = torch.zeros((b, 1, q0s.shape[1]), dtype=torch.float32, device=device)
        b, L, d = pools.shape

    B, F, K = params.beam, params.fanout, params.k
    lam, alpha = float(params.mmr_lambda), float(params.alpha)
    floor = None if params.min_sim is None else float(params.min_sim)
    keep_dead = params.dead_branch_policy == "keep"
    stop_on_empty = params.after_empty_round == "stop"

    positions_all = torch.arange(L, device=device)
    pad = positions_all.unsqueeze(0) >= lengths.unsqueeze(1)  # (b, L)
    beam_q = torch.zeros((b, B, d), dtype=torch.float32, device=device)
    beam_q[:, 0] = q0s
    beam_sum = torch.zeros((b, B), dtype=torch.float64, device=device)
    beam_live = torch.zeros((b, B), dtype=torch.bool, device=device)
    beam_live[:, 0] = True
    seen = torch.zeros((b, L), dtype=torch.bool, device=device)
    out_pos = torch.zeros((b, L + 1), dtype=torch.long, device=device)  # column L: scratch for non-emits
    out_score = torch.zeros((b, L + 1), dtype=torch.float64, device=device)
    out_n = torch.zeros(b, dtype=torch.long, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    # (b, L): equal ids, bitwise-equal memories (duplicate turns, sessions); given by callers that know them
    pool_ids = _row_ids(pools, ~pad) if row_ids is None else row_ids
    canonical = _first_occurrence(pool_ids)  # (b, L): position of each row's first copy, or None
    # The pool-sized tensors live in a working set of the still-running queries, compacted (one copy) when
    # fewer than half of it still run; selecting the active rows every round would copy the pools each round.
    ws = torch.arange(b, device=device)  # working row -> query
    ws_pos = torch.arange(b, device=device)  # query -> working row
    pools_w, pad_w, lengths_w, ids_w, canonical_w = pools, pad, lengths, pool_ids, canonical
    flat_pools, flat_ids, zero_row = _flatten_pools(pools_w, lengths_w, ids_w)
    # per-query, per-round trace counters on the host (one small transfer per round)
    trace_items = np.zeros((b, params.rounds), dtype=np.int64)
    trace_cands = np.zeros((b, params.rounds), dtype=np.int64)
    trace_dead = np.zeros((b, params.rounds), dtype=np.int64)
    rounds_run = np.zeros(b, dtype=np.int64)
    stop_code = np.zeros(b, dtype=np.int64)  # 0 rounds_exhausted, 1 k_reached, 2 empty_round

    for r in range(params.rounds):
        idx = (~done).nonzero().squeeze(1)
        a = len(idx)
        if a == 0:
            break
        n_search = (B + r) * F
        n_eff = min(n_search, L)
        full = a == b
        q, live, len_a = _select(beam_q, idx, full), _select(beam_live, idx, full), _select(lengths, idx, full)
        seen_a = _select(seen, idx, full)
        if 2 * a < len(ws):  # compact the working set to the running queries
            keep_rows = ws_pos.index_select(0, idx)
            pools_w, pad_w, lengths_w, ids_w = (t.index_select(0, keep_rows) for t in (pools_w, pad_w, lengths_w,
                                                                                       ids_w))
            canonical_w = None if canonical_w is None else canonical_w.index_select(0, keep_rows)
            flat_pools, flat_ids, zero_row = _flatten_pools(pools_w, lengths_w, ids_w)
            ws = idx
            ws_pos = torch.full((b,), -1, dtype=torch.long, device=device)
            ws_pos[idx] = torch.arange(a, device=device)
        rows_w = ws_pos.index_select(0, idx)  # each running query's working row
        full_w = a == len(ws)

        # 1. exact top-N per live branch, stable (ties by position), then floor / emitted / padding masks
        if full_w:
            scores = torch.bmm(q, pools_w.transpose(1, 2))  # (a, B, L) float32
        else:  # score the whole working set (finished rows with zero queries) rather than copy the pools
            q_w = torch.zeros((len(ws), B, d), dtype=torch.float32, device=device).index_copy_(0, rows_w, q)
            scores = torch.bmm(q_w, pools_w.transpose(1, 2)).index_select(0, rows_w)
        if canonical_w is not None:  # copies of one vector score exactly alike, so the tie rule decides them
            scores = torch.gather(scores, 2, _select(canonical_w, rows_w, full_w).unsqueeze(1).expand(-1, B, -1))
        scores = scores.masked_fill(_select(pad_w, rows_w, full_w).unsqueeze(1), float("-inf"))
        top_s, top_p = torch.sort(scores, dim=-1, descending=True, stable=True)
        top_s, top_p = top_s[..., :n_eff], top_p[..., :n_eff]
        rank = torch.arange(n_eff, device=device)
        keep = (rank.view(1, 1, -1) < len_a.view(-1, 1, 1)) & live.unsqueeze(-1)
        keep &= ~torch.gather(seen_a.unsqueeze(1).expand(-1, B, -1), 2, top_p)
        if floor is not None:
            keep &= top_s.to(torch.float64) >= floor  # the code compares Python floats
        n_cand = keep.sum(-1)  # (a, B)
        # a live branch can still find something in a later round only if its top-N neither covered the pool
        # nor ended below the floor (scores are sorted, so deeper hits would be lower still)
        can_grow = (len_a.unsqueeze(1) > n_eff)
        if floor is not None and n_eff > 0:
            can_grow = can_grow & (top_s[..., n_eff - 1].to(torch.float64) >= floor)
        can_grow = (can_grow & live).any(-1)

        # compact candidates, keeping cosine order
        order = torch.sort((~keep).to(torch.uint8), dim=-1, stable=True).indices
        C = int(n_cand.max()) if a else 0
        problem_q, problem_b = (n_cand > 0).nonzero(as_tuple=True)
        Pn = len(problem_q)

        children_exist = torch.zeros((a, B, B), dtype=torch.bool, device=device)
        children_sum = torch.zeros((a, B, B), dtype=torch.float64, device=device)
        dead_count = torch.zeros(a, dtype=torch.long, device=device)
        if Pn:
            order = order[..., :C]
            problem = problem_q * B + problem_b
            cand_p = torch.gather(top_p, 2, order).reshape(a * B, C).index_select(0, problem)  # (Pn, C)
            cand_s = torch.gather(top_s, 2, order).reshape(a * B, C).index_select(0, problem)
            n = n_cand.reshape(-1).index_select(0, problem)
            valid = torch.arange(C, device=device).unsqueeze(0) < n.unsqueeze(1)
            cand_p = cand_p.masked_fill(~valid, 0)
            pool_row = idx.index_select(0, problem_q)  # each problem's query, as a row of the full batch
            work_row = rows_w.index_select(0, problem_q)  # ... and of the working set
            flat = torch.where(valid, work_row.unsqueeze(1) * L + cand_p, zero_row)
            parent_q = q.reshape(a * B, d).index_select(0, problem)  # (Pn, d)
            # 2-4 per problem, in buckets of similar candidate counts (a few long lists would pad every problem)
            mmr = torch.zeros((Pn, C), dtype=torch.float64, device=device)
            labels = torch.zeros((Pn, C), dtype=torch.long, device=device)
            child_q = torch.zeros((Pn, B, d), dtype=torch.float32, device=device)
            for sel, width in _buckets(n):
                m, lab, cq = _expand(flat.index_select(0, sel)[:, :width], cand_s.index_select(0, sel)[:, :width],
                                     n.index_select(0, sel), flat_pools, flat_ids, parent_q.index_select(0, sel),
                                     q0s.index_select(0, pool_row.index_select(0, sel)), lam, alpha, B,
                                     params.kmeans_seed)
                mmr[sel, :width] = m
                labels[sel, :width] = lab
                child_q.index_copy_(0, sel, cq)
            k = n.clamp(max=B)
            member = (labels.unsqueeze(1) == torch.arange(B, device=device).view(1, -1, 1)) & valid.unsqueeze(1)
            sizes = member.sum(-1)  # (Pn, B)
            cluster_ok = torch.arange(B, device=device).unsqueeze(0) < k.unsqueeze(1)
            dead = cluster_ok & (sizes == 0)
            dead_count.index_add_(0, problem_q, dead.sum(-1))

            # 4. children: cumulative score sum (member order, float64 like the code's Python sum)
            member_sum = torch.zeros((Pn, B), dtype=torch.float64, device=device)
            for j in range(C):
                member_sum = member_sum + torch.where(member[:, :, j], mmr[:, j].unsqueeze(1), 0.0)
            parent_sum = beam_sum.reshape(-1).index_select(0, pool_row * B + problem_b)
            child_sum = parent_sum.unsqueeze(1) + member_sum
            exists = (sizes > 0) | (dead & keep_dead)
            children_exist.view(a * B, B).index_copy_(0, problem, exists)
            children_sum.view(a * B, B).index_copy_(0, problem, child_sum)
            # which problem each (query, parent) pair is, to find a beam child's members later
            problem_of = torch.full((a * B,), -1, dtype=torch.long, device=device)
            problem_of.index_copy_(0, problem, torch.arange(Pn, device=device))

        cand_total = n_cand.sum(-1)
        flat_exist = children_exist.view(a, B * B)
        has_children = flat_exist.any(-1)
        items = torch.zeros(a, dtype=torch.long, device=device)

        if bool(has_children.any()):
            # 5. stable sort by score_sum descending (creation order on ties); non-children last
            key = children_sum.view(a, B * B).masked_fill(~flat_exist, float("-inf"))
            rank_order = torch.sort(key, dim=-1, descending=True, stable=True).indices[:, :B]  # (a, B)
            new_exist = torch.gather(flat_exist, 1, rank_order)
            rows_a = torch.arange(a, device=device).unsqueeze(1)
            parent_flat = rows_a * B + rank_order // B  # (query, parent) slot
            label = rank_order % B
            new_sum = torch.gather(key, 1, rank_order).masked_fill(~new_exist, 0.0)
            pid = problem_of.index_select(0, parent_flat.reshape(-1)).reshape(a, B)  # −1: parent found nothing
            new_live = new_exist & (pid >= 0)
            pid_safe = pid.clamp_min(0)
            new_q = child_q.reshape(Pn * B, d).index_select(0, (pid_safe * B + label).reshape(-1)).reshape(a, B, d)
            new_q = new_q * new_live.unsqueeze(-1)  # dead or absent children: no query (never searched)
            child_members = member.reshape(Pn * B, C).index_select(0, (pid_safe * B + label).reshape(-1))
            child_members = child_members.reshape(a, B, C) & new_live.unsqueeze(-1)
            new_live &= child_members.any(-1)  # dead children have no members and are never searched

            # emission: beam order, then member (cosine) order; first occurrence of an unseen item wins
            hit_p = cand_p.index_select(0, pid_safe.reshape(-1)).reshape(a, B * C)
            hit_s = mmr.index_select(0, pid_safe.reshape(-1)).reshape(a, B * C)
            hit_ok = child_members.reshape(a, B * C) & ~torch.gather(seen_a, 1, hit_p)
            t = torch.arange(B * C, device=device).expand(a, -1)
            first_t = torch.full((a, L), B * C, dtype=torch.long, device=device)
            first_t.scatter_reduce_(1, hit_p, torch.where(hit_ok, t, B * C), reduce="amin")
            emit = hit_ok & (torch.gather(first_t, 1, hit_p) == t) & has_children.unsqueeze(1)
            items = emit.sum(-1)
            out_n_a = _select(out_n, idx, full)
            dest = torch.where(emit, out_n_a.unsqueeze(1) + emit.cumsum(-1) - 1, L)  # column L: scratch
            op, os_ = _select(out_pos, idx, full), _select(out_score, idx, full)
            op.scatter_(1, dest, hit_p)  # in place when every query is active
            os_.scatter_(1, dest, hit_s)
            new_seen = seen_a.clone()
            new_seen[rows_a.expand_as(hit_p)[emit], hit_p[emit]] = True  # emitted positions are unique
            # queries whose round was empty keep their state (beam, seen, output) for the next round
            keep_state = ~has_children
            if bool(keep_state.any()):
                new_q = torch.where(keep_state.view(-1, 1, 1), q, new_q)
                new_sum = torch.where(keep_state.view(-1, 1), _select(beam_sum, idx, full), new_sum)
                new_live = torch.where(keep_state.view(-1, 1), live, new_live)
            if not full:
                out_pos.index_copy_(0, idx, op)
                out_score.index_copy_(0, idx, os_)
            out_n.index_copy_(0, idx, out_n_a + items)
            seen.index_copy_(0, idx, new_seen)
            beam_q.index_copy_(0, idx, new_q)
            beam_sum.index_copy_(0, idx, new_sum)
            beam_live.index_copy_(0, idx, new_live)

        # bookkeeping and stopping
        reached = (_select(out_n, idx, full) >= K) & (not full_exploration)
        empty = ~has_children
        frozen = empty & ~can_grow  # same beam, nothing new to find: every later round is empty too
        stop_now = reached | (empty & (stop_on_empty | frozen))
        host = torch.stack([items, cand_total, dead_count, reached.long(), (empty & stop_on_empty).long(),
                            stop_now.long()]).cpu().numpy()
        rows_np = idx.cpu().numpy()
        trace_items[rows_np, r], trace_cands[rows_np, r], trace_dead[rows_np, r] = host[0], host[1], host[2]
        rounds_run[rows_np] = r + 1
        stop_code[rows_np[host[3] == 1]] = 1
        stop_code[rows_np[(host[3] == 0) & (host[4] == 1)]] = 2
        # a frozen query leaves now; the faithful engine would run its remaining rounds, all empty
        frozen_rows = rows_np[(host[5] == 1) & (host[3] == 0) & (host[4] == 0)]
        rounds_run[frozen_rows] = params.rounds
        done.index_copy_(0, idx, stop_now)

    # results: insertion order (or the dense re-rank over everything emitted), truncated to K
    counts = out_n.cpu().tolist()
    pos_host = out_pos.cpu().numpy()
    score_host = out_score.cpu().numpy()
    cosines = None
    if params.final_rerank == "dense" or full_exploration:
        cosines = torch.bmm(pools, q0s.unsqueeze(-1)).squeeze(-1)  # (b, L) float32
        if canonical is not None:  # exact ties between copies, as in the search
            cosines = torch.gather(cosines, 1, canonical)
        cosines = cosines.cpu().numpy()
    results: list[RecollectionResult] = []
    for i in range(b):
        pos = pos_host[i, :counts[i]]
        sc = score_host[i, :counts[i]]
        if cosines is not None and len(pos):
            cos = cosines[i, pos]
            order = np.lexsort((pos, -cos.astype(np.float64)))
            pos, sc = pos[order], cos[order].astype(np.float64)
        pos, sc = pos[:K], sc[:K]
        m = int(rounds_run[i])
        tr = {"rounds": m, "items_per_round": trace_items[i, :m].tolist(),
              "candidates_per_round": trace_cands[i, :m].tolist(),
              "dead_branches_per_round": trace_dead[i, :m].tolist(),
              "stop_reason": STOP_REASONS[int(stop_code[i])]}
        if full_exploration:
            tr["collected"] = int(counts[i])
        results.append(RecollectionResult([int(p) for p in pos], [float(s) for s in sc], tr))
    return results
