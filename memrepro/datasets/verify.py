"""Checksums enforced at run time: every file a benchmark was read from, against its pinned sha256.

A file under the data root at a path the catalogue pins is ``verified`` when its sha256 is the pinned one and
``mismatch`` otherwise; a file (or folder) without a pin is ``unpinned``. A run on a mismatching file is refused
with one line naming the file, both hashes and the fix, unless ``dataset.allow_unverified=true`` (a user's own
revision); such a run says so on the console and in ``metrics.json`` (``data_verified: false`` with the expected
and actual hash), and ``tables`` never puts it beside a paper number.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from memrepro.datasets.catalogue import DataFile, catalogue
from memrepro.errors import UnverifiedDataError
from memrepro.types import FileProvenance


@dataclass(frozen=True)
class FileCheck:
    path: str
    state: str  # verified | mismatch | unpinned
    actual: str
    expected: str | None = None
    note: str = ""


def _pins(entries: Iterable[DataFile]) -> dict[str, DataFile]:
    return {e.path: e for e in entries if e.sha256}


def _folder_pin(path: str, pins: dict[str, DataFile]) -> str | None:
    """A folder source's combined hash (sha256 over sorted ``"<sha256>  <name>\\n"`` lines) from its files' pins."""
    prefix = path.rstrip("/") + "/"
    members = sorted((p[len(prefix):], e.sha256) for p, e in pins.items()
                     if p.startswith(prefix) and "/" not in p[len(prefix):])
    if not members:
        return None
    digest = hashlib.sha256()
    for name, sha in members:
        digest.update(f"{sha}  {name}\n".encode())
    return digest.hexdigest()


def check_files(files: Iterable[FileProvenance]) -> list[FileCheck]:
    pins = _pins(catalogue())
    out = []
    for f in files:
        entry = pins.get(f.path)
        expected = entry.sha256 if entry else _folder_pin(f.path, pins)
        if expected is None:
            out.append(FileCheck(f.path, "unpinned", f.sha256))
        else:
            state = "verified" if f.sha256 == expected else "mismatch"
            out.append(FileCheck(f.path, state, f.sha256, expected, entry.note if entry else "folder of pinned files"))
    return out


def data_verified(checks: list[FileCheck]) -> bool | None:
    """True: every file matches its pin; False: one does not; None: no mismatch, but some file has no pin."""
    if any(c.state == "mismatch" for c in checks):
        return False
    return True if checks and all(c.state == "verified" for c in checks) else None


def enforce(files: Iterable[FileProvenance], data_dir: str, allow_unverified: bool) -> dict[str, Any]:
    """The ``data_verified`` block of metrics.json; raises UnverifiedDataError on a mismatch unless allowed."""
    checks = check_files(files)
    bad = [c for c in checks if c.state == "mismatch"]
    if bad and not allow_unverified:
        raise UnverifiedDataError(
            f"{describe_mismatch(bad[0], data_dir)}; restore the file (`python -m memrepro data download`) or, "
            f"for your own revision, rerun with dataset.allow_unverified=true (the run is then labelled unverified)")
    return {"data_verified": data_verified(checks), "data_files": [asdict(c) for c in checks]}


def describe_mismatch(check: FileCheck, data_dir: str | os.PathLike[str]) -> str:
    """A file that failed its checksum, in the words every refusal uses: its path, both hashes, what it is."""
    return (f"{str(data_dir).rstrip('/')}/{check.path}: sha256 {check.actual} is not the pinned {check.expected} "
            f"({check.note or 'pinned file'}): a damaged or different revision")
