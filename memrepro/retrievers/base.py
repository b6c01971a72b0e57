"""The retriever Protocol and its lifecycle. Nothing but query text, query vector and episode reaches a retriever
at retrieval time: no gold."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from memrepro.search import EpisodeIndex, Hits

if TYPE_CHECKING:
    from memrepro.artifacts.per_seed import TrainingContext
    from memrepro.types import Split


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


# What one query's result may be: ranked memory ids, (memory_id, score) pairs, or memrepro's own Retrieved/Hits.
Ranked = Sequence[str] | Sequence[tuple[str, float]] | Retrieved | Hits


@runtime_checkable
class Retriever(Protocol):
    """A memory retriever memrepro can score.

    ``retrieve`` gets a batch of queries (``query_id``, ``text``, ``episode_id``; never gold), their unit-norm
    vectors from the configured encoder (ignore them if you do not need them), and the index: for each episode
    ``index.episodes[episode_id].memories`` (``id``, ``text``, ``position``, ``session``, ``speaker``, ``time``)
    and the memory vectors. Return one ranked result per query, best first, over that query's episode only.

    Optional: ``name`` (results folder), ``uses_vectors = False`` (nothing is encoded; ``query_vectors`` and the
    index vectors are then placeholders), ``order`` (``"score"``: ties broken by pool position, the default;
    ``"native"``: your order is kept), ``for_split(split)`` (called before each split's queries),
    ``prepare(index)`` (called once before the timed pass), ``timed_region`` (what the latency figures time),
    ``describe() -> dict`` (stored in the run's provenance), ``ALGORITHM_VERSION`` (hashed into the run id).
    :class:`RetrieverBase` declares each with its default and the order the runner calls them in; subclass it, or
    give any object a ``retrieve``: the adapter ``memrepro.retrievers.external.ExternalRetriever`` takes the optional
    members it has and checks what it returns.
    """

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> Sequence[Ranked]: ...


class RetrieverBase(ABC):
    """A :class:`Retriever` with every optional member declared and defaulted: what the runner calls, in order.

    1. **build**: the constructor (Hydra's ``_target_`` with the config's parameters) checks its arguments.
    2. **bind training** (``bind_training(context)``): after encoding. A retriever with trained models hands the
       context (the benchmark with its gold, the vectors, where models live) to its model resolvers
       (``memrepro.artifacts.per_seed.PerSeedArtifact``); the retriever itself never reads gold. One holding such
       resolvers is first bound to a planning context (no vectors), for the training plan. Default: nothing.
    3. **per split** (``for_split(split)``): before each split's queries (and for the last split after a resumed
       pass), e.g. to load that split seed's model. Default: nothing.
    4. **prepare** (``prepare(index)``): once, before the timed pass: per-episode indexes and the like, timed as
       ``prepare_s`` apart from retrieval. Default: nothing.
    5. **retrieve**: batches of queries, timed; returns one :class:`Retrieved` per query.

    Declared facts: ``name`` (the results folder), ``order`` (``"score"``: ranked by score, ties broken by pool
    position; ``"native"``: the retriever's own order is kept), ``uses_vectors`` (False: nothing is encoded and the
    vectors are placeholders), ``timed_region`` (what the latency figures time), ``ALGORITHM_VERSION`` (hashed
    into the run id: bump it when a change alters rankings, so stale runs are recomputed instead of reused), and
    ``describe()`` (the parameters stored in the run's provenance).
    """

    name: str
    # bump when a change alters its rankings: its old runs get new ids (memrepro.runs.identity reads it)
    ALGORITHM_VERSION: ClassVar[int | None] = 1
    order: Literal["score", "native"] = "score"
    uses_vectors: bool = True
    timed_region: str = "retriever call, query vector given (encoding is timed as a phase)"
    # measured seconds to rank one question, for the forecast of a model trained on this retriever's rankings
    SECONDS_PER_QUERY: ClassVar[float] = 0.0

    def bind_training(self, context: TrainingContext) -> None:
        """Hand the training context to the model resolvers (retrievers with trained models)."""

    def for_split(self, split: Split) -> None:
        """Get ready for ``split``'s queries (e.g. its seed's trained model)."""

    def prepare(self, index: EpisodeIndex) -> None:
        """Build what retrieval reads, outside the timed pass."""

    @abstractmethod
    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]: ...

    @abstractmethod
    def describe(self) -> dict: ...

    def artifact_identity(self) -> dict:
        """What a model trained on this retriever's rankings depends on: its description unless a part of it (a
        per-split model) changes between splits."""
        return self.describe()
