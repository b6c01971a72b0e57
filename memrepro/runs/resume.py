"""Resumable retrieval: a run's finished batches go to a checkpoint file next to its folder, so a run stopped after
hours (the full-pool cross-encoder scores 500 pairs per query, seconds each on a CPU) resumes where it stopped.

Stored per query: the frozen ranking (ids and scores; JSON floats round-trip exactly) and the trace, plus each
write's retrieval seconds, so a resumed run's amortized latency still sums retrieval time only. The file is named
after the run id (the config hash), so a changed config never reads another config's checkpoint. Batch-1 latency is
never resumed: it is measured afresh when the run completes. Writes are appends, flushed and fsynced, one record
per line as ``<sha256 of the JSON>\t<JSON>``. Reading back verifies every line: a last line torn by a kill, or any
line that is garbled, cut or fails its digest, loses only itself (its queries are retrieved again; a warning names
the file and line) and the file is rewritten without it, so the next append starts on a fresh line after the last
complete record.

Why not a cross-encoder score cache: scores served from a cache would also be served to
the latency measurement, which would then time cache lookups instead of the model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from memrepro.errors import MemreproError
from memrepro.files import naming
from memrepro.evaluation.freeze import FrozenRanking

log = logging.getLogger("memrepro")

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
        self.dropped: list[str] = []

    @classmethod
    def for_run(cls, folder: Path, every_s: float = 60.0) -> RetrievalCheckpoint:
        return cls(folder.parent / f".{folder.name}{CHECKPOINT_SUFFIX}", every_s)

    def load(self) -> Restored:
        restored = Restored()
        if not self.path.is_file():
            return restored
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        torn = lines.pop()  # b"" when the file ends with a newline; otherwise a write cut short by a kill
        good: list[bytes] = []
        bad: list[str] = []
        for number, line in enumerate(lines, start=1):
            try:
                record = _parse_line(line)
                retrieve_s = float(record["retrieve_s"])
                entries = [((q["split"], q["query_id"]),
                            FrozenRanking(q["query_id"], tuple(q["memory_ids"]), tuple(float(x) for x in q["scores"])),
                            q["trace"]) for q in record["queries"]]
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                bad.append(f"line {number} ({exc})")
                continue
            restored.retrieve_s += retrieve_s
            for key, ranking, trace in entries:
                restored.rankings[key] = ranking
                restored.traces[key] = trace
            good.append(line)
        if torn:
            bad.append(f"line {len(lines) + 1} (cut short by an interruption)")
        if bad:
            log.warning("%s: %d unreadable checkpoint record(s) dropped, their queries are retrieved again: %s",
                        self.path, len(bad), "; ".join(bad)[:500])
            self.dropped = bad
            _rewrite(self.path, good)
        return restored
    def add(self, split: str, rankings: list[FrozenRanking], traces: list[Any], retrieve_s: float) -> None:
        self._pending += [{"split": split, "query_id": r.query_id, "memory_ids": list(r.memory_ids),
                           "scores": list(r.scores), "trace": t} for r, t in zip(rankings, traces)]
        self._pending_s += retrieve_s
        if time.monotonic() - self._last_write >= self.every_s:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            body = json.dumps({"retrieve_s": self._pending_s, "queries": self._pending},
                              separators=(",", ":"), default=str).encode("utf-8")
            line = hashlib.sha256(body).hexdigest().encode() + b"\t" + body + b"\n"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _cut_torn_tail(self.path)  # an append always starts on a fresh line after the last complete record
            with naming(self.path), open(self.path, "ab") as handle:
                handle.write(line)
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


def _parse_line(line: bytes) -> dict[str, Any]:
    """One record: ``<sha256 hex>\t<JSON>`` with the digest of the JSON bytes; ValueError when it does not verify."""
    digest, sep, body = line.partition(b"\t")
    if not sep or len(digest) != 64:
        raise ValueError("no digest")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise ValueError("digest mismatch")
    record = json.loads(body.decode("utf-8"))
    if not isinstance(record, dict):
        raise TypeError("not an object")
    return record


def _rewrite(path: Path, lines: list[bytes]) -> None:
    """Replace ``path`` atomically by ``lines`` (the records that verified)."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with naming(path), open(tmp, "wb") as handle:
            handle.write(b"".join(line + b"\n" for line in lines))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, Ctrl-C, SIGTERM: the checkpoint stays as it was, no half-written copy
        tmp.unlink(missing_ok=True)
        raise


def _cut_torn_tail(path: Path) -> None:
    """Truncate a file that does not end with a newline to its last complete line."""
    if not path.is_file():
        return
    with open(path, "rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        block, end = 1 << 16, size
        while end > 0:
            start = max(0, end - block)
            handle.seek(start)
            chunk = handle.read(end - start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                handle.truncate(start + cut + 1)
                break
            end = start
        else:
            handle.truncate(0)
        handle.flush()
        os.fsync(handle.fileno())
