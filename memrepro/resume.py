"""Resumable retrieval: a run's finished batches go to a checkpoint file next to its folder, so a run stopped after
hours (the full-pool cross-encoder scores 500 pairs per query, seconds each on a CPU) resumes where it stopped.

Stored per query: the frozen ranking (ids and scores; JSON floats round-trip exactly) and the trace, plus each
write's retrieval seconds, so a resumed run's amortized latency still sums retrieval time only. The file is named
after the run id (the config hash), so a changed config never reads another config's checkpoint. Batch-1 latency is
never resumed: it is measured afresh when the run completes. Writes are appends, flushed and fsynced; a last line
torn by a kill is dropped, any other unreadable line is an error that names the file and line.

Why not a cross-encoder score cache (the spec's other option): scores served from a cache would also be served to
the latency measurement, which would then time cache lookups instead of the model.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from memrepro.errors import MemreproError
from memrepro.evaluation.freeze import FrozenRanking

CHECKPOINT_SUFFIX = ".partial.jsonl"
LOCK_SUFFIX = ".lock"


@dataclass
class Restored:
    rankings: dict[tuple[str, str], FrozenRanking] = field(default_factory=dict)
    traces: dict[tuple[str, str], Any] = field(default_factory=dict)
    retrieve_s: float = 0.0


class RetrievalCheckpoint:
    """Appends finished queries at most every ``every_s`` seconds (0: after every batch) and on any exception."""

    def __init__(self, path: Path, every_s: float = 60.0) -> None:
        self.path, self.every_s = path, float(every_s)
        self._pending: list[dict[str, Any]] = []
        self._pending_s = 0.0
        self._last_write = time.monotonic()

    @classmethod
    def for_run(cls, folder: Path, every_s: float = 60.0) -> RetrievalCheckpoint:
        return cls(folder.parent / f".{folder.name}{CHECKPOINT_SUFFIX}", every_s)

    def load(self) -> Restored:
        restored = Restored()
        if not self.path.is_file():
            return restored
        lines = self.path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
                restored.retrieve_s += float(record["retrieve_s"])
                for query in record["queries"]:
                    key = (query["split"], query["query_id"])
                    restored.rankings[key] = FrozenRanking(query["query_id"], tuple(query["memory_ids"]),
                                                           tuple(query["scores"]))
                    restored.traces[key] = query["trace"]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                if number == len(lines):  # a write torn by a kill: those queries are simply retrieved again
                    break
                raise MemreproError(f"{self.path}: line {number} is not a checkpoint record ({exc}); delete the "
                                    f"file to restart this run from scratch") from None
        return restored

    def add(self, split: str, rankings: list[FrozenRanking], traces: list[Any], retrieve_s: float) -> None:
        self._pending += [{"split": split, "query_id": r.query_id, "memory_ids": list(r.memory_ids),
                           "scores": list(r.scores), "trace": t} for r, t in zip(rankings, traces)]
        self._pending_s += retrieve_s
        if time.monotonic() - self._last_write >= self.every_s:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            line = json.dumps({"retrieve_s": self._pending_s, "queries": self._pending},
                              separators=(",", ":"), default=str)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        self._pending, self._pending_s, self._last_write = [], 0.0, time.monotonic()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Holds an exclusive lock beside the checkpoint while a run computes, so two launches of one run (a
        re-sent sweep, a second terminal) cannot append to the same file. The OS drops the lock when the process
        ends, however it ends; where ``fcntl`` is missing (Windows) runs are not locked."""
        try:
            import fcntl
        except ImportError:
            yield
            return
        lock_path = self.path.with_name(self.path.name.removesuffix(CHECKPOINT_SUFFIX) + LOCK_SUFFIX)
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a+", encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise MemreproError(f"{lock_path}: another process is computing this run; wait for it, or stop it "
                                    f"and start again to resume from its checkpoint") from None
            try:
                yield
            finally:
                lock_path.unlink(missing_ok=True)
                fcntl.flock(handle, fcntl.LOCK_UN)

    def discard(self) -> None:
        self._pending, self._pending_s = [], 0.0
        self.path.unlink(missing_ok=True)
