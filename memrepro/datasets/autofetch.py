"""Fetch a missing benchmark file on first use (``run``, ``eval``, ``export``), through the checksum-verified
``data download`` code: one line says what was fetched; offline, the loader's own message stands.

Set ``MEMREPRO_AUTO_DOWNLOAD=0`` to never fetch; ``MEMREPRO_DATA_MIRROR`` (a URL or ``file://`` folder laid out
like the data root) replaces the official sources, as ``data download --mirror`` does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, TypeVar

from memrepro.datasets.catalogue import DOWNLOADS, DataFile
from memrepro.datasets.download import ChecksumMismatch, OfflineError, download
from memrepro.errors import MemreproError, MissingDataError

AUTO_ENV = "MEMREPRO_AUTO_DOWNLOAD"
MIRROR_ENV = "MEMREPRO_DATA_MIRROR"
MAX_FETCHES = 200  # PersonaBench is 108 small files, fetched one by one as the loader asks for them
T = TypeVar("T")


class FetchRefused(MemreproError):
    """The fetched copy did not match its pinned checksum (it was removed)."""


def enabled() -> bool:
    return os.environ.get(AUTO_ENV, "1").strip().lower() not in {"0", "false", "no", "off"}


def downloadable(missing: Path, root: Path) -> DataFile | None:
    """The catalogue entry (with a URL) that provides ``missing``, or an official file the loader would read
    instead (LongMemEval: the official JSON when the local archive is absent)."""
    try:
        rel = missing.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None
    by_path = {e.path: e for e in DOWNLOADS if e.url}
    if rel in by_path:
        return by_path[rel]
    from memrepro.datasets.longmemeval import DEFAULT_SOURCES

    for candidates in DEFAULT_SOURCES.values():
        if rel in candidates:
            return next((by_path[c] for c in candidates if c in by_path), None)
    return None


def with_fetch(load: Callable[[], T], root: Path, say: Callable[[str], None] | None = None) -> T:
    """``load()``; when it reports a missing file that memrepro knows how to fetch and fetching is enabled,
    fetch that file (checksum verified) and try again. Offline, the original MissingDataError is raised."""
    say = say or (lambda line: print(line, file=sys.stderr))
    fetched: set[str] = set()
    while True:
        try:
            return load()
        except MissingDataError as exc:
            entry = downloadable(Path(exc.path), root) if enabled() else None
            if entry is None or entry.path in fetched or len(fetched) >= MAX_FETCHES:
                raise
            mirror = os.environ.get(MIRROR_ENV) or None
            try:
                result = download([entry], root, mirror=mirror, progress=lambda _line: None)[0]
            except OfflineError:
                raise exc from None
            except ChecksumMismatch as mismatch:
                raise FetchRefused(f"refused to use a fetched file: {mismatch}") from None
            except OSError as failed:  # HTTP errors, interrupted transfers
                raise FetchRefused(f"{entry.path} is missing and fetching it failed: {failed}") from None
            pin = "sha256 verified" if entry.sha256 else f"no pinned sha256; recorded {result.sha256[:12]}…"
            source = (mirror.rstrip("/") + "/" + entry.path) if mirror else entry.url
            say(f"memrepro: {entry.path} was missing: fetched from {source} into {root} ({pin})")
            fetched.add(entry.path)
