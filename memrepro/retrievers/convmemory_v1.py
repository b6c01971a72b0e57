"""ConvMemory v1 as a retriever (docs/retrievers.md#convmemory-v1, docs/protocols.md#locomo-protocol): the raw-dense
pool of ``min(500, N)`` turns reordered by ``0.025·z(raw) + 0.975·z(CE-lite)``, every other turn after it in raw dense
order, so the output is a full permutation of the conversation.

The model is one per split seed (``V1Models``: found by recipe hash or trained on demand on that seed's dev
conversations). Pool order and ties: the pool is the dense ranking's head (project tie rule); equal fused scores
keep pool order (a stable sort; the official code's ``np.argsort`` leaves them open). Scores in the output: the
fused score for the pool, the raw cosine for the tail (the order is native, scores are informative only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Sequence

import numpy as np

from memrepro.artifacts.per_seed import PerSeedArtifact, TrainingContext
from memrepro.models.convmemory_v1_shape import WINDOW_MODES
from memrepro.retrievers.base import RetrievalInput, Retrieved, RetrieverBase
from memrepro.search import EpisodeIndex, Hits, search
from memrepro.types import Split

if TYPE_CHECKING:  # the model is a torch module: imported when a split's model is used, not to build the retriever
    from memrepro.models.convmemory_v1 import ConvMemoryV1, QueryInputs, WindowMode


def v1_rerank(model: ConvMemoryV1, inputs: QueryInputs, dense: Hits, window_mode: WindowMode) -> Hits:
    """Reorder the pool (``inputs.candidates`` = the head of ``dense``) and append the dense tail unchanged."""
    from memrepro.models.convmemory_v1 import ce_lite_scores, fuse

    pool = inputs.candidates
    if len(pool) == 0:
        return dense
    fused = fuse(inputs.raw_scores[pool], ce_lite_scores(model, inputs, window_mode), model.architecture.raw_weight)
    order = np.argsort(-fused.astype(np.float64), kind="stable")
    return Hits(np.concatenate([pool[order], dense.positions[len(pool):]]),
                np.concatenate([fused[order], dense.scores[len(pool):]]).astype(np.float32))


class ConvMemoryV1Retriever(RetrieverBase):
    ALGORITHM_VERSION = 1  # bump when a change alters its rankings: its old runs get new ids (runs/identity.py)
    name = "convmemory_v1"
    order: Literal["score", "native"] = "native"
    timed_region = "dense pool + window encoder + CE-lite head + merge (query vector given)"
    # measured: ranking LoCoMo dev questions in batches of 64 (pool 500, candidate-local windows), as a
    # cross-encoder's record building does, on a 2-core CPU: 62 s for seed 11's 842 (0.074 s a question) idle,
    # 136 s for seed 7's 1,039 (0.13 s) beside a test run; the training plan forecasts record building with it
    SECONDS_PER_QUERY = 0.1

    def __init__(self, model: PerSeedArtifact, window_mode: WindowMode = "candidate_local") -> None:
        if window_mode not in WINDOW_MODES:
            raise ValueError(f"convmemory_v1: window_mode must be one of {', '.join(WINDOW_MODES)}, got "
                             f"{window_mode!r}")
        self.models, self.window_mode = model, window_mode
        self.model: ConvMemoryV1 | None = None
        self._episode_cache: dict[str, tuple[np.ndarray, list[str]]] = {}

    def bind_training(self, context: TrainingContext) -> None:
        """The model resolver may train on the context's dev gold; retrieval never reads it."""
        self.models.bind(context)

    def for_split(self, split: Split) -> None:
        self.model = self.models(split)

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]:
        from memrepro.models.convmemory_v1 import QueryInputs

        if self.model is None:
            raise RuntimeError("convmemory_v1: no model for this split (call for_split first)")
        if index.episodes is None:
            raise ValueError("convmemory_v1 needs memory texts: build the index with its episodes")
        dense = search(index, query_vectors, [q.episode_id for q in queries])  # full ranking, tie rule
        pool = self.model.architecture.pool
        out = []
        for query, vector, hits in zip(queries, np.asarray(query_vectors, dtype=np.float32), dense):
            memories, texts = self._episode(index, query.episode_id)
            inputs = QueryInputs(query.text, vector, memories, texts, hits.positions[:pool], memories @ vector)
            out.append(Retrieved(v1_rerank(self.model, inputs, hits, self.window_mode), {"pool": len(inputs.candidates)}))
        return out

    def _episode(self, index: EpisodeIndex, episode_id: str) -> tuple[np.ndarray, list[str]]:
        if episode_id not in self._episode_cache:
            self._episode_cache[episode_id] = (index.vectors(episode_id),
                                               [m.text for m in index.episodes[episode_id].memories])
        return self._episode_cache[episode_id]

    def artifact_identity(self) -> dict:
        """What a model trained on this stage's output depends on (stable across splits, unlike describe())."""
        m = self.models
        source = (f"published:{m.published}" if m.published else f"path:{m.path}" if m.path
                  else f"recipe:{m.identity_hash()}")
        return {"name": self.name, "window_mode": self.window_mode, "model": source}

    def describe(self) -> dict:
        out = {"name": self.name, "window_mode": self.window_mode, "model": self.models.label,
               "recipe": self.models.recipe_identity()["recipe"] if self.models.context else None}
        if self.models.context is not None and not (self.models.path or self.models.published):
            out["recipe_hash"] = self.models.identity_hash()
        if self.models.resolved:
            out["resolved"] = dict(self.models.resolved)
        if self.models.trained_on:
            out["trained_on"] = dict(self.models.trained_on)  # split -> the conversations its model saw
        return out
