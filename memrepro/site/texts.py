"""Query and memory texts for the per-query explorer, read with the benchmark's own loader.

Runs store ids only. The explorer shows texts by reading the benchmark a run names (its ``config.yaml``'s dataset
node, from ``$MEMREPRO_DATA_DIR`` when set, else the folder the run recorded) once per loader configuration. The
texts are shown only when the files read now are the run's (``provenance.data_sha256``); otherwise, or without
the data, the explorer shows ids and says why. Only the memories some row shows (gold and top hits) are written,
each cut to :data:`MAX_CHARS` characters (a LongMemEval memory is a whole session).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from memrepro.datasets.io import DATA_DIR_ENV, RUNNER_SWITCHES
from memrepro.errors import MemreproError, one_line

MAX_CHARS = 600
# dataset settings that choose splits or where the files lie, not what the texts are: runs differing only in these
# share one text table
NEUTRAL = ("data_dir", "allow_unverified", "seeds")
log = logging.getLogger("memrepro")


def table_key(dataset: Mapping[str, Any]) -> str:
    """The text table a run's dataset node reads (same loader and text-shaping options, same table)."""
    node = {k: v for k, v in dataset.items() if k not in NEUTRAL}
    return hashlib.sha256(json.dumps(node, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclass
class TextTable:
    """The ids the explorer rows of one loader configuration refer to; texts filled by :meth:`fill`."""

    key: str
    dataset: dict[str, Any]
    data_sha256: str
    memories: dict[tuple[str, str], int] = field(default_factory=dict)  # (episode, memory id) -> index
    queries: set[str] = field(default_factory=set)
    memory_texts: list[str | None] = field(default_factory=list)
    query_texts: dict[str, str] = field(default_factory=dict)
    missing: str = ""  # why there are no texts ('' when there are)

    def memory(self, episode: str, memory_id: str) -> int:
        key = (episode, memory_id)
        if key not in self.memories:
            self.memories[key] = len(self.memories)
        return self.memories[key]

    def fill(self, texts: "Texts | None" = None) -> None:
        """The texts of the registered ids from ``texts`` (read here when not given: :func:`read_texts`); when
        there are none, or they are not of the runs' data, :attr:`missing` says why."""
        texts = texts or read_texts(self.dataset)
        self.missing = texts.missing
        if texts.missing:
            return
        if texts.data_sha256 != self.data_sha256:
            self.missing = (f"the benchmark files read now (data sha256 {texts.data_sha256[:12]}…) are not the "
                            f"ones the runs read ({self.data_sha256[:12]}…)")
            return
        self.memory_texts = [texts.memories.get(key) for key in self.memories]
        self.query_texts = {q: texts.queries[q] for q in self.queries if q in texts.queries}

    def document(self) -> dict[str, Any]:
        """What the site's text file holds: memory ids (and texts) by index, query texts by id."""
        ids = [memory_id for _, memory_id in self.memories]
        return {"ids": ids, "texts": self.memory_texts or None, "queries": self.query_texts or None,
                "missing": self.missing}


@dataclass(frozen=True)
class Texts:
    """Every memory and query text of one loader configuration (each cut to :data:`MAX_CHARS`): plain data, read
    in a worker process while the report reads runs."""

    memories: dict[tuple[str, str], str]
    queries: dict[str, str]
    data_sha256: str = ""
    missing: str = ""  # why there are none


def read_texts(dataset: Mapping[str, Any]) -> Texts:
    benchmark, missing = load(dataset)
    if benchmark is None:
        return Texts({}, {}, "", missing)
    return Texts({(episode.id, m.id): cut(m.text) for episode in benchmark.episodes.values()
                  for m in episode.memories},
                 {q.id: cut(q.text) for q in benchmark.queries}, benchmark.data_sha256)


def read_all(datasets: Mapping[str, Mapping[str, Any]]) -> dict[str, Texts]:
    """:func:`read_texts` of each text table's dataset node, by table key."""
    return {key: read_texts(dataset) for key, dataset in datasets.items()}


def cut(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_CHARS:
        return text
    return f"{text[:MAX_CHARS].rstrip()} … ({len(text):,} characters)"


def load(dataset: Mapping[str, Any]) -> tuple[Any, str]:
    """(the benchmark, '') or (None, why not): the loader a run's dataset node names, on this machine's data."""
    from omegaconf import OmegaConf

    from memrepro.stages import build

    node = {k: v for k, v in dataset.items() if k not in RUNNER_SWITCHES}
    root = os.environ.get(DATA_DIR_ENV) or node.get("data_dir")
    node["data_dir"] = root
    try:
        return build(OmegaConf.create(node)), ""
    except (MemreproError, OSError, ValueError, KeyError) as exc:
        reason = f"the benchmark files could not be read from {root} ({one_line(exc)[:200]})"
        log.info("%s", reason)
        return None, reason
