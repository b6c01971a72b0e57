"""Freeze every retriever output into one ranked list, once, before any metric sees it.

Metric libraries break ties differently (trec_eval by doc id descending, ir-measures' ``RR@k`` ascending), so
metrics only ever receive a rank order, encoded as scores ``n - rank`` with no ties.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memrepro.search import Hits
from memrepro.types import Episode

TIE_RULE = "score descending, then episode pool position ascending (stable); native-order retrievers keep their order"


@dataclass(frozen=True)
class FrozenRanking:
    query_id: str
    memory_ids: tuple[str, ...]
    scores: tuple[float, ...]

    def ranks_of(self, ids: tuple[str, ...]) -> dict[str, int | None]:
        """1-based rank of each id, ``None`` when not returned."""
        out: dict[str, int | None] = {}
        for memory_id in ids:  # a frozen ranking never repeats an id: the first match is the only one
            try:
                out[memory_id] = self.memory_ids.index(memory_id) + 1
            except ValueError:
                out[memory_id] = None
        return out

    @classmethod
    def from_gold_ranks(cls, query_id: str, gold_ranks: dict[str, int | None], n_returned: int) -> FrozenRanking:
        """A stand-in ranking with each gold id at its stored rank and fillers elsewhere.

        Every memrepro metric depends only on where gold items sit (and on the gold list), so metrics computed on
        this equal the original's: results can be re-scored from ``queries.jsonl`` without rerunning.
        """
        slots: list[str] = [f"<not gold #{i}>" for i in range(n_returned)]
        for memory_id, rank in gold_ranks.items():
            if rank is not None:
                slots[rank - 1] = memory_id
        return cls(query_id, tuple(slots), tuple(float(n_returned - i) for i in range(n_returned)))


def freeze(query_id: str, hits: Hits, episode: Episode, order: str = "score") -> FrozenRanking:
    positions, scores = np.asarray(hits.positions, dtype=np.int64), np.asarray(hits.scores, dtype=np.float32)
    if len(positions) and (positions.min() < 0 or positions.max() >= len(episode)):
        raise ValueError(f"query {query_id!r}: retriever returned a position outside episode {episode.id!r}")
    if len(np.unique(positions)) != len(positions):
        raise ValueError(f"query {query_id!r}: retriever returned a memory twice")
    if np.isnan(scores).any():
        raise ValueError(f"query {query_id!r}: NaN score in a ranking")
    if order == "score":
        keep = np.lexsort((positions, -scores.astype(np.float64)))
        positions, scores = positions[keep], scores[keep]
    elif order != "native":
        raise ValueError(f"unknown ranking order {order!r}")
    memories = episode.memories
    return FrozenRanking(query_id, tuple(memories[p].id for p in positions), tuple(float(s) for s in scores))
