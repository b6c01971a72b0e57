"""The data model every part of memrepro speaks (BEIR's corpus / queries / qrels, made typed).

A *memory* is one retrievable unit; an *episode* is the set of memories one query may search; a *query*
names its episode and its gold; a *benchmark* bundles episodes, queries, splits, the evaluation protocol and
the provenance of the files it was read from. Everything is frozen: loaders build these once and no later
stage mutates them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from memrepro.errors import DataError

_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(text: str, file: str, record: str, name: str) -> None:
    """A text that can be encoded, hashed and written: a lone UTF-16 surrogate (a JSON ``\\ud800`` escape
    without its pair) is not a character, so it is a DataError naming the file, record and field."""
    found = None if text.isascii() else _SURROGATE.search(text)  # ASCII, the common case, is checked at no cost
    if found:
        raise DataError(file, record, name, f"character {found.start()} is a lone surrogate "
                                            f"U+{ord(found.group()):04X} (half of a UTF-16 pair, not a character); "
                                            f"fix or remove it in the file")


@dataclass(frozen=True)
class Memory:
    """One retrievable unit.

    ``id`` is the dataset-native id (a LoCoMo ``dia_id``, a PersonaBench ``segment_id``) and is unique within
    its episode. ``position`` is the index in the loader's pool order: the tie rule sorts on it. ``turn`` is
    where the memory sits in its conversation as the dataset numbers it (LoCoMo ``D<s>:<t>`` → t), set by the
    loader that knows the id format; None where the dataset has no such number.
    """

    id: str
    text: str
    position: int
    session: str | None = None
    speaker: str | None = None
    time: str | None = None
    turn: float | None = None


@dataclass(frozen=True)
class Episode:
    """The memories a query may search (a LoCoMo conversation, a LongMemEval haystack, a PersonaBench person)."""

    id: str
    memories: tuple[Memory, ...]
    source: str = ""  # file the episode came from, for error messages

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for expected, memory in enumerate(self.memories):
            if memory.position != expected:
                raise DataError(self.source, self.id, "position",
                                f"memory {memory.id!r} has position {memory.position}, expected {expected}")
            if memory.id in seen:
                raise DataError(self.source, self.id, "id", f"duplicate memory id {memory.id!r} in episode")
            seen.add(memory.id)
            check_text(memory.text, self.source, f"{self.id}/{memory.id}", "text")

    def __len__(self) -> int:
        return len(self.memories)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.memories)


@dataclass(frozen=True)
class Query:
    """One question.

    ``gold`` lists the relevant memory ids in file order, duplicates kept (LoCoMo's recall divides by the list
    length). ``gold_alternatives`` is for benchmarks whose gold is a set of answer parts with alternative ids
    (PersonaBench): one tuple of alternatives per part. ``excluded`` names why a query is retrieved but not
    scored (``None`` = scored).
    """

    id: str
    text: str
    episode_id: str
    gold: tuple[str, ...]
    category: str
    time: str | None = None
    gold_alternatives: tuple[tuple[str, ...], ...] | None = None
    excluded: str | None = None

    @property
    def scored(self) -> bool:
        return self.excluded is None


@dataclass(frozen=True)
class Split:
    """An evaluation split: the episodes a method may train on (dev) and the queries it is scored on (test)."""

    name: str
    test_episode_ids: tuple[str, ...]
    dev_episode_ids: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class FileProvenance:
    path: str
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Protocol:
    """How a benchmark is scored, so the runner never branches on a dataset name.

    ``metrics`` are memrepro metric names (see ``memrepro.evaluation.metrics``); ``primary`` the ones a summary
    prints first; ``category_names`` maps stored category codes to display names, in display order.
    """

    metrics: tuple[str, ...]
    primary: tuple[str, ...]
    category_names: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Benchmark:
    name: str
    episodes: Mapping[str, Episode]
    queries: tuple[Query, ...]
    splits: tuple[Split, ...]
    protocol: Protocol
    files: tuple[FileProvenance, ...]
    loader_counts: Mapping[str, int] = field(default_factory=dict)  # dropped / repaired items, by reason
    options: Mapping[str, object] = field(default_factory=dict)  # loader options that shaped the data
    warnings: tuple[str, ...] = ()  # structural anomalies the loader tolerated: printed in the run summary
    gold_corrections: str | None = None  # sha256 of the gold corrections applied (dataset.gold_labels=corrected)

    def __post_init__(self) -> None:
        ids: set[str] = set()
        for query in self.queries:
            if query.id in ids:
                raise DataError(self.name, query.id, "id", "duplicate query id")
            ids.add(query.id)
            if query.episode_id not in self.episodes:
                raise DataError(self.name, query.id, "episode_id", f"unknown episode {query.episode_id!r}")
            check_text(query.text, self.episodes[query.episode_id].source or self.name, query.id, "text")
        for split in self.splits:
            for episode_id in (*split.test_episode_ids, *split.dev_episode_ids):
                if episode_id not in self.episodes:
                    raise DataError(self.name, split.name, "episodes", f"unknown episode {episode_id!r}")

    def split_queries(self, split: Split) -> tuple[Query, ...]:
        test = set(split.test_episode_ids)
        return tuple(q for q in self.queries if q.episode_id in test)

    @property
    def data_sha256(self) -> str:
        """One hash over every input file's hash, in path order, and over the gold corrections when some were
        applied (a corrected benchmark is other data: its runs and models have ids of their own)."""
        import hashlib

        digest = hashlib.sha256()
        for f in sorted(self.files, key=lambda f: f.path):
            digest.update(f"{f.path}\0{f.sha256}\n".encode())
        if self.gold_corrections is not None:
            digest.update(f"gold corrections\0{self.gold_corrections}\n".encode())
        return digest.hexdigest()
