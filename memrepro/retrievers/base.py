"""The retriever protocol. Nothing but query text, query vector and episode reaches a retriever: no gold."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, Sequence

import numpy as np

from memrepro.search import EpisodeIndex, Hits


@dataclass(frozen=True)
class RetrievalInput:
    """What a retriever may see of a query."""

    query_id: str
    text: str
    episode_id: str


@dataclass(frozen=True)
class Retrieved:
    hits: Hits
    trace: dict = field(default_factory=dict)


class Retriever(Protocol):
    name: str
    # Optional: ALGORITHM_VERSION (an int class attribute). The run id hashes it, so bumping it after a change
    # that alters rankings makes every stale run of the retriever recompute instead of being reused.
    # "score": the output is ranked by score and gets the tie rule; "native": the algorithm's own order is kept.
    order: Literal["score", "native"]

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]: ...

    def describe(self) -> dict: ...
