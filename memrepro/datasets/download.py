"""``data check`` and ``data download``: verify benchmark files against pinned checksums, fetch official copies.

Downloads go to a temporary file next to the target and are renamed into place only after the checksum matched,
so an interrupted or refused transfer never leaves a file that looks complete.
"""

from __future__ import annotations

import hashlib
import os
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from memrepro.datasets.catalogue import DataFile
from memrepro.datasets.io import sha256_file


@dataclass(frozen=True)
class FileStatus:
    entry: DataFile
    state: str  # "ok" | "unpinned" | "missing" | "mismatch"
    sha256: str | None = None

    @property
    def problem(self) -> bool:
        return self.state == "mismatch"


def check(entries: Iterable[DataFile], root: Path) -> list[FileStatus]:
    out = []
    for entry in entries:
        path = root / entry.path
        if not path.is_file():
            out.append(FileStatus(entry, "missing"))
            continue
        digest = sha256_file(path)
        state = "unpinned" if entry.sha256 is None else ("ok" if digest == entry.sha256 else "mismatch")
        out.append(FileStatus(entry, state, digest))
    return out


class OfflineError(ConnectionError):
    """The first request could not reach its host at all."""


class ChecksumMismatch(ValueError):
    pass


@dataclass(frozen=True)
class Downloaded:
    entry: DataFile
    state: str  # "present" | "downloaded" | "downloaded-unpinned" | "kept-mismatch"
    sha256: str


def download(entries: Iterable[DataFile], root: Path, mirror: str | None = None, allow_mismatch: bool = False,
             timeout: float = 60.0, progress: Callable[[str], None] = print) -> list[Downloaded]:
    """Fetch each entry with a URL into ``root``; skip files already present with the pinned checksum.

    ``mirror`` replaces every official URL by ``mirror + entry.path`` (a folder laid out like the data root).
    A checksum mismatch deletes the download and raises unless ``allow_mismatch``.
    """
    done = []
    for entry in entries:
        if entry.url is None:
            continue
        target = root / entry.path
        if target.is_file() and entry.sha256 and sha256_file(target) == entry.sha256:
            done.append(Downloaded(entry, "present", entry.sha256))
            continue
        url = mirror.rstrip("/") + "/" + entry.path if mirror else entry.url
        progress(f"downloading {entry.path} from {url}")
        digest = _fetch(url, target, timeout)
        if entry.sha256 and digest != entry.sha256:
            if not allow_mismatch:
                target.unlink()
                raise ChecksumMismatch(f"{entry.path}: sha256 {digest} does not match the pinned {entry.sha256} "
                                       f"(download removed; pass --allow-mismatch to keep it)")
            done.append(Downloaded(entry, "kept-mismatch", digest))
        else:
            done.append(Downloaded(entry, "downloaded" if entry.sha256 else "downloaded-unpinned", digest))
    return done


def _fetch(url: str, target: Path, timeout: float) -> str:
    tmp = target.with_name(f".{target.name}.part-{os.getpid()}")
    digest = hashlib.sha256()
    try:
        try:
            response = urllib.request.urlopen(url, timeout=timeout)  # noqa: S310 - fixed https/http URLs
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (socket.gaierror, ConnectionRefusedError, TimeoutError, OSError)) and \
                    not isinstance(exc, urllib.error.HTTPError):
                raise OfflineError(f"cannot reach {url}: {exc.reason}") from exc
            raise
        target.parent.mkdir(parents=True, exist_ok=True)  # only once the source answered (offline: no folders)
        with response, open(tmp, "wb") as out:
            expected = response.headers.get("Content-Length")
            received = 0
            while block := response.read(1 << 20):
                out.write(block)
                digest.update(block)
                received += len(block)
            if expected is not None and received != int(expected):
                raise ConnectionError(f"{url}: transfer interrupted ({received} of {expected} bytes)")
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return digest.hexdigest()


