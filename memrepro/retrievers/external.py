"""Any object with the public Retriever Protocol (``memrepro.Retriever``), run through the same pipeline as
memrepro's own retrievers: ``retriever=external retriever.target=my_pkg.MyRetriever``, ``memrepro.evaluate(obj, ...)``,
or a ``_target_`` class that does not derive from :class:`~memrepro.retrievers.base.RetrieverBase`.

The object's ``retrieve(queries, query_vectors, index)`` returns one result per query, each one of: a ranked list
of memory ids, a list of ``(memory_id, score)`` pairs, or memrepro's own ``Retrieved`` / ``Hits`` (pool
positions). Ids are checked against the query's episode here, so a wrong id is one clear error naming the
retriever, the query and the id; the runner then freezes (tie rule), scores and writes as for any run.
"""

from __future__ import annotations

from numbers import Real
from typing import Any, Mapping, Sequence

import numpy as np

from memrepro.errors import MemreproError
from memrepro.retrievers.base import RetrievalInput, Retrieved, RetrieverBase
from memrepro.search import EpisodeIndex, Hits
from memrepro.types import Split


class ExternalRetrieverError(MemreproError, ValueError):
    pass


def qualified_name(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


class ExternalRetriever(RetrieverBase):
    """Adapter: wraps a user object into the Protocol's lifecycle (the optional members it has, the defaults for the
    others) and validates and converts its output into memrepro's ``Retrieved`` (pool positions). The user object is
    never handed the training context: retrieval reads no gold."""

    ALGORITHM_VERSION = None  # the adapter ranks nothing itself: the run id hashes the wrapped class's own version

    def __init__(self, target: str | None = None, params: Mapping[str, Any] | None = None, name: str | None = None,
                 order: str | None = None, instance: Any = None) -> None:
        if instance is None:
            if not target:
                raise ExternalRetrieverError("retriever=external needs retriever.target=<module.Class>")
            from hydra.errors import InstantiationException
            from hydra.utils import instantiate

            try:
                instance = instantiate({"_target_": target, **dict(params or {})})
            except InstantiationException as exc:
                cause = exc.__cause__ or exc
                raise ExternalRetrieverError(f"retriever.target={target!r} could not be built: "
                                             f"{str(cause).splitlines()[0]}") from None
        if not callable(getattr(instance, "retrieve", None)):
            raise ExternalRetrieverError(f"{qualified_name(instance)} has no retrieve(queries, query_vectors, index) "
                                         "method (see memrepro.Retriever)")
        self.instance = instance
        self.target = target or qualified_name(instance)
        self.params = dict(params or {})
        self.name = name or getattr(instance, "name", None) or type(instance).__name__
        self.order = order or getattr(instance, "order", RetrieverBase.order)
        if self.order not in ("score", "native"):
            raise ExternalRetrieverError(f"{self.name}: order must be 'score' or 'native', got {self.order!r}")
        self.uses_vectors = bool(getattr(instance, "uses_vectors", RetrieverBase.uses_vectors))
        self.timed_region = getattr(instance, "timed_region", RetrieverBase.timed_region)

    def for_split(self, split: Split) -> None:
        if callable(getattr(self.instance, "for_split", None)):
            self.instance.for_split(split)

    def prepare(self, index: EpisodeIndex) -> None:
        if callable(getattr(self.instance, "prepare", None)):
            self.instance.prepare(index)

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]:
        results = list(self.instance.retrieve(queries, query_vectors, index))
        if len(results) != len(queries):
            raise ExternalRetrieverError(f"retriever {self.name!r} returned {len(results)} results for "
                                         f"{len(queries)} queries (one ranked list per query)")
        return [self._convert(query, result, index) for query, result in zip(queries, results)]

    def _convert(self, query: RetrievalInput, result: Any, index: EpisodeIndex) -> Retrieved:
        if isinstance(result, Retrieved):
            return result
        if isinstance(result, Hits):
            return Retrieved(result)
        episode = index.episodes[query.episode_id]
        where = {m.id: m.position for m in episode.memories}
        items = list(result)
        positions, scores = [], []
        for rank, item in enumerate(items):
            if isinstance(item, str):
                memory_id, score = item, float(len(items) - rank)
            elif (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)
                  and isinstance(item[1], Real)):
                memory_id, score = item[0], float(item[1])
            else:
                raise ExternalRetrieverError(f"retriever {self.name!r}, query {query.query_id!r}, item {rank + 1}: "
                                             f"expected a memory id or (memory_id, score), got {item!r:.60}")
            if memory_id not in where:
                raise ExternalRetrieverError(f"retriever {self.name!r} returned memory id {memory_id!r} for query "
                                             f"{query.query_id!r}, which is not in its episode "
                                             f"{query.episode_id!r}")
            positions.append(where[memory_id])
            scores.append(score)
        return Retrieved(Hits(np.asarray(positions, dtype=np.int64), np.asarray(scores, dtype=np.float32)))

    def describe(self) -> dict:
        own = self.instance.describe() if callable(getattr(self.instance, "describe", None)) else {}
        return {**dict(own), "name": self.name, "target": self.target, "params": self.params, "order": self.order}


def as_retriever(obj: Any) -> RetrieverBase:
    """``obj`` itself when it derives from :class:`RetrieverBase`, else wrapped by the adapter."""
    return obj if isinstance(obj, RetrieverBase) else ExternalRetriever(instance=obj)
