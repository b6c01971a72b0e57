"""The full-pool cross-encoder baseline (docs/retrievers.md#full-pool): the first stage's top ``pool``
(raw dense top-500 in ConvMemory's table) reranked with plain ``(query, memory text)`` pairs, the rest appended
in first-stage order. Ties in the CE score keep first-stage order (the original's NumPy argsort left them open)."""

from __future__ import annotations

import time
from typing import Any, Callable, Literal, Sequence

import numpy as np

from memrepro.models.cross_encoder import CrossEncoderScorer
from memrepro.retrievers.base import RetrievalInput, Retrieved, RetrieverBase
from memrepro.retrievers.cascade import CrossEncoderStage, protected_rerank
from memrepro.search import EpisodeIndex
from memrepro.types import Split


class FullPoolRetriever(CrossEncoderStage):
    ALGORITHM_VERSION = 1  # bump when a change alters its rankings: its old runs get new ids (runs/identity.py)
    name = "fullpool"
    order: Literal["score", "native"] = "native"
    timed_region = "first stage + cross-encoder rerank of the pool (query vector given)"

    def __init__(self, first_stage: RetrieverBase, cross_encoder: CrossEncoderScorer | Callable[[Split], Any],
                 pool: int = 500) -> None:
        self.first_stage, self.pool = first_stage, pool
        self._set_cross_encoder(cross_encoder)

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]:
        self._check_ready(index)
        out = []
        for query, result in zip(queries, self.first_stage.retrieve(queries, query_vectors, index)):
            memories = index.episodes[query.episode_id].memories
            head = result.hits.positions[: self.pool].tolist()
            start = time.perf_counter()
            ce = self.scorer.score([(query.text, memories[p].text) for p in head])
            rerank_ms = 1000.0 * (time.perf_counter() - start)
            out.append(Retrieved(protected_rerank(result.hits.positions, result.hits.scores, ce, self.pool),
                                 {"rerank_ms": rerank_ms, "pool": len(head)}))
        return out

    def describe(self) -> dict:
        return {"name": self.name, "first_stage": self.first_stage.describe(), "pool": self.pool,
                "cross_encoder": self.cross_encoder_label, **self.cross_encoder_trained_on()}
