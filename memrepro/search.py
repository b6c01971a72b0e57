"""Exact cosine search scoped to each query's episode, batched over queries.

Episodes are stacked into one padded ``(E, L, d)`` tensor; a chunk of queries gathers its episodes' matrices and
scores them with one batched matmul, so a GPU runs each chunk as a single kernel and the CPU path stays
vectorised. Each row is then sorted by the project tie rule (score descending, pool position ascending) with a
stable sort, so top-K truncation never depends on how a library breaks ties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch

from memrepro.types import Episode

DEFAULT_CHUNK_BYTES = 256 << 20


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

    @property
    def device(self) -> torch.device:
        return self.matrix.device

    def rows(self, episode_ids: Sequence[str]) -> torch.Tensor:
        return torch.tensor([self.row_of[e] for e in episode_ids], dtype=torch.long, device=self.device)

    def vectors(self, episode_id: str) -> np.ndarray:
        """One episode's ``(len, d)`` float32 matrix in pool order, on the host (no padding)."""
        row = self.row_of[episode_id]
        return self.matrix[row, : int(self.lengths[row])].detach().cpu().numpy()


def build_index(episodes: Mapping[str, Episode], vectors: Mapping[str, np.ndarray], device: str = "cpu",
                dim: int | None = None) -> EpisodeIndex:
    """``vectors[episode_id]`` is the ``(len(episode), d)`` unit-norm matrix in pool order."""
    ids = tuple(episodes)
    if dim is None:
        dim = next((v.shape[1] for v in vectors.values() if v.ndim == 2 and v.shape[0]), 0)
    longest = max((len(episodes[e]) for e in ids), default=0)
    matrix = torch.zeros((len(ids), max(longest, 1), dim), dtype=torch.float32)
    for row, episode_id in enumerate(ids):
        block = vectors[episode_id]
        if len(block) != len(episodes[episode_id]):
            raise ValueError(f"episode {episode_id!r}: {len(block)} vectors for {len(episodes[episode_id])} memories")
        if len(block):
            matrix[row, : len(block)] = torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32))
    lengths = torch.tensor([len(episodes[e]) for e in ids], dtype=torch.long)
    canonical = torch.arange(matrix.shape[1]).repeat(len(ids), 1)
    for row, episode_id in enumerate(ids):
        block = np.ascontiguousarray(vectors[episode_id], dtype=np.float32)
        if len(block) > 1:
            _, first, inverse = np.unique(block, axis=0, return_index=True, return_inverse=True)
            canonical[row, : len(block)] = torch.from_numpy(first[inverse.reshape(-1)].astype(np.int64))
    return EpisodeIndex(ids, matrix.to(device), lengths.to(device), {e: i for i, e in enumerate(ids)},
                        canonical.to(device), episodes)


def _score_chunk(index: EpisodeIndex, queries: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Scores of each query against its episode's padded row, ``(c, L)``.

    Many queries per episode (LoCoMo: ~200) or few episodes (batch-1): one matmul per distinct episode, no
    copies. About one query per episode over many episodes (LongMemEval: a haystack per question): gather the
    episodes and run one batched matmul.
    """
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
    ``min_sim`` keeps hits with ``score >= min_sim``. Never emits padding."""
    queries = torch.as_tensor(np.asarray(query_vectors, dtype=np.float32) if not isinstance(
        query_vectors, torch.Tensor) else query_vectors, device=index.device)
    if len(episode_ids) != len(queries):
        raise ValueError(f"{len(queries)} query vectors for {len(episode_ids)} episode ids")
    rows = index.rows(episode_ids)
    _, width, dim = index.matrix.shape
    chunk = max(1, chunk_bytes // max(1, width * dim * 4))
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
