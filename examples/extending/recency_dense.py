"""Dense cosine plus a recency bonus: later memories of an episode rank a little higher."""

import numpy as np

from memrepro.retrievers.base import Retrieved, RetrieverBase
from memrepro.search import Hits, search


class RecencyDense(RetrieverBase):
    ALGORITHM_VERSION = 1  # bump after a change that alters rankings: its stale runs then recompute
    order = "score"  # memrepro sorts by score; ties go by pool position

    def __init__(self, weight: float = 0.1, name: str = "recency_dense") -> None:
        if weight < 0:
            raise ValueError(f"weight must be >= 0, got {weight}")
        self.weight, self.name = weight, name

    def retrieve(self, queries, query_vectors, index):
        episodes = [q.episode_id for q in queries]
        results = []
        for episode_id, hits in zip(episodes, search(index, query_vectors, episodes)):  # every memory, by cosine
            last = max(1, len(index.episodes[episode_id].memories) - 1)
            bonus = self.weight * hits.positions / last  # 0 for the first memory, weight for the last
            results.append(Retrieved(Hits(hits.positions, (hits.scores + bonus).astype(np.float32))))
        return results

    def describe(self):
        return {"name": self.name, "weight": self.weight}
