"""The runs a report shows: complete, verified runs under ``results/runs`` and the kept copies under
``results/kept``, read in place.

A kept copy (``memrepro.runs.kept``) holds ``config.yaml`` and ``metrics.json`` verbatim and ``queries.jsonl``
compressed. It is read where it lies, never restored into ``results/runs``: its verbatim files are checked against
its manifest when it is listed, its queries when they are read (decompressed, then size and sha256 against the
manifest's ``queries.jsonl`` entry). A run in both places is read from ``results/runs``. Whatever fails is named in
one line and left out, as :func:`memrepro.tables.runs.complete_runs` does for ``results/runs``.
"""

from __future__ import annotations

import hashlib
import json
import lzma
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from memrepro.errors import DamagedFileError
from memrepro.runs.folder import COMPLETE, parse_queries_lines
from memrepro.runs.kept import FIX, KeptRuns, QUERIES, QUERIES_XZ, VERBATIM
from memrepro.runs.record import RunRecord
from memrepro.tables.runs import Run, complete_runs, unusable


@dataclass(frozen=True)
class KeptRun(Run):
    """A run read from its kept copy: the same :class:`Run`, its rows decompressed and verified when first read."""

    @cached_property
    def manifest(self) -> dict[str, Any]:
        marker = self.folder / COMPLETE
        try:
            manifest = json.loads(marker.read_text(encoding="utf-8"))
            manifest["files"][QUERIES]["sha256"]  # noqa: B018  (a manifest without it cannot verify the rows)
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
            raise DamagedFileError(marker, "unreadable manifest", FIX) from None
        return manifest

    def verify_listed(self) -> None:
        """The manifest, the verbatim files against it, and the run record (cheap: not the queries)."""
        for name in VERBATIM:
            path = self.folder / name
            expected = self.manifest["files"].get(name) or {}
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise DamagedFileError(path, "missing from a kept run", FIX) from None
            if len(data) != expected.get("bytes") or hashlib.sha256(data).hexdigest() != expected.get("sha256"):
                raise DamagedFileError(path, "differs from the kept manifest (damaged or edited)", FIX)
        RunRecord.read(self.folder / "metrics.json")

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        path = self.folder / QUERIES_XZ
        expected = self.manifest["files"][QUERIES]
        try:
            with lzma.open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise DamagedFileError(path, "missing from a kept run", FIX) from None
        except (OSError, lzma.LZMAError, EOFError) as exc:
            raise DamagedFileError(path, f"unreadable ({type(exc).__name__}: {exc})", FIX) from None
        if len(data) != expected.get("bytes") or hashlib.sha256(data).hexdigest() != expected.get("sha256"):
            raise DamagedFileError(path, "does not decompress to the queries.jsonl its manifest records (damaged "
                                         "or edited)", FIX)
        return parse_queries_lines(data.splitlines(), path)


def report_runs(results_dir: Path, kept_dir: Path | None, warn: Callable[[str], None]) -> list[Run]:
    """Every run the report may show: the complete, verified runs of ``results_dir/runs``, then the kept copies
    under ``kept_dir`` whose run is not there (rows verified later, when read: :attr:`KeptRun.rows`)."""
    runs = complete_runs(results_dir, warn)
    here = {run.folder.relative_to(Path(results_dir) / "runs") for run in runs}
    if kept_dir is None or not Path(kept_dir).is_dir():
        return runs
    kept = KeptRuns(Path(results_dir), Path(kept_dir))
    for folder in kept.all():
        if folder.relative_to(kept_dir) in here:
            continue
        run = KeptRun(folder)
        try:
            run.verify_listed()
        except (DamagedFileError, OSError) as exc:
            warn(f"skipped the kept run {folder}: {exc}")
            continue
        problem = unusable(run)
        if problem:
            warn(f"skipped the kept run {folder}: {problem}")
            continue
        runs.append(run)
    return runs


def run_key(run: Run) -> str:
    """A run's name in the site's paths (its run id: unique, since the id hashes the dataset and every setting)."""
    return run.folder.name
