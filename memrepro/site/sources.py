"""The runs a report shows: complete, verified runs under ``results/runs`` and the kept copies under
``results/kept``, read in place.

A kept copy (``memrepro.runs.kept``) holds ``config.yaml`` and ``metrics.json`` verbatim and ``queries.jsonl``
compressed. It is read where it lies, never restored into ``results/runs``: its verbatim files are checked against
its manifest when it is listed, its queries when they are read (decompressed, then size and sha256 against the
manifest's ``queries.jsonl`` entry). A run in both places is read from ``results/runs``. Whatever fails is named in
one line and left out, as :func:`memrepro.tables.runs.complete_runs` does for ``results/runs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from memrepro.errors import DamagedFileError
from memrepro.runs.folder import parse_queries_lines
from memrepro.runs.kept import QUERIES, QUERIES_XZ, VERBATIM, KeptRuns, kept_bytes, kept_files
from memrepro.runs.record import RunRecord
from memrepro.tables.runs import Run, complete_runs, unusable


@dataclass(frozen=True)
class KeptRun(Run):
    """A run read from its kept copy: the same :class:`Run`, its rows decompressed and verified when first read."""

    @cached_property
    def manifest_files(self) -> dict[str, Any]:
        return kept_files(self.folder)  # the kept manifest, or DamagedFileError naming it

    def verify_listed(self) -> None:
        """The manifest, the verbatim files against it, and the run record (cheap: not the queries)."""
        for name in VERBATIM:
            kept_bytes(self.folder, name, self.manifest_files)
        RunRecord.read(self.folder / "metrics.json")

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        data = kept_bytes(self.folder, QUERIES, self.manifest_files)  # decompressed, then checked
        return parse_queries_lines(data.splitlines(), self.folder / QUERIES_XZ)


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
