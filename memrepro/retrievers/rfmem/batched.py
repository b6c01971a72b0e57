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
further centre). The engine takes those draws from NumPy once and replays scikit-learn's arithmetic (float64
upcast distances, float32 cumulative sums, first-minimum argmin, float32 Lloyd with scikit-learn's empty-cluster
rules) in torch. What cannot be replayed bit for bit is BLAS summation order (a float32 ``sgemm``/``sdot`` may
round differently from torch's kernels), so near-ties within about one float32 ulp can still go the other way;
in practice this is rare, and for k == n (e.g. F = 1) the partition is always the same.

Sums that the code forms sequentially (member means, the centring mean, float32 cumulative sums, the carried
score sums) are accumulated row by row here as well, so their rounding matches NumPy's.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from memrepro.retrievers.rfmem.params import RecollectionParams

try:  # one result type for both engines, so callers never care which engine ran
    from memrepro.retrievers.rfmem.recollection import RecollectionResult, validate_params
except ImportError:  # pragma: no cover - only while the faithful engine is absent
    @dataclass(frozen=True)
    class RecollectionResult:  # type: ignore[no-redef]
        """One query's Recollection output: pool positions and carried scores in insertion order, plus a trace."""

        positions: list[int]
        scores: list[float]
        trace: dict = field(default_factory=dict)

    def validate_params(params: RecollectionParams) -> None:  # type: ignore[no-redef]
        """Reject settings the algorithm has no meaning for."""
        if params.k < 1 or params.beam < 1 or params.fanout < 1 or params.rounds < 1:
            raise ValueError(f"recollection k, beam, fanout and rounds must be >= 1, got {params}")
        if params.after_empty_round not in ("continue", "stop"):
            raise ValueError(f"after_empty_round must be 'continue' or 'stop', got {params.after_empty_round!r}")
        if params.dead_branch_policy not in ("keep", "drop"):
            raise ValueError(f"dead_branch_policy must be 'keep' or 'drop', got {params.dead_branch_policy!r}")
        if params.final_rerank not in ("none", "dense"):
            raise ValueError(f"final_rerank must be 'none' or 'dense', got {params.final_rerank!r}")

NORM_EPS = 1e-12
KMEANS_MAX_ITER = 300  # scikit-learn defaults, as the code calls KMeans
KMEANS_TOL = 1e-4

__all__ = ["RecollectionResult", "recollect_batched", "kmeans_labels_batched"]


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


def _sequential_group_sum(x: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, groups: int) -> torch.Tensor:
    """Per-group sums of the rows of ``x`` ``(P, C, d)``, accumulated row by row in float32.

    This is how NumPy's ``X[members].mean(axis=0)`` and scikit-learn's Lloyd M-step (one chunk, samples in
    order) add rows; torch's reductions and matmuls associate differently, and with duplicate vectors the
    resulting one-ulp differences decide exact ties. Each step adds one row per problem to a distinct group
    slot, so the accumulation order per group is the row order. Returns ``(P, groups, d)``.
    """
    P, C, d = x.shape
    acc = torch.zeros((P, groups, d), dtype=x.dtype, device=x.device)
    rows = torch.arange(P, device=x.device)
    for j in range(C):
        ok = valid[:, j]
        if not bool(ok.any()):
            break  # valid rows are a prefix
        acc.index_put_((rows[ok], labels[ok, j]), x[ok, j], accumulate=True)
    return acc


def _upcast_sq_distances(rows: torch.Tensor, x64: torch.Tensor, xx: torch.Tensor,
                         identical: torch.Tensor) -> torch.Tensor:
    """scikit-learn's float32 ``_euclidean_distances(rows, X, squared=True)``: computed in float64 as
    ``-2·r·x + ‖r‖² + ‖x‖²``, clipped at 0, returned as float32. ``rows`` ``(P, m, d)`` float64.

    ``identical`` ``(P, m, C)`` marks pairs of bitwise-equal vectors, whose distance is set to exactly 0.
    scikit-learn leaves BLAS rounding noise there (about 1e-16, zero or clipped to zero in most of its calls);
    that noise only matters once every remaining distance is zero (more clusters than distinct points), where
    an exact zero reproduces scikit-learn's choice far more often than torch's own noise would.
    """
    rr = (rows * rows).sum(-1)
    d = torch.bmm(rows, x64.transpose(1, 2)).mul_(-2.0)
    d += rr.unsqueeze(-1)
    d += xx.unsqueeze(1)
    return d.to(torch.float32).clamp_min_(0.0).masked_fill_(identical, 0.0)


def _kmeans_plusplus(xc: torch.Tensor, n: torch.Tensor, k: torch.Tensor, seed: int,
                     identical: torch.Tensor) -> torch.Tensor:
    """Indices of the k-means++ centres scikit-learn picks, per problem, ``(P, max k)`` (−1 past ``k``).

    ``xc`` is the centred float32 data ``(P, C, d)`` (rows past ``n`` ignored). Every problem replays the same
    RandomState stream; trials per centre depend on its own k. ``identical`` ``(P, C, C)``: equal rows.
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
    xx = (x64 * x64).sum(-1)
    rows = torch.arange(P, device=device)

    first = torch.tensor([_first_centre(seed, int(m)) for m in n.tolist()], dtype=torch.long, device=device)
    centres = torch.full((P, kmax), -1, dtype=torch.long, device=device)
    centres[:, 0] = first
    closest = _upcast_sq_distances(x64[rows, first].unsqueeze(1), x64, xx, identical[rows, first].unsqueeze(1))
    closest = closest[:, 0, :].masked_fill(~valid, 0.0)
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
        dist = _upcast_sq_distances(x64[rows.unsqueeze(1), cand], x64, xx, identical[rows.unsqueeze(1), cand])
        dist = torch.minimum(dist, closest.unsqueeze(1)).masked_fill(~valid.unsqueeze(1), 0.0)
        cand_pot = dist.to(torch.float64).sum(-1).to(torch.float32)
        cand_pot = cand_pot.masked_fill(t.unsqueeze(0) >= trials.unsqueeze(1), float("inf"))
        best = cand_pot.argmin(-1)  # first minimum, as np.argmin
        new_pot = cand_pot[rows, best]
        new_closest = dist[rows, best]
        new_centre = cand[rows, best]
        potential = torch.where(active, new_pot, potential)
        closest = torch.where(active.unsqueeze(1), new_closest, closest)
        centres[:, c] = torch.where(active, new_centre, centres[:, c])
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
    an empty cluster with distinct points left, so a per-problem loop costs nothing)."""
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


def _lloyd(xc: torch.Tensor, n: torch.Tensor, k: torch.Tensor, init: torch.Tensor, tol: torch.Tensor,
           exact_sums: torch.Tensor | None = None, max_iter: int = KMEANS_MAX_ITER) -> torch.Tensor:
    """scikit-learn's ``_kmeans_single_lloyd`` for every problem at once; returns labels ``(P, C)``.

    Per iteration: E-step, M-step (float32 sums, centres scaled by ``float32(1/w)``), empty-cluster relocation
    and placement at the heaviest cluster, centre shift. A problem stops on strict convergence (labels unchanged,
    keep them) or when the squared shift total is ``<= tol`` (then one more E-step with the new centres), or
    after ``max_iter`` (likewise).

    ``exact_sums`` ``(P,)`` selects problems whose M-step sums are accumulated row by row like scikit-learn's
    (those with duplicate vectors, where exact distance ties are common and one ulp decides them); the others
    use one batched matmul, whose rounding can only matter at near-ties.
    """
    if exact_sums is None:
        exact_sums = torch.zeros(len(xc), dtype=torch.bool, device=xc.device)
    P, C, d = xc.shape
    device = xc.device
    kmax = init.shape[1]
    rows = torch.arange(P, device=device)
    valid = torch.arange(C, device=device).unsqueeze(0) < n.unsqueeze(1)
    cluster_ok = torch.arange(kmax, device=device).unsqueeze(0) < k.unsqueeze(1)
    centres = xc[rows.unsqueeze(1), init.clamp_min(0)] * cluster_ok.unsqueeze(-1)
    labels_old = torch.full((P, C), -1, dtype=torch.long, device=device)
    final = torch.zeros((P, C), dtype=torch.long, device=device)
    needs_final_e_step = torch.ones(P, dtype=torch.bool, device=device)
    active = torch.ones(P, dtype=torch.bool, device=device)
    cluster_ids = torch.arange(kmax, device=device)
    for _ in range(max_iter):
        idx = active.nonzero().squeeze(1)
        if len(idx) == 0:
            break
        x, c_old, ok, ok_x = xc[idx], centres[idx], cluster_ok[idx], valid[idx]
        labels = _assign(x, c_old, ok)
        onehot = (labels.unsqueeze(-1) == cluster_ids) & ok_x.unsqueeze(-1)  # (a, C, kmax)
        weights = onehot.sum(1).to(torch.float32)
        sums = torch.bmm(onehot.transpose(1, 2).to(torch.float32), x)
        exact = exact_sums[idx]
        if bool(exact.any()):
            sums[exact] = _sequential_group_sum(x[exact], labels[exact], ok_x[exact], kmax)
        empty = (weights == 0) & ok
        if bool(empty.any()):
            for j in empty.any(1).nonzero().squeeze(1).tolist():
                m, kk = int(n[idx[j]]), int(k[idx[j]])
                s_np, w_np = sums[j, :kk].cpu().numpy().copy(), weights[j, :kk].cpu().numpy().copy()
                _relocate_empty(x[j, :m].cpu().numpy(), c_old[j, :kk].cpu().numpy(), s_np, w_np,
                                labels[j, :m].cpu().numpy().astype(np.int64))
                sums[j, :kk] = torch.from_numpy(s_np).to(device)
                weights[j, :kk] = torch.from_numpy(w_np).to(device)
        # _average_centers: scale by float32(1/w); an empty cluster copies the heaviest one as it stands at
        # that point of the loop (already scaled if it comes earlier, the raw sum if later).
        scale = torch.where(weights > 0, (1.0 / weights.to(torch.float64)).to(torch.float32),
                            torch.ones_like(weights))
        averaged = sums * scale.unsqueeze(-1)
        heaviest = weights.masked_fill(~ok, -1.0).argmax(-1)
        a_rows = torch.arange(len(idx), device=device)
        heavy_avg, heavy_sum = averaged[a_rows, heaviest], sums[a_rows, heaviest]
        later = cluster_ids.unsqueeze(0) > heaviest.unsqueeze(1)
        fill = torch.where(later.unsqueeze(-1), heavy_avg.unsqueeze(1), heavy_sum.unsqueeze(1))
        c_new = torch.where((weights > 0).unsqueeze(-1), averaged, fill) * ok.unsqueeze(-1)
        shift = torch.sqrt(((c_old - c_new) ** 2).sum(-1)).masked_fill(~ok, 0.0)
        shift_tot = (shift * shift).sum(-1)
        centres[idx] = c_new
        same = ((labels == labels_old[idx]) | ~ok_x).all(-1)
        converged_tol = ~same & (shift_tot <= tol[idx])
        finished = same | converged_tol
        final[idx] = torch.where(ok_x, labels, 0)
        needs_final_e_step[idx] = ~same
        labels_old[idx] = labels
        active[idx] = ~finished
    redo = needs_final_e_step.nonzero().squeeze(1)
    if len(redo):
        final[redo] = torch.where(valid[redo], _assign(xc[redo], centres[redo], cluster_ok[redo]), 0)
    return final


def kmeans_labels_batched(x: torch.Tensor, n: torch.Tensor, k: torch.Tensor, seed: int = 42,
                          max_iter: int = KMEANS_MAX_ITER, tol: float = KMEANS_TOL) -> torch.Tensor:
    """``KMeans(n_clusters=k[p], random_state=seed).fit_predict(x[p, :n[p]])`` for every problem ``p`` at once.

    ``x`` is ``(P, C, d)`` float32 (rows past ``n[p]`` are ignored), ``n`` and ``k`` ``(P,)`` with
    ``1 <= k <= n``. Returns labels ``(P, C)`` (0 past ``n``). Follows scikit-learn step by step (see the module
    docstring); a problem with ``k == 1`` is all zeros, as scikit-learn's would be.
    """
    P, C, d = x.shape
    device = x.device
    labels = torch.zeros((P, C), dtype=torch.long, device=device)
    multi = (k > 1).nonzero().squeeze(1)
    if len(multi) == 0:
        return labels
    xs, ns, ks = x[multi].to(torch.float32), n[multi], k[multi]
    valid = (torch.arange(C, device=device).unsqueeze(0) < ns.unsqueeze(1)).unsqueeze(-1)
    xs = xs * valid
    counts = ns.to(torch.float32).unsqueeze(-1)
    # scikit-learn centres the data (float32, NumPy's row-by-row mean) before seeding and Lloyd.
    valid2 = valid.squeeze(-1)
    zeros = torch.zeros(valid2.shape, dtype=torch.long, device=device)
    mean = _sequential_group_sum(xs, zeros, valid2, 1)[:, 0, :] / counts
    xc = (xs - mean.unsqueeze(1)) * valid
    # tol is scaled by the mean per-feature variance of the uncentred data (np.var, float32).
    centred_sq = ((xs - mean.unsqueeze(1)) * valid) ** 2
    variances = centred_sq.sum(1) / counts
    scaled_tol = variances.mean(-1) * np.float32(tol)
    # bitwise-equal rows, found through a fixed random float64 projection (equal rows project equally; a
    # collision of distinct rows would need an exact float64 coincidence)
    gen = torch.Generator().manual_seed(0)
    probe = torch.randn(d, generator=gen, dtype=torch.float64).to(device)
    fingerprint = (xs.to(torch.float64) * probe).sum(-1).masked_fill(~valid2, float("nan"))
    identical = fingerprint.unsqueeze(2) == fingerprint.unsqueeze(1)  # NaN never equals: padding excluded
    has_duplicates = (identical & ~torch.eye(C, dtype=torch.bool, device=device)).flatten(1).any(-1)
    init = _kmeans_plusplus(xc, ns, ks, seed, identical)
    labels[multi] = _lloyd(xc, ns, ks, init, scaled_tol, has_duplicates, max_iter)
    return labels


# ----------------------------------------------------------------------------------------------------------
# Recollection


def _l2norm(v: torch.Tensor) -> torch.Tensor:
    """``v / (‖v‖ + 1e-12)`` along the last axis in float32, as the code's ``_l2norm``; zero stays zero."""
    return v / (torch.linalg.vector_norm(v, dim=-1, keepdim=True) + NORM_EPS)


@dataclass
class _Trace:
    """Per-query, per-round counters kept on the host (one small transfer per round)."""

    items: list[list[int]]
    candidates: list[list[int]]
    dead: list[list[int]]
    stop: list[str]


def recollect_batched(q0s: torch.Tensor, pools: torch.Tensor, lengths: torch.Tensor,
                      params: RecollectionParams) -> list[RecollectionResult]:
    """Recollection for ``b`` queries at once, each against its own pool.

    ``q0s`` ``(b, d)`` unit query vectors; ``pools`` ``(b, L, d)`` float32, query i's pool in rows
    ``[0, lengths[i])`` (zero padding after, never emitted); ``lengths`` ``(b,)``. Runs on ``pools.device``.
    Returns one ``RecollectionResult`` per query with the same fields, order and trace keys as
    ``recollect_faithful``: pool positions in insertion order, carried MMR scores, truncated to K.
    """
    validate_params(params)
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
    out_pos = torch.zeros((b, L), dtype=torch.long, device=device)
    out_score = torch.zeros((b, L), dtype=torch.float64, device=device)
    out_n = torch.zeros(b, dtype=torch.long, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    trace = _Trace([[] for _ in range(b)], [[] for _ in range(b)], [[] for _ in range(b)],
                   ["rounds_exhausted"] * b)

    for r in range(params.rounds):
        idx = (~done).nonzero().squeeze(1)
        a = len(idx)
        if a == 0:
            break
        n_search = (B + r) * F
        n_eff = min(n_search, L)
        q, live, pool_a, len_a = beam_q[idx], beam_live[idx], pools[idx], lengths[idx]

        # 1. exact top-N per live branch, stable (ties by position), then floor / emitted / padding masks
        scores = torch.bmm(q, pool_a.transpose(1, 2))  # (a, B, L) float32
        scores = scores.masked_fill(pad[idx].unsqueeze(1), float("-inf"))
        top_s, top_p = torch.sort(scores, dim=-1, descending=True, stable=True)
        top_s, top_p = top_s[..., :n_eff], top_p[..., :n_eff]
        rank = torch.arange(n_eff, device=device)
        keep = (rank.view(1, 1, -1) < len_a.view(-1, 1, 1)) & live.unsqueeze(-1)
        keep &= ~torch.gather(seen[idx].unsqueeze(1).expand(-1, B, -1), 2, top_p)
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
        children_q = None
        dead_count = torch.zeros(a, dtype=torch.long, device=device)
        if Pn:
            order = order[..., :C]
            cand_p = torch.gather(top_p, 2, order)[problem_q, problem_b]  # (Pn, C)
            cand_s = torch.gather(top_s, 2, order)[problem_q, problem_b]
            n = n_cand[problem_q, problem_b]
            valid = torch.arange(C, device=device).unsqueeze(0) < n.unsqueeze(1)
            cand_p = cand_p.masked_fill(~valid, 0)
            vecs = pool_a[problem_q.unsqueeze(1), cand_p] * valid.unsqueeze(-1)  # (Pn, C, d)

            # 2. MMR: λ·s − (1−λ)·max_{j≠i} ⟨v_i, v_j⟩ (0 for a lone candidate), float64 like the code
            gram = torch.bmm(vecs, vecs.transpose(1, 2))
            excluded = ~(valid.unsqueeze(1) & valid.unsqueeze(2)) | torch.eye(C, dtype=torch.bool, device=device)
            nearest = gram.masked_fill(excluded, float("-inf")).max(-1).values
            nearest = torch.where(n.unsqueeze(1) > 1, nearest, torch.zeros_like(nearest))
            mmr = lam * cand_s.to(torch.float64) - (1.0 - lam) * nearest.to(torch.float64)
            mmr = mmr.masked_fill(~valid, 0.0)

            # 3. KMeans per branch, k = min(B, n)
            k = n.clamp(max=B)
            labels = kmeans_labels_batched(vecs, n, k, params.kmeans_seed)
            member = (labels.unsqueeze(1) == torch.arange(B, device=device).view(1, -1, 1)) & valid.unsqueeze(1)
            sizes = member.sum(-1)  # (Pn, B)
            cluster_ok = torch.arange(B, device=device).unsqueeze(0) < k.unsqueeze(1)
            dead = cluster_ok & (sizes == 0)
            dead_count.index_add_(0, problem_q, dead.sum(-1))

            # 4. children: normalised member mean, child query, cumulative score sum (sequential, float64)
            centroid = _l2norm(_sequential_group_sum(vecs, labels, valid, B)
                               / sizes.clamp_min(1).to(torch.float32).unsqueeze(-1))
            parent_q = q[problem_q, problem_b]  # (Pn, d)
            child_q = _l2norm(alpha * parent_q.unsqueeze(1) + (1.0 - alpha) * centroid
                              + q0s[idx][problem_q].unsqueeze(1))
            member_sum = torch.zeros((Pn, B), dtype=torch.float64, device=device)
            for j in range(C):
                member_sum = member_sum + torch.where(member[:, :, j], mmr[:, j].unsqueeze(1), 0.0)
            parent_sum = beam_sum[idx][problem_q, problem_b]
            child_sum = parent_sum.unsqueeze(1) + member_sum
            exists = (sizes > 0) | (dead & keep_dead)
            children_exist[problem_q, problem_b] = exists
            children_sum[problem_q, problem_b] = child_sum
            children_q = torch.zeros((a, B, B, d), dtype=torch.float32, device=device)
            children_q[problem_q, problem_b] = child_q.masked_fill(~(sizes > 0).unsqueeze(-1), 0.0)
            # which problem each (query, parent) pair is, to find a beam child's members later
            problem_of = torch.full((a, B), -1, dtype=torch.long, device=device)
            problem_of[problem_q, problem_b] = torch.arange(Pn, device=device)

        cand_total = n_cand.sum(-1)
        flat_exist = children_exist.view(a, B * B)
        has_children = flat_exist.any(-1)
        items = torch.zeros(a, dtype=torch.long, device=device)

        if bool(has_children.any()):
            # 5. stable sort by score_sum descending (creation order on ties); non-children last
            key = children_sum.view(a, B * B).masked_fill(~flat_exist, float("-inf"))
            rank_order = torch.sort(key, dim=-1, descending=True, stable=True).indices[:, :B]  # (a, B)
            new_exist = torch.gather(flat_exist, 1, rank_order)
            parent_slot, label = rank_order // B, rank_order % B
            rows_a = torch.arange(a, device=device).unsqueeze(1)
            new_q = children_q[rows_a, parent_slot, label]
            new_sum = torch.gather(key, 1, rank_order).masked_fill(~new_exist, 0.0)
            pid = problem_of[rows_a, parent_slot]  # (a, B), −1 where the parent produced nothing
            new_live = new_exist & (pid >= 0)
            pid_safe = pid.clamp_min(0)
            child_members = member[pid_safe, label] & new_live.unsqueeze(-1)  # (a, B, C)
            new_live &= child_members.any(-1)  # dead children have no members and are never searched

            # emission: beam order, then member (cosine) order; first occurrence of an unseen item wins
            hit_p = cand_p[pid_safe].view(a, B * C)
            hit_s = mmr[pid_safe].view(a, B * C)
            hit_ok = child_members.view(a, B * C)
            seen_a = seen[idx]
            hit_ok &= ~torch.gather(seen_a, 1, hit_p)
            t = torch.arange(B * C, device=device).expand(a, -1)
            first_t = torch.full((a, L), B * C, dtype=torch.long, device=device)
            first_t.scatter_reduce_(1, hit_p, torch.where(hit_ok, t, B * C), reduce="amin")
            emit = hit_ok & (torch.gather(first_t, 1, hit_p) == t)
            emit &= has_children.unsqueeze(1)
            items = emit.sum(-1)
            dest = out_n[idx].unsqueeze(1) + emit.cumsum(-1) - 1
            dest = torch.where(emit, dest, L)  # a spare column absorbs non-emitted writes
            op = torch.cat([out_pos[idx], torch.zeros((a, 1), dtype=torch.long, device=device)], 1)
            os_ = torch.cat([out_score[idx], torch.zeros((a, 1), dtype=torch.float64, device=device)], 1)
            op.scatter_(1, dest, hit_p)
            os_.scatter_(1, dest, hit_s)
            seen_a = seen_a.clone()
            seen_a[rows_a.expand_as(hit_p)[emit], hit_p[emit]] = True  # emitted positions are unique
            upd = has_children
            upd_idx = idx[upd]
            out_pos[upd_idx] = op[upd, :L]
            out_score[upd_idx] = os_[upd, :L]
            out_n[upd_idx] = out_n[upd_idx] + items[upd]
            seen[upd_idx] = seen_a[upd]
            beam_q[upd_idx] = new_q[upd]
            beam_sum[upd_idx] = new_sum[upd]
            beam_live[upd_idx] = new_live[upd]

        # bookkeeping and stopping
        reached = out_n[idx] >= K
        empty = ~has_children
        frozen = empty & ~can_grow  # same beam, nothing new to find: every later round is empty too
        stop_now = reached | (empty & (stop_on_empty | frozen))
        host = torch.stack([items, cand_total, dead_count, reached.long(), empty.long(), frozen.long()]).cpu()
        for j, qi in enumerate(idx.tolist()):
            trace.items[qi].append(int(host[0, j]))
            trace.candidates[qi].append(int(host[1, j]))
            trace.dead[qi].append(int(host[2, j]))
            if host[3, j]:
                trace.stop[qi] = "k_reached"
            elif host[4, j] and stop_on_empty:
                trace.stop[qi] = "empty_round"
            elif host[5, j]:  # fill the rounds the faithful engine would still run, all empty
                remaining = params.rounds - r - 1
                trace.items[qi].extend([0] * remaining)
                trace.candidates[qi].extend([0] * remaining)
                trace.dead[qi].extend([0] * remaining)
        done[idx] = stop_now

    # results: insertion order (or the dense re-rank over everything emitted), truncated to K
    counts = out_n.cpu().tolist()
    pos_host = out_pos.cpu().numpy()
    score_host = out_score.cpu().numpy()
    cosines = None
    if params.final_rerank == "dense":
        cosines = torch.bmm(pools, q0s.unsqueeze(-1)).squeeze(-1).cpu().numpy()  # (b, L) float32
    results: list[RecollectionResult] = []
    for i in range(b):
        pos = pos_host[i, :counts[i]]
        sc = score_host[i, :counts[i]]
        if cosines is not None and len(pos):
            cos = cosines[i, pos]
            order = np.lexsort((pos, -cos.astype(np.float64)))
            pos, sc = pos[order], cos[order].astype(np.float64)
        pos, sc = pos[:K], sc[:K]
        tr = {"rounds": len(trace.items[i]), "items_per_round": trace.items[i],
              "candidates_per_round": trace.candidates[i], "dead_branches_per_round": trace.dead[i],
              "stop_reason": trace.stop[i]}
        results.append(RecollectionResult([int(p) for p in pos], [float(s) for s in sc], tr))
    return results
