"""Kept runs: compressed copies of complete run folders, committed so that expensive runs outlive a checkout.

Why: run folders (``results/runs``, git-ignored, 5-50 MB each) stay on the machine that computed them, while a
five-seed full-pool row costs 6-8 CPU hours, more than one sitting. A run kept with ``python -m memrepro keep
<run folder>`` travels with the repository; a later ``run`` of the same config (same run id) restores it instead of
computing it, and a run over more seeds reuses its splits (``memrepro.runs.seed_reuse``) on any clone.

Layout: ``<kept_dir>/<dataset>/<retriever>/<encoder>/<run id>/`` (the run's path under ``results/runs``) holds
``config.yaml``, ``metrics.json`` and the ``COMPLETE`` manifest verbatim and ``queries.jsonl.xz``. ``run.trec`` is
not kept: it is the top-N of ``queries.jsonl`` written out, and a restored folder writes it when first asked for
(``memrepro.runs.folder.trec_file``), checked then against the manifest.

Trust: a restore rebuilds every file, checks each against the kept manifest's size and sha256 before the folder
is committed, and refuses with the kept file named otherwise (a damaged or edited copy never becomes a different
number). Keeping verifies the source run the same way first.

Leftovers: a ``keep`` (or a run) killed mid-way leaves a dot-named ``.<run id>.tmp-*`` folder. ``keep``,
``keep --restore`` and ``tables`` remove those under ``<kept_dir>`` and ``results/runs`` once no process can be
writing them (untouched for :data:`memrepro.files.STALE_AFTER_S`), one line each.
"""

from __future__ import annotations

import hashlib
import json
import logging
import lzma
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from memrepro.errors import DamagedFileError, MemreproError, one_line
from memrepro.files import TMP_TAG, naming
from memrepro.runs.folder import (COMPLETE, ON_DEMAND, RunWriter, is_complete, put_in_place, read_manifest,
                                  remove_leftovers, run_problem, trec_file)

log = logging.getLogger("memrepro")

VERBATIM = ("config.yaml", "metrics.json")  # copied byte for byte; COMPLETE too, written last
QUERIES, QUERIES_XZ = "queries.jsonl", "queries.jsonl.xz"
KEPT_FILES = (*VERBATIM, QUERIES_XZ, COMPLETE)  # what a kept copy holds
FIX = "restore the kept copy from git (git checkout -- <path>) or recompute the run"


class KeptRunError(MemreproError, ValueError):
    """A folder that cannot be kept (not a complete, verified run under the results folder)."""


@dataclass(frozen=True)
class KeptRuns:
    """Maps a run folder under ``<results_dir>/runs`` to its kept copy under ``kept_dir`` and back."""

    results_dir: Path
    kept_dir: Path
    say: Callable[[str], None] = field(default=lambda line: log.warning("%s", line), compare=False)  # one line each

    def copy_of(self, folder: Path) -> Path:
        """Where ``folder``'s kept copy is (or would be)."""
        runs = Path(self.results_dir) / "runs"
        try:
            relative = Path(os.path.abspath(folder)).relative_to(os.path.abspath(runs))
        except ValueError:
            raise KeptRunError(f"{folder} is not a run folder under {runs}; keep only runs there "
                               f"(results/runs/<dataset>/<retriever>/<encoder>/<run id>)") from None
        if len(relative.parts) != 4:
            raise KeptRunError(f"{folder} is not a run folder (expected {runs}/<dataset>/<retriever>/<encoder>/"
                               f"<run id>)")
        return Path(self.kept_dir) / relative

    def folder_of(self, kept: Path) -> Path:
        return Path(self.results_dir) / "runs" / Path(kept).relative_to(self.kept_dir)

    def all(self) -> list[Path]:
        """Every kept copy. Dot-named folders are skipped: a ``keep`` killed between writing its temporary
        folder's ``COMPLETE`` and the rename leaves a ``.<run id>.tmp-*`` folder that is not a kept run."""
        markers = Path(self.kept_dir).glob(f"*/*/*/*/{COMPLETE}")
        return sorted(m.parent for m in markers
                      if not any(part.startswith(".") for part in m.parent.relative_to(self.kept_dir).parts))

    def remove_leftovers(self) -> list[str]:
        """Remove what killed keeps, restores and runs left (temporary folders no process is writing any more)
        under the kept runs and ``results/runs``; each thing done is said in one line and returned."""
        done = remove_leftovers(Path(self.kept_dir), KEPT_FILES) + remove_leftovers(Path(self.results_dir) / "runs")
        for line in done:
            self.say(line)
        return done

    def keep(self, folder: Path) -> Path:
        """Write ``folder``'s kept copy (atomically) after verifying the run; returns the copy's path. (``keep``
        removes leftovers of killed writes once, before its folders: :meth:`remove_leftovers`.)"""
        folder = Path(folder)
        if not is_complete(folder):
            raise KeptRunError(f"{folder} is not a complete run (no {COMPLETE} marker); only finished runs are kept")
        problem = run_problem(folder)
        if problem:
            raise KeptRunError(f"{problem}; rerun its command, then keep it")
        kept = self.copy_of(folder)
        tmp = kept.parent / f".{kept.name}{TMP_TAG}{uuid.uuid4().hex[:8]}"  # a name remove_leftovers knows
        tmp.mkdir(parents=True)
        try:
            with naming(kept):
                for name in VERBATIM:
                    (tmp / name).write_bytes((folder / name).read_bytes())
                with lzma.open(tmp / QUERIES_XZ, "wb", preset=6) as handle:
                    handle.write((folder / QUERIES).read_bytes())
                (tmp / COMPLETE).write_bytes((folder / COMPLETE).read_bytes())  # last: marks the copy whole
            put_in_place(tmp, kept, KEPT_FILES)
        except BaseException:
            _remove(tmp)
            raise
        return kept

    def restore(self, folder: Path, announce: bool = True) -> Path | None:
        """Rebuild ``folder`` from its kept copy when a copy exists and ``folder`` is not a complete, verified run
        (a damaged folder is replaced, a user's own files in it kept); the folder restored, or None (said in a line
        unless ``announce`` is off: the caller says it). A copy that does not verify raises
        :class:`DamagedFileError` naming the kept file (nothing is written)."""
        folder = Path(folder)
        try:
            kept = self.copy_of(folder)
        except KeptRunError:
            return None
        if not (kept / COMPLETE).is_file() or run_problem(folder) is None:
            return None
        restored = restore(kept, folder)
        if announce:
            log.info("restored %s from its kept copy %s", folder, kept)
        return restored

    def restore_or_warn(self, folder: Path, otherwise: str, announce: bool = True) -> Path | None:
        """:meth:`restore`, with a damaged copy named in a warning ending in ``otherwise`` (None) instead of
        raised."""
        try:
            return self.restore(folder, announce)
        except DamagedFileError as exc:
            log.warning("%s; %s", exc, otherwise)
            return None

    def restore_all(self, trec: bool = False, folders: list[Path] | None = None) -> tuple[list[Path], list[str]]:
        """Restore every kept run absent from ``results/runs`` (or those of ``folders``, run folders under it):
        (restored folders, one line per damaged copy or folder). ``trec``: write the ``run.trec`` of each such
        folder that lacks one too (restored now or before; :func:`memrepro.runs.folder.trec_file`). Leftovers of
        killed writes are removed first (:meth:`remove_leftovers`)."""
        self.remove_leftovers()
        restored, problems = [], []
        for folder in (map(self.folder_of, self.all()) if folders is None else map(Path, folders)):
            try:
                if self.restore(folder, announce=False) is not None:  # the caller says how many, in one line
                    restored.append(folder)
                elif folders is not None and not is_complete(folder):
                    raise KeptRunError(f"{folder}: no kept copy at {self.copy_of(folder)} and not a complete run")
                if trec and is_complete(folder):
                    trec_file(folder)
            except MemreproError as exc:  # one damaged copy does not stop the others
                problems.append(one_line(exc))
        return restored, problems


def restore(kept: Path, folder: Path) -> Path:
    """Write the run folder ``folder`` from the kept copy ``kept``; committed only when the rebuilt folder's
    manifest equals the kept one (every file's size and sha256, the row count). ``run.trec`` is not written here:
    its entry is the kept manifest's, and :func:`memrepro.runs.folder.trec_file` writes and checks it when it is
    first asked for."""
    marker = kept / COMPLETE
    try:
        manifest = read_manifest(kept)
    except DamagedFileError as exc:
        raise DamagedFileError(marker, exc.problem, FIX) from None
    expected = manifest["files"]
    verbatim = {}
    for name in VERBATIM:
        try:
            verbatim[name] = (kept / name).read_bytes()
        except FileNotFoundError:
            raise DamagedFileError(kept / name, "missing from a kept run", FIX) from None
    _check_run_id(kept, verbatim["metrics.json"], folder.name)
    writer = RunWriter(folder)
    try:
        for name, data in verbatim.items():
            writer.write_bytes(name, data)
        try:
            with lzma.open(kept / QUERIES_XZ, "rb") as handle:
                queries = handle.read()
        except (OSError, lzma.LZMAError, EOFError) as exc:
            raise DamagedFileError(kept / QUERIES_XZ, f"unreadable ({type(exc).__name__}: {exc})", FIX) from None
        writer.write_bytes(QUERIES, queries)
        writer.rows = queries.count(b"\n")  # one compact JSON row per line, as write_jsonl counts them
        rebuilt = writer.manifest()
        rebuilt["files"].update({name: expected[name] for name in ON_DEMAND if name in expected})
        if rebuilt != manifest:
            differs = [name for name in sorted({*expected, *rebuilt["files"]})
                       if expected.get(name) != rebuilt["files"].get(name)]
            if differs:  # named after the kept file it came from
                source = kept / (QUERIES_XZ if differs[0] == QUERIES else differs[0])
                raise DamagedFileError(source, f"does not rebuild {differs[0]} as the kept manifest records it "
                                       f"(damaged or edited)", FIX)
            raise DamagedFileError(marker, f"differs from the rebuilt folder's manifest (format or row count: "
                                   f"{rebuilt['rows']} rows rebuilt)", FIX)
        return writer.commit(rebuilt)
    except BaseException:
        writer.abort()
        raise


def _check_run_id(kept: Path, metrics: bytes, run_id: str) -> None:
    """A kept copy holds the run whose id names its folder: one moved or copied to another id (another config) is
    refused, naming its ``metrics.json``, before anything is written. (Its files are hashed after.)"""
    try:
        recorded = json.loads(metrics).get("run_id")
    except (ValueError, AttributeError):
        recorded = None  # unreadable: the manifest check names the file
    if recorded is not None and recorded != run_id:
        raise DamagedFileError(kept / "metrics.json", f"records run {recorded}, not {run_id}, the run id its folder "
                                                      f"names (a copy moved or copied to another run id)", FIX)


def kept_bytes(kept: Path, name: str, files: dict) -> bytes:
    """The bytes of the run file ``name`` as the kept copy ``kept`` holds it (``queries.jsonl`` decompressed),
    checked against the kept manifest's ``files`` (size and sha256); :class:`DamagedFileError` names the kept file
    otherwise."""
    source = kept / (QUERIES_XZ if name == QUERIES else name)
    try:
        data = lzma.decompress(source.read_bytes()) if name == QUERIES else source.read_bytes()
    except FileNotFoundError:
        raise DamagedFileError(source, "missing from a kept run", FIX) from None
    except (OSError, lzma.LZMAError, EOFError) as exc:
        raise DamagedFileError(source, f"unreadable ({type(exc).__name__}: {exc})", FIX) from None
    want = files.get(name) or {}
    if len(data) != want.get("bytes") or hashlib.sha256(data).hexdigest() != want.get("sha256"):
        raise DamagedFileError(source, f"does not hold the {name} the kept manifest records (damaged or edited)", FIX)
    return data


def kept_files(kept: Path) -> dict:
    """The kept manifest's ``files``, or :class:`DamagedFileError` naming the marker (:func:`read_manifest`)."""
    try:
        return read_manifest(kept)["files"]
    except DamagedFileError as exc:
        raise DamagedFileError(exc.path, exc.problem, FIX) from None


def read_kept_file(kept: Path, name: str) -> bytes:
    """The bytes of ``name`` (``config.yaml`` or ``metrics.json``) in the kept copy ``kept``, verified."""
    return kept_bytes(kept, name, kept_files(kept))


def read_in_place(kept: Path) -> tuple[dict, "RunRecord", list[dict]]:
    """A kept copy's config, record and query rows, read without restoring it: each file is checked against the
    kept manifest (size and sha256; ``queries.jsonl`` once decompressed) and a damaged one is a
    :class:`DamagedFileError` naming the kept file."""
    import yaml

    from memrepro.runs.record import RunRecord

    files = kept_files(kept)
    contents = {name: kept_bytes(kept, name, files) for name in (*VERBATIM, QUERIES)}
    config = yaml.safe_load(contents["config.yaml"].decode("utf-8"))
    record = RunRecord.from_json(json.loads(contents["metrics.json"]), kept / "metrics.json")
    rows = [json.loads(line) for line in contents[QUERIES].decode("utf-8").splitlines() if line.strip()]
    return config, record, rows


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
