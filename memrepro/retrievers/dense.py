"""Dense retrieval ("Familiarity" in RF-Mem): exact cosine over the query's episode.

``mode="full"`` ranks every memory (ConvMemory's raw dense baseline); ``mode="topk"`` returns the ``k`` best
with a similarity floor, possibly fewer (RF-Mem's protocol). See docs/retrievers.md#dense.
"""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np

from memrepro.retrievers.base import RetrievalInput, Retrieved, RetrieverBase
from memrepro.search import DEFAULT_CHUNK_BYTES, EpisodeIndex, search
from memrepro.parameters import validate_arguments
from memrepro.retrievers.schemas import DenseRetrieverConfig


class DenseRetriever(RetrieverBase):
    ALGORITHM_VERSION = 1  # bump when a change alters its rankings: its old runs get new ids (runs/identity.py)
    order: Literal["score", "native"] = "score"

    def __init__(self, mode: Literal["full", "topk"] = "full", k: int | None = None,
                 min_sim: float | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES, name: str = "dense") -> None:
        # checked as the config node is (memrepro.parameters): the same values refused, with the same message
        validate_arguments(DenseRetrieverConfig, {"mode": mode, "k": k, "min_sim": min_sim, "chunk_bytes": chunk_bytes,
                                                  "name": name})
        self.name = name  # "familiarity" when it stands for RF-Mem's Familiarity path
        self.mode, self.k, self.min_sim, self.chunk_bytes = mode, k, min_sim, chunk_bytes

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]:
        hits = search(index, query_vectors, [q.episode_id for q in queries],
                      k=None if self.mode == "full" else self.k,
                      min_sim=None if self.mode == "full" else self.min_sim, chunk_bytes=self.chunk_bytes)
        return [Retrieved(h) for h in hits]

    def describe(self) -> dict:
        return {"name": self.name, "mode": self.mode, "k": self.k, "min_sim": self.min_sim}
