"""ConvMemory v2's recall-preserving cascade: a first stage, its top ``protected`` items rescored by a cross-encoder
with the v2 input format, the unchanged tail appended (docs/retrievers.md#cascade).

The top-``protected`` *set* equals the first stage's by construction (asserted at run time), so Recall@10 and
Hit@10 are the first stage's. The inference contract: a candidate carrying any forbidden field is refused
before anything is scored.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np

from memrepro.artifacts.per_seed import PerSeedArtifact, TrainingContext
from memrepro.models.cross_encoder import CrossEncoderScorer
from memrepro.retrievers.arms import ARMS, RANDOM_ARMS
from memrepro.retrievers.base import RetrievalInput, Retrieved, RetrieverBase
from memrepro.search import EpisodeIndex, Hits
from memrepro.types import Memory, Split

FORBIDDEN_FIELDS = frozenset({
    "answer", "answer_text", "ce_score", "entity_id", "gold", "gold_ids", "gpt_label", "is_current", "is_latest",
    "is_stale", "mxbai_score", "slot_id", "stale", "teacher_score",
})


def check_candidates(candidates: Sequence[Mapping[str, Any]]) -> None:
    """The v2 contract: forbidden fields first (alphabetically first one named), then ``id`` and ``text``."""
    for candidate in candidates:
        present = sorted(FORBIDDEN_FIELDS & set(candidate))
        if present:
            raise ValueError(f"field '{present[0]}' is not allowed at inference")
        if "id" not in candidate:
            raise ValueError("candidate must contain an 'id' field")
        if "text" not in candidate:
            raise ValueError("candidate must contain a 'text' field")


def memory_position(memory: Memory, fallback: int) -> float:
    """v2's MEMORY_TIME: the memory's turn as its dataset numbers it (``Memory.turn``), else its rank in the list."""
    return float(memory.turn) if memory.turn is not None else float(fallback)


def as_candidate(memory: Memory, rank: int) -> dict[str, Any]:
    """What the cross-encoder may see of a memory at ``rank`` of the first stage's list (inference and training)."""
    return {"id": memory.id, "text": memory.text, "position": memory_position(memory, rank)}


def v2_pairs(query: str, candidates: Sequence[Mapping[str, Any]], arm: str = "full_text",
             texts: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """``QUERY_TIME: {qt}. {query}`` / ``MEMORY_TIME: {position}. {text}``, qt = max candidate position.

    ``texts`` replaces the candidates' texts (the corrupted-text arms); ``scalar_only`` keeps time and rank only.
    """
    positions = [float(c["position"]) for c in candidates]
    query_time = max(positions) if positions else 0.0
    bodies = list(texts) if texts is not None else [str(c["text"]) for c in candidates]
    if arm == "scalar_only":
        return [(f"QUERY_TIME: {query_time:.0f}.", f"MEMORY_TIME: {p:.0f}. RANK: {rank}.")
                for rank, p in enumerate(positions, start=1)]
    if arm == "no_memory_text":
        bodies = [""] * len(candidates)
    left = f"QUERY_TIME: {query_time:.0f}. {query}"
    return [(left, f"MEMORY_TIME: {p:.0f}. {body}") for p, body in zip(positions, bodies)]


def derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A permutation with no fixed point (identity for n < 2): every candidate gets another's text."""
    if n < 2:
        return np.arange(n)
    while True:
        order = rng.permutation(n)
        if not np.any(order == np.arange(n)):
            return order


def arm_rng(arm_seed: int, query_id: str) -> np.random.Generator:
    """One generator per (seed, question): a corrupted arm ranks the same whatever the batch size, the batch's
    other questions or a resume (``hash()`` is salted per process, so the key is a sha256)."""
    digest = hashlib.sha256(f"{arm_seed}\0{query_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def corrupt_texts(arm: str, query_id: str, candidates: Sequence[Mapping[str, Any]],
                  donors: Sequence[str], arm_seed: int) -> list[str] | None:
    """The replacement texts of a corrupted-text arm (None: the arm keeps the texts), shared by inference and
    training. ``shuffled_memory_text``: a seeded derangement of the candidates' own texts.
    ``random_other_query_text``: each text drawn from ``donors``, the memories of the split's *other*
    conversations (so never the question's own evidence), instead of another question's top 10, which would depend
    on which questions share a batch."""
    if arm == "shuffled_memory_text":
        order = derangement(len(candidates), arm_rng(arm_seed, query_id))
        return [str(candidates[j]["text"]) for j in order]
    if arm == "random_other_query_text":
        if not donors:
            raise ValueError(f"arm random_other_query_text: question {query_id} has no other conversation to draw "
                             f"texts from (the split needs at least two conversations)")
        rng = arm_rng(arm_seed, query_id)
        return [donors[int(i)] for i in rng.integers(len(donors), size=len(candidates))]
    return None


class DonorTexts:
    """The texts ``random_other_query_text`` draws from: every memory of the pool's conversations except the
    question's own, in episode order (cached per conversation)."""

    def __init__(self, texts_by_episode: Mapping[str, Sequence[str]]) -> None:
        self.texts_by_episode = dict(texts_by_episode)
        self._cache: dict[str, list[str]] = {}

    def excluding(self, episode_id: str) -> list[str]:
        if episode_id not in self._cache:
            self._cache[episode_id] = [t for e, texts in self.texts_by_episode.items() if e != episode_id
                                       for t in texts]
        return self._cache[episode_id]


def protected_rerank(positions: np.ndarray, first_scores: np.ndarray, ce_scores: np.ndarray,
                     protected: int) -> Hits:
    """Stable sort of the protected prefix by CE score (ties keep first-stage order), tail unchanged."""
    n = min(protected, len(positions))
    order = np.argsort(-ce_scores[:n].astype(np.float64), kind="stable")
    head = positions[:n][order]
    if set(head.tolist()) != set(positions[:n].tolist()):  # pragma: no cover - guarded by construction
        raise AssertionError("cascade changed the protected top set")
    return Hits(np.concatenate([head, positions[n:]]),
                np.concatenate([ce_scores[:n][order], first_scores[n:]]).astype(np.float32))


class CrossEncoderStage(RetrieverBase):
    """A retriever's first stage and cross-encoder. The cross-encoder is one scorer, or one per split seed
    (``TrainedCrossEncoders``: found by recipe hash or trained on demand on that split's dev conversations),
    chosen by the runner's ``for_split``; a first stage with its own trained models (v1) is resolved there too."""

    first_stage: RetrieverBase

    def _set_cross_encoder(self, cross_encoder: CrossEncoderScorer | Callable[[Split], Any]) -> None:
        self._scorer_for = cross_encoder if callable(cross_encoder) and not isinstance(
            cross_encoder, CrossEncoderScorer) else None
        self.scorer = None if self._scorer_for else cross_encoder
        use_first_stage = getattr(self._scorer_for, "use_first_stage", None)
        if use_first_stage is not None and self.first_stage is not None:
            use_first_stage(self.first_stage)  # training records come from the stage it will rescore

    def bind_training(self, context: TrainingContext) -> None:
        """Hand the training context (dev gold, vectors) to the model resolvers; the retriever itself never
        reads it."""
        self.first_stage.bind_training(context)
        if isinstance(self._scorer_for, PerSeedArtifact):
            self._scorer_for.bind(context)

    def for_split(self, split: Split) -> None:
        self.first_stage.for_split(split)
        if self._scorer_for is not None:
            self.scorer = self._scorer_for(split)

    @property
    def cross_encoders(self) -> Any:
        """The per-split resolver (e.g. ``TrainedCrossEncoders``), None when one fixed scorer was given."""
        return self._scorer_for

    def cross_encoder_trained_on(self) -> dict:
        """``{"cross_encoder_trained_on": {split: conversations}}`` when the per-split resolver knows what each
        split's model saw (for ``describe()``), else ``{}``."""
        seen = getattr(self._scorer_for, "trained_on", None)
        return {"cross_encoder_trained_on": dict(seen)} if seen else {}

    @property
    def cross_encoder_label(self) -> str:
        """The loaded scorer's label (after the last ``for_split``, the last split's model), else "per-split"."""
        return getattr(self.scorer, "label", "per-split")

    def _check_ready(self, index: EpisodeIndex) -> None:
        if self.scorer is None:
            raise RuntimeError(f"{self.name}: no cross-encoder for this split (call for_split first)")
        if index.episodes is None:
            raise ValueError(f"{self.name} needs memory texts: build the index with its episodes")


class CascadeRetriever(CrossEncoderStage):
    # bump when a change alters its rankings: its old runs get new ids (runs/identity.py).
    # 2: corrupted-text arms seeded per question, donors from the split
    ALGORITHM_VERSION = 2

    @classmethod
    def algorithm_version(cls, config: Mapping[str, Any]) -> int:
        """Version 2 changed only the two random arms: full text and the deterministic arms rank as in 1."""
        return cls.ALGORITHM_VERSION if config.get("arm") in RANDOM_ARMS else 1
    name = "cascade"
    order: Literal["score", "native"] = "native"

    def __init__(self, first_stage: RetrieverBase, cross_encoder: CrossEncoderScorer | Callable[[Split], Any],
                 protected: int = 10, arm: str = "full_text", arm_seed: int = 0) -> None:
        if arm not in ARMS:
            raise ValueError(f"cascade arm must be one of {ARMS}, got {arm!r}")
        self.first_stage, self.protected, self.arm, self.arm_seed = first_stage, protected, arm, arm_seed
        self._split_episodes: tuple[str, ...] = ()
        self._donor_pool: tuple[tuple[str, ...], DonorTexts] | None = None
        self._set_cross_encoder(cross_encoder)
        if getattr(getattr(self._scorer_for, "recipe", None), "pair_format", "v2") != "v2":
            raise ValueError("retriever=cascade scores v2 pairs, but cross_encoder.recipe.pair_format is plain (the "
                             "full pool's format): drop the override or use retriever=fullpool_trained")
        if hasattr(self._scorer_for, "use_arm"):
            self._scorer_for.use_arm(arm)

    def for_split(self, split: Split) -> None:
        super().for_split(split)
        self._split_episodes = tuple(split.test_episode_ids)  # the donor pool of random_other_query_text

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]:
        self._check_ready(index)
        first = self.first_stage.retrieve(queries, query_vectors, index)
        prefixes = [self._candidates(q, r.hits, index) for q, r in zip(queries, first)]
        pairs: list[tuple[str, str]] = []
        spans = []
        for query, candidates in zip(queries, prefixes):
            check_candidates(candidates)  # the contract holds before anything is scored
            donors = (self._donors(index).excluding(query.episode_id) if self.arm == "random_other_query_text"
                      else ())
            texts = corrupt_texts(self.arm, query.query_id, candidates, donors, self.arm_seed)
            spans.append((len(pairs), len(pairs) + len(candidates)))
            pairs += v2_pairs(query.text, candidates, self.arm, texts)
        start = time.perf_counter()
        scores = self.scorer.score(pairs)  # one call for the whole batch: the CE batches across queries
        rerank_ms = 1000.0 * (time.perf_counter() - start) / max(1, len(queries))
        out = []
        for (a, b), result, candidates in zip(spans, first, prefixes):
            hits = protected_rerank(result.hits.positions, result.hits.scores, scores[a:b], self.protected)
            out.append(Retrieved(hits, {"rerank_ms_amortized": rerank_ms, "protected": len(candidates),
                                        "first_stage_top": [c["id"] for c in candidates]}))
        return out

    def _candidates(self, query: RetrievalInput, hits: Hits, index: EpisodeIndex) -> list[dict[str, Any]]:
        memories = index.episodes[query.episode_id].memories
        head = hits.positions[: self.protected]
        return [as_candidate(memories[p], rank) for rank, p in enumerate(head.tolist())]

    def _donors(self, index: EpisodeIndex) -> DonorTexts:
        """The split's test conversations (all of the index's when no split was given)."""
        episodes = self._split_episodes or tuple(index.episodes)
        if self._donor_pool is None or self._donor_pool[0] != episodes:
            self._donor_pool = (episodes, DonorTexts({e: [m.text for m in index.episodes[e].memories]
                                                      for e in episodes if e in index.episodes}))
        return self._donor_pool[1]

    @property
    def timed_region(self) -> str:
        return f"first stage + cross-encoder rerank of the top {self.protected} (query vector given)"

    def describe(self) -> dict:
        return {"name": self.name, "first_stage": self.first_stage.describe(), "protected": self.protected,
                "arm": self.arm, "arm_seed": self.arm_seed,
                "cross_encoder": self.cross_encoder_label, **self.cross_encoder_trained_on()}
