"""What the runs of one command share, in one object handed down from the command that starts them.

A command makes one :class:`RunContext` (``run``, ``eval``, ``train``, ``memrepro.evaluate``) and passes it through
:func:`memrepro.runner.run` to the stages; a Hydra sweep run in one process makes one for all its points
(``hydra_plugins/memrepro_sweeper``), so its points load each dataset and encoder once, encode and index once, hash
each embedding-cache shard and weights file once, and time batch-1 latency once when asked to. Two contexts share
nothing: a fresh one is what a new process sees, which is how the tests ask for one.

Nothing here is read at import time, and no module of memrepro keeps such state of its own (a test walks the
package for module-level containers that are mutated).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any

DigestKey = tuple[int, int, int, int]  # (device, inode, size, mtime_ns) of a file


class FileDigests:
    """sha256 of files, each hashed once by its owner: cache shards and model weights are checked by content before
    use, and a sweep's points read the same files. Never trusted from an earlier owner (another process): bit rot
    and ``cp -p`` keep size and mtime. A file renamed after it was hashed (an extraction moved into place) keeps its
    device, inode and mtime, so its digest carries over."""

    def __init__(self) -> None:
        self._known: dict[DigestKey, str] = {}

    @staticmethod
    def _key(path: str | os.PathLike[str]) -> DigestKey:
        stat = os.stat(path)
        return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns

    def sha256(self, path: str | os.PathLike[str]) -> str:
        """The file's sha256, computed on first request (about 1 s for 440 MB)."""
        key = self._key(path)
        if key not in self._known:
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(block)
            self._known[key] = digest.hexdigest()
        return self._known[key]

    def remember(self, path: str | os.PathLike[str], sha256: str) -> None:
        """Record the digest of a file its writer has just hashed (it need not be read again)."""
        self._known[self._key(path)] = sha256


@dataclass(eq=False)
class RunContext:
    """The state the runs of one command or sweep share; each field says who reads and writes it."""

    # datasets and encoders by their resolved config (memrepro.stages.build_once)
    built: dict[str, Any] = field(default_factory=dict)
    # the one (key, vectors, index) held for a (dataset, encoder, device, search options) (memrepro.runner)
    index: tuple[Any, ...] | None = None
    # run id of the point that timed batch-1 latency, with latency.batch1_once (memrepro.runner)
    batch1_timed_by: str | None = None
    # embedding-cache shards and model weights hashed (memrepro.models.cache, memrepro.models.resolve)
    digests: FileDigests = field(default_factory=FileDigests)
    # whether the Hugging Face Hub answered its one probe (memrepro.models.resolve); None: not probed yet
    hub_reachable: bool | None = None
    # what a run's inputs went through before it computed anything (model weights found damaged and extracted
    # again): logged when noted, stored in the warnings of the next run record written
    pending_warnings: list[str] = field(default_factory=list)

    def note_warning(self, message: str) -> None:
        """Log ``message`` now and keep it for the ``warnings`` of the next run record."""
        logging.getLogger("memrepro").warning("%s", message)
        self.pending_warnings.append(message)

    def take_warnings(self) -> list[str]:
        """The warnings noted since the last call (a run record takes them once)."""
        taken, self.pending_warnings = self.pending_warnings, []
        return taken
