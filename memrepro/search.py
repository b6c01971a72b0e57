"""Exact cosine search scoped to each query's episode, batched over queries, with a backend per episode size.

* ``torch`` (padded): episodes are stacked into one padded ``(E, L, d)`` tensor; a chunk of queries gathers its
  episodes' matrices and scores them with one batched matmul, then each row is sorted by the project tie rule
  (score descending, pool position ascending) with a stable sort. The benchmarks (hundreds of memories per
  episode, many episodes) run here, exactly as before.
* ``faiss`` (exact, for large episodes): FAISS's brute-force inner-product k-NN (``faiss.knn``, the kernel behind
  ``IndexFlatIP``, run on the episode's own array: no copy) picks ``k + margin`` candidates by partial selection;
  the candidates and every exact duplicate of them are rescored in float64 (rounded to float32) and sorted by the
  tie rule. The result is provably the tie-rule top-k of those scores: a query whose ``(k+margin)``-th FAISS
  score is not below its k-th score by more than the float32 error bound is asked again with a larger margin
  (up to the whole episode). On CUDA the candidates come from ``faiss.knn_gpu`` when faiss-gpu is installed,
  else from ``torch.topk`` on the device.
* ``faiss_ivf`` / ``faiss_hnsw``: approximate candidates (IndexIVFFlat / IndexHNSWFlat), then the same rescoring
  and tie rule; only on request, and the runner reports their recall@k against exact search on the same run.

``search.backend=auto`` (the default) sends an episode of at least ``faiss_min_memories`` memories to ``faiss``
when a cutoff k is asked, everything else to ``torch``. Exact backends return the same top-k except where two
*distinct* memories score within float32 rounding (about 1e-6) of each other at the cutoff; exact duplicates
always tie exactly (duplicates are found by hashing rows, and every copy takes its first copy's score).
A single-episode index holds its matrix as a view of the caller's array (no padded copy).

torch is imported where a search or an index needs it, not with this module: the retrievers import these types, and
skipping or restoring a complete run builds a retriever without searching.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from memrepro.limits import DEFAULT_CHUNK_BYTES, EXACT_BACKENDS, SEARCH_BACKENDS
from memrepro.parameters import check_node, integer_at_least, one_of, param
from memrepro.types import Episode


@dataclass
class SearchConfig:
    """Exact search backend by episode size (``memrepro.search.SearchOptions``); approximate ones on request."""

    backend: str = param("auto", one_of(*SEARCH_BACKENDS))
    faiss_min_memories: int = param(4096, integer_at_least(1))
    margin: int = param(16, integer_at_least(0))
    ivf_nlist: Optional[int] = param(None, integer_at_least(1))
    ivf_nprobe: int = param(16, integer_at_least(1))
    hnsw_m: int = param(32, integer_at_least(2))
    hnsw_ef_construction: int = param(40, integer_at_least(1))
    hnsw_ef_search: int = param(128, integer_at_least(1))
    # approximate backends: recall@k against exact search over the first recall_queries queries, in metrics.json
    recall_k: int = param(10, integer_at_least(1))
    recall_queries: int = param(1000, integer_at_least(1))


@dataclass(frozen=True)
class SearchOptions:
    """How episodes are searched (``search.*`` in the run config). Exact backends never change a ranking."""

    backend: str = "auto"  # auto | torch | faiss | faiss_ivf | faiss_hnsw
    # auto: an episode this long (or longer) goes to FAISS when k is given (benchmark pools: ≤ 689)
    faiss_min_memories: int = 4096
    margin: int = 16  # candidates asked beyond k (boundary ties, rescoring); grown ×4 when not provably enough
    ivf_nlist: int | None = None  # None: 4·sqrt(L), at least 1
    ivf_nprobe: int = 16
    hnsw_m: int = 32
    hnsw_ef_construction: int = 40  # FAISS default
    hnsw_ef_search: int = 128

    def __post_init__(self) -> None:
        check_node(asdict(self), SearchConfig, "search")  # the rules ``search.*`` declares, with their message

    @property
    def approximate(self) -> bool:
        return self.backend not in EXACT_BACKENDS


@dataclass
class EpisodeIndex:
    """Padded memory matrices of every episode, on one device."""

    episode_ids: tuple[str, ...]
    matrix: torch.Tensor  # (E, L, d) float32, zero rows past each episode's length
    lengths: torch.Tensor  # (E,) int64
    row_of: dict[str, int]
    # canonical[e, i] = the first position in episode e whose vector equals position i's. Identical vectors can
    # score a few ulps apart in a blocked matmul; copying the first copy's score makes their tie exact, so the
    # tie rule (not SIMD lane order) decides between duplicates.
    canonical: torch.Tensor | None = None
    # The memories themselves (id, text, position, time; never gold): rerankers read texts from here.
    episodes: Mapping[str, Episode] | None = None
    options: SearchOptions = field(default_factory=SearchOptions)
    # Host float32 arrays of the episodes (views, never copies), by row: what FAISS reads.
    blocks: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    # By row: True where a memory has an exact duplicate elsewhere in its episode (numpy bool).
    has_copy: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _ann: dict[Any, Any] = field(default_factory=dict, repr=False)  # approximate indexes etc., built on first use

    @property
    def device(self) -> torch.device:
        return self.matrix.device

    def rows(self, episode_ids: Sequence[str]) -> torch.Tensor:
        import torch

        return torch.tensor([self.row_of[e] for e in episode_ids], dtype=torch.long, device=self.device)

    def vectors(self, episode_id: str) -> np.ndarray:
        """One episode's ``(len, d)`` float32 matrix in pool order, on the host (no padding)."""
        row = self.row_of[episode_id]
        block = self.blocks.get(row)
        return block if block is not None else self.matrix[row, : int(self.lengths[row])].detach().cpu().numpy()


def _hash_multipliers(dim: int) -> np.ndarray:
    return np.random.default_rng(0x5EED).integers(1, 2**63, size=dim, dtype=np.uint64) | np.uint64(1)


def canonical_rows(block: np.ndarray, chunk_rows: int = 1 << 16, hashed_columns: int = 16) -> np.ndarray:
    """``canonical[i]`` = the first row of ``block`` equal to row i (bit for bit, -0.0 read as 0.0).

    Rows are hashed on a spread of ``hashed_columns`` columns (a random odd 64-bit multiplier per column over the
    float bits, wrapping sums), equal hashes are grouped with one 1-D sort, and every group is then verified on
    all columns, so a hash collision can never merge two different rows (a large group is split with
    ``np.unique``). Same result as ``np.unique(block, axis=0, return_index=True, return_inverse=True)`` (tested),
    without sorting the whole matrix: about a second at 1M × 384 instead of ~30 s, in bounded chunks.
    """
    n = len(block)
    canonical = np.arange(n, dtype=np.int64)
    if n < 2:
        return canonical
    bits = np.ascontiguousarray(block, dtype=np.float32)
    dim = bits.shape[1]
    columns = np.unique(np.linspace(0, dim - 1, min(dim, hashed_columns)).astype(np.int64))
    multipliers = _hash_multipliers(len(columns))
    hashes = np.empty(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, n, chunk_rows):
            part = (bits[start:start + chunk_rows, columns] + np.float32(0.0)).view(np.uint32)  # -0.0 → +0.0
            hashes[start:start + chunk_rows] = (part.astype(np.uint64) * multipliers).sum(axis=1, dtype=np.uint64)
    order = np.argsort(hashes, kind="stable")  # equal hashes stay in row order: a group's first is its lowest row
    sorted_hashes = hashes[order]
    boundaries = np.flatnonzero(np.diff(sorted_hashes)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [n]))
    multiple = ends - starts > 1
    for a, b in zip(starts[multiple].tolist(), ends[multiple].tolist()):
        members = order[a:b]  # ascending rows sharing a hash: verify on every column, split any collision
        rows = bits[members] + np.float32(0.0)
        if np.all(rows == rows[0]):
            canonical[members] = members[0]
            continue
        _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        canonical[members] = members[first[inverse.reshape(-1)]]
    return canonical


def build_index(episodes: Mapping[str, Episode], vectors: Mapping[str, np.ndarray], device: str = "cpu",
                dim: int | None = None, options: SearchOptions | None = None) -> EpisodeIndex:
    """``vectors[episode_id]`` is the ``(len(episode), d)`` unit-norm matrix in pool order.

    Several episodes are stacked into a padded tensor (what the benchmarks run on). A single episode is held as a
    view of its float32 array (no copy on the CPU), so a 1M × 768 episode costs its own 3 GB and no more."""
    import torch

    options = options or SearchOptions()
    ids = tuple(episodes)
    if dim is None:
        dim = next((v.shape[1] for v in vectors.values() if v.ndim == 2 and v.shape[0]), 0)
    for episode_id in ids:
        if len(vectors[episode_id]) != len(episodes[episode_id]):
            raise ValueError(f"episode {episode_id!r}: {len(vectors[episode_id])} vectors for "
                             f"{len(episodes[episode_id])} memories")
    longest = max((len(episodes[e]) for e in ids), default=0)
    blocks: dict[int, np.ndarray] = {}
    if len(ids) == 1 and longest > 0:
        block = np.ascontiguousarray(vectors[ids[0]], dtype=np.float32)
        if block.shape[1] != dim:
            raise ValueError(f"episode {ids[0]!r}: vectors of dimension {block.shape[1]}, expected {dim}")
        with warnings.catch_warnings():  # a read-only array (np.load mmap) is never written through this view
            warnings.simplefilter("ignore", UserWarning)
            matrix = torch.from_numpy(block).unsqueeze(0)  # a view: no padded copy of a single (large) episode
        blocks[0] = block
    else:
        matrix = torch.zeros((len(ids), max(longest, 1), dim), dtype=torch.float32)
        for row, episode_id in enumerate(ids):
            block = vectors[episode_id]
            if len(block):
                matrix[row, : len(block)] = torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32))
        host = matrix.numpy()
        for row, episode_id in enumerate(ids):
            blocks[row] = host[row, : len(episodes[episode_id])]  # views into the padded tensor
    lengths = torch.tensor([len(episodes[e]) for e in ids], dtype=torch.long)
    canonical = torch.arange(matrix.shape[1]).repeat(len(ids), 1)
    has_copy: dict[int, np.ndarray] = {}
    for row, episode_id in enumerate(ids):
        block = blocks[row]
        if len(block) > 1:
            first = canonical_rows(block)
            canonical[row, : len(block)] = torch.from_numpy(first)
            flag = first != np.arange(len(block))
            flag[first[flag]] = True  # the first copy has a copy too
            has_copy[row] = flag
    index = EpisodeIndex(ids, matrix.to(device), lengths.to(device), {e: i for i, e in enumerate(ids)},
                         canonical.to(device), episodes, options, blocks, has_copy)
    for row, block in blocks.items():  # a large episode's error-bound norm is part of its build, not its first search
        if len(block) >= options.faiss_min_memories:
            index._ann[("max_norm", row)] = _max_norm(block)
    return index


def _score_chunk(index: EpisodeIndex, queries: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Scores of each query against its episode's padded row, ``(c, L)``.

    Many queries per episode (LoCoMo: ~200) or few episodes (batch-1): one matmul per distinct episode, no
    copies. About one query per episode over many episodes (LongMemEval: a haystack per question): gather the
    episodes and run one batched matmul.
    """
    import torch

    distinct, inverse = torch.unique(rows, return_inverse=True)
    if len(distinct) * 4 <= len(rows) or len(distinct) <= 8:
        scores = torch.empty((len(rows), index.matrix.shape[1]), dtype=torch.float32, device=index.device)
        for slot, row in enumerate(distinct.tolist()):
            members = (inverse == slot).nonzero(as_tuple=True)[0]
            scores[members] = queries.index_select(0, members) @ index.matrix[row].T
        return scores
    return torch.bmm(index.matrix.index_select(0, rows), queries.unsqueeze(2)).squeeze(2)


@dataclass(frozen=True)
class Hits:
    """One query's result: pool positions and scores, best first (possibly shorter than asked)."""

    positions: np.ndarray  # int64
    scores: np.ndarray  # float32


def search(index: EpisodeIndex, query_vectors: np.ndarray | torch.Tensor, episode_ids: Sequence[str],
           k: int | None = None, min_sim: float | None = None,
           chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list[Hits]:
    """Rank each query's own episode. ``k=None`` returns every memory (a full permutation);
    ``min_sim`` keeps hits with ``score >= min_sim``. Never emits padding.

    Each query goes to the backend its episode gets under ``index.options`` (see the module docstring); the
    answers come back in query order."""
    import torch

    if len(episode_ids) != len(query_vectors):
        raise ValueError(f"{len(query_vectors)} query vectors for {len(episode_ids)} episode ids")
    large = _large_rows(index, k)
    if not large:
        return _search_torch(index, query_vectors, episode_ids, k, min_sim, chunk_bytes)
    host = (query_vectors.detach().cpu().numpy() if isinstance(query_vectors, torch.Tensor)
            else np.asarray(query_vectors))
    host = np.ascontiguousarray(host, dtype=np.float32)
    rows = [index.row_of[e] for e in episode_ids]
    out: list[Hits | None] = [None] * len(rows)
    small = [i for i, r in enumerate(rows) if r not in large]
    if small:
        for i, hit in zip(small, _search_torch(index, host[small], [episode_ids[i] for i in small], k, min_sim,
                                               chunk_bytes)):
            out[i] = hit
    by_row: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        if r in large:
            by_row.setdefault(r, []).append(i)
    for row, members in by_row.items():
        for i, hit in zip(members, _search_large(index, row, host[members], k, min_sim)):
            out[i] = hit
    return out  # type: ignore[return-value]


def _large_rows(index: EpisodeIndex, k: int | None) -> set[int]:
    """Rows searched by FAISS (exact or approximate) for this call; a full ranking (k=None) is always torch."""
    options = index.options
    if k is None or options.backend == "torch":
        return set()
    lengths = index.lengths.tolist()
    if options.backend == "faiss":
        return {r for r, n in enumerate(lengths) if n > 0}
    return {r for r, n in enumerate(lengths) if n >= options.faiss_min_memories}


def _search_torch(index: EpisodeIndex, query_vectors: np.ndarray | torch.Tensor, episode_ids: Sequence[str],
                  k: int | None, min_sim: float | None, chunk_bytes: int) -> list[Hits]:
    """The padded path: per chunk one matmul (per distinct episode, or batched), then a stable full sort."""
    import torch

    queries = torch.as_tensor(np.asarray(query_vectors, dtype=np.float32) if not isinstance(
        query_vectors, torch.Tensor) else query_vectors, device=index.device)
    rows = index.rows(episode_ids)
    n_episodes, width, dim = index.matrix.shape
    # A single episode is scored in place (no gathered copy): a chunk costs its (c, L) scores only.
    chunk = max(1, chunk_bytes // max(1, width * (4 if n_episodes == 1 else dim * 4)))
    positions_all = torch.arange(width, device=index.device)
    out: list[Hits] = []
    for start in range(0, len(queries), chunk):
        row_chunk = rows[start:start + chunk]
        scores = _score_chunk(index, queries[start:start + chunk], row_chunk)  # (c, L)
        if index.canonical is not None:
            scores = scores.gather(1, index.canonical.index_select(0, row_chunk))
        lengths = index.lengths.index_select(0, row_chunk)
        scores = scores.masked_fill(positions_all.unsqueeze(0) >= lengths.unsqueeze(1), float("-inf"))
        # Stable descending sort: equal scores keep ascending pool position (the tie rule).
        sorted_scores, order = torch.sort(scores, dim=1, descending=True, stable=True)
        take = width if k is None else min(k, width)
        sorted_scores, order = sorted_scores[:, :take].cpu().numpy(), order[:, :take].cpu().numpy()
        for i, length in enumerate(lengths.cpu().tolist()):
            n = min(length, take)
            pos, sc = order[i, :n], sorted_scores[i, :n]
            if min_sim is not None:
                keep = sc >= np.float32(min_sim)
                pos, sc = pos[keep], sc[keep]
            out.append(Hits(pos.astype(np.int64), sc.astype(np.float32)))
    return out


def error_bound(dim: int) -> float:
    """Bound on |float32 dot − exact dot| for unit vectors of dimension ``dim``, any summation order
    (γ_d = d·u / (1 − d·u), u = 2⁻²⁴), plus two float32 ulps at 1 for the final rounding."""
    u = 2.0 ** -24
    return dim * u / (1 - dim * u) + 2 * 2.0 ** -23


def _candidates(index: EpisodeIndex, row: int, queries: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, positions) of ``kk`` candidates per query, best first by the backend's own float32 scores."""
    import torch

    import faiss

    block = index.blocks[row]
    options = index.options
    if options.approximate:
        ann = index._ann.get(row)
        if ann is None:
            ann = index._ann[row] = _build_ann(block, options)
        return ann.search(queries, kk)
    if index.device.type == "cuda":
        if hasattr(faiss, "knn_gpu") and faiss.get_num_gpus() > 0:
            resources = index._ann.setdefault("gpu_resources", faiss.StandardGpuResources())  # type: ignore
            return faiss.knn_gpu(resources, queries, block, kk, metric=faiss.METRIC_INNER_PRODUCT)
        device_block = index.matrix[row, : len(block)]
        q = torch.from_numpy(queries).to(index.device)
        top = torch.topk(q @ device_block.T, kk, dim=1)  # partial selection on the device
        return top.values.cpu().numpy(), top.indices.cpu().numpy()
    return faiss.knn(queries, block, kk, metric=faiss.METRIC_INNER_PRODUCT)


def _build_ann(block: np.ndarray, options: SearchOptions):
    import faiss

    n, dim = block.shape
    if options.backend == "faiss_hnsw":
        ann = faiss.IndexHNSWFlat(dim, options.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        ann.hnsw.efConstruction = options.hnsw_ef_construction
        ann.add(block)
        ann.hnsw.efSearch = options.hnsw_ef_search
        return ann
    nlist = options.ivf_nlist or max(1, int(4 * math.sqrt(n)))
    quantizer = faiss.IndexFlatIP(dim)
    ann = faiss.IndexIVFFlat(quantizer, dim, min(nlist, n), faiss.METRIC_INNER_PRODUCT)
    sample = block[np.random.default_rng(0).choice(n, size=min(n, 256 * nlist), replace=False)] \
        if n > 256 * nlist else block
    ann.train(np.ascontiguousarray(sample))
    ann.add(block)
    ann.nprobe = options.ivf_nprobe
    return ann


def _finish(block: np.ndarray, source: np.ndarray, positions: np.ndarray, queries: np.ndarray,
            take: int) -> tuple[np.ndarray, np.ndarray]:
    """Rescore candidates (``positions``, each scored as row ``source``) in float64, round to float32 and keep
    the tie-rule top ``take`` per query: ``(m, c)`` arrays in, ``(m, ≤ take)`` positions and scores out."""
    exact = np.matmul(block[source].astype(np.float64), queries.astype(np.float64)[:, :, None])[..., 0]
    exact = exact.astype(np.float32)
    order = np.lexsort((positions, -exact.astype(np.float64)), axis=-1)[:, :take]
    return np.take_along_axis(positions, order, axis=1), np.take_along_axis(exact, order, axis=1)


def _max_norm(block: np.ndarray, chunk_rows: int = 1 << 16) -> float:
    """The largest row norm of an episode (what the float32 error bound scales with), in bounded chunks."""
    return max((float(np.sqrt(np.einsum("ij,ij->i", part, part).max(initial=0.0)))
                for part in (block[s:s + chunk_rows] for s in range(0, len(block), chunk_rows))), default=0.0)


def _search_large(index: EpisodeIndex, row: int, queries: np.ndarray, k: int,
                  min_sim: float | None, batch: int = 256) -> list[Hits]:
    """Top-k of one large episode by partial selection, then the tie rule on the candidates (see module doc)."""
    block = index.blocks[row]
    length, dim = block.shape
    canonical = index.canonical[row, :length].cpu().numpy() if index.canonical is not None else None
    has_copy = index.has_copy.get(row)
    take = min(k, length)
    x_norm = index._ann.get(("max_norm", row))
    if x_norm is None:
        x_norm = index._ann[("max_norm", row)] = _max_norm(block)
    bounds = error_bound(dim) * np.linalg.norm(queries.astype(np.float64), axis=1) * max(x_norm, 1e-30)
    approximate = index.options.approximate
    out: list[Hits | None] = [None] * len(queries)
    pending = np.arange(len(queries))
    kk = min(length, take + index.options.margin)
    while len(pending):
        retry: list[int] = []
        # one candidate call for every pending query (FAISS blocks queries itself: one pass over the episode per
        # 4,096 queries), then the rescoring in batches (a (batch, kk, d) float64 gather at a time)
        all_scores, all_cands = _candidates(index, row, queries[pending], kk)
        for begin in range(0, len(pending), batch):
            part = pending[begin:begin + batch]
            scores, cands = all_scores[begin:begin + batch], all_cands[begin:begin + batch]
            plain = np.ones(len(part), dtype=bool) if has_copy is None else ~has_copy[np.maximum(cands, 0)].any(1)
            plain &= (cands >= 0).all(axis=1)  # an approximate index pads with -1
            finished: dict[int, tuple[np.ndarray, np.ndarray]] = {}
            if plain.any():
                positions, top = _finish(block, cands[plain], cands[plain], queries[part[plain]], take)
                finished.update({int(s): (positions[j], top[j]) for j, s in enumerate(np.flatnonzero(plain))})
            for slot in np.flatnonzero(~plain).tolist():  # duplicates among the candidates, or padding
                found = cands[slot][cands[slot] >= 0]
                if has_copy is not None and canonical is not None and has_copy[found].any():
                    found = np.union1d(found, np.flatnonzero(np.isin(canonical, canonical[found[has_copy[found]]])))
                source = canonical[found] if canonical is not None else found
                positions, top = _finish(block, source[None, :], found[None, :], queries[part[slot]][None, :], take)
                finished[slot] = (positions[0], top[0])
            for slot, (positions, top) in finished.items():
                qi = int(part[slot])
                # provably the top-k: whatever FAISS left out scored at most its kk-th score (≤ the bound away)
                if not (approximate or kk >= length or
                        (len(top) == take and float(scores[slot, kk - 1]) + bounds[qi] < float(top[-1]))):
                    retry.append(qi)
                    continue
                if min_sim is not None:
                    keep = top >= np.float32(min_sim)
                    positions, top = positions[keep], top[keep]
                out[qi] = Hits(positions.astype(np.int64), top.astype(np.float32))
        pending = np.array(retry, dtype=np.int64)
        kk = min(length, max(kk * 4, kk + 1))
    return out  # type: ignore[return-value]


def approximate_recall(index: EpisodeIndex, query_vectors: np.ndarray, episode_ids: Sequence[str],
                       k: int = 10) -> dict[str, Any]:
    """recall@k of the index's approximate backend against exact search, same queries, same index:
    mean over queries of |approximate top-k ∩ exact top-k| / |exact top-k| (1.0 for an exact backend)."""
    from dataclasses import replace

    approx = search(index, query_vectors, episode_ids, k=k)
    exact_index = replace(index, options=replace(index.options, backend="faiss"), _ann={})
    exact = search(exact_index, query_vectors, episode_ids, k=k)
    values = [len(set(a.positions.tolist()) & set(e.positions.tolist())) / len(e.positions)
              for a, e in zip(approx, exact) if len(e.positions)]
    return {"backend": index.options.backend, "k": k, "n_queries": len(values),
            "recall_at_k": float(np.mean(values)) if values else None,
            "identical_lists": float(np.mean([a.positions.tolist() == e.positions.tolist()
                                              for a, e in zip(approx, exact)])) if len(exact) else None}
