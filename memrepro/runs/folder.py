"""Run folders: written atomically, completion marker last, verified when read back, skipped when complete.

Layout of one run (``results/runs/<dataset>/<retriever>/<encoder>/<run id>/``):
``config.yaml`` (resolved config), ``queries.jsonl`` (one row per (split, query): top-N ids and scores, the rank
of every gold item, per-query metrics, category, split seed, latency), ``run.trec`` (TREC run file of the
top-N), ``metrics.json`` (aggregates + provenance) and ``COMPLETE`` (written last: a manifest with the sha256 and
size of every other file and the number of query rows).

``run.trec`` is the top-N of ``queries.jsonl`` written out. A computed run writes it; a run restored from its kept
copy writes it when first asked for (:func:`trec_file`: ``eval`` of it, ``keep --restore``), checked then against
the size and sha256 its manifest records: formatting its lines would be most of a restore's time, and most
restored runs are only read for their metrics and rows.

Crash consistency: the folder is assembled (every file fsynced) under the temporary name ``.<run id>.tmp-<x>`` and
renamed into place; an ``overwrite=true`` commit first moves the old folder to ``.<run id>.old-<x>``. Readers
never look at names that start with a dot, and the next run of that id (under its lock) finishes or removes
whatever a kill left: a complete, verified ``.tmp-*`` whose final folder is missing is renamed into place, every
other temporary folder is deleted. ``keep`` and ``tables`` do the same for every run id whose temporary folders
are older than :data:`STALE_AFTER_S` (younger ones may belong to a process still writing). Every read verifies the
folder by content: a marker that is not a manifest (emptied, garbled, written by hand) or a file that fails it (an
empty or truncated ``metrics.json``, a corrupt line in ``queries.jsonl``) is reported with the file named and the
folder treated as incomplete.

Nothing memrepro did not write is deleted: files a user put in a run folder (notes) move into the folder that
replaces it, and a file found where a run folder belongs is renamed ``<run id>.moved-<x>``; each is said in one
line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping

import orjson
import yaml
from omegaconf import DictConfig, OmegaConf

from memrepro.datasets.io import sha256_file
from memrepro.errors import DamagedFileError
from memrepro.files import STALE_AFTER_S, TMP_TAG, naming, write_text_atomic
from memrepro.runs.record import RunRecord

COMPLETE = "COMPLETE"
MANIFEST_FORMAT = 1
OLD_TAG, MOVED_TAG = ".old-", ".moved-"
TREC = "run.trec"
RUN_FILES = ("config.yaml", "queries.jsonl", TREC, "metrics.json", COMPLETE)  # what a run writer writes
MANIFEST_REQUIRED = ("config.yaml", "queries.jsonl", "metrics.json")  # what readers read: always hashed
ON_DEMAND = (TREC,)  # listed in the manifest; a restored folder writes it when first asked for (trec_file)
_LEFTOVER = re.compile(rf"^\.(?P<id>.+)(?:{re.escape(TMP_TAG)}|{re.escape(OLD_TAG)})[0-9a-f]+$")
log = logging.getLogger("memrepro")


def run_dir(results_dir: str | os.PathLike[str], dataset: str, retriever: str, encoder: str, run_id: str) -> Path:
    safe = lambda s: "".join(c if c.isalnum() or c in "-_.+" else "_" for c in s)  # noqa: E731
    return Path(results_dir) / "runs" / safe(dataset) / safe(retriever) / safe(encoder) / run_id


def is_hidden(folder: Path) -> bool:
    """Temporary names (``.<id>.tmp-*``, ``.<id>.old-*``) and anything else starting with a dot: never a run."""
    return folder.name.startswith(".")


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` is marked complete; whether it is a run to read is :func:`run_problem` (verified)."""
    return not is_hidden(folder) and (folder / COMPLETE).is_file()


def read_manifest(folder: Path) -> dict[str, Any]:
    """The ``COMPLETE`` manifest of ``folder``, or :class:`DamagedFileError` naming the marker: it must be the JSON
    object a run writer writes (its format, every file's sha256 and size, the row count) and list the files a
    reader reads (:data:`MANIFEST_REQUIRED`). Anything else (a marker emptied, garbled, edited or written by hand)
    leaves the folder incomplete: nothing in it is trusted unhashed."""
    marker = folder / COMPLETE
    if not marker.is_file():
        raise DamagedFileError(marker, "missing: the run is not complete")
    try:
        manifest = json.loads(marker.read_bytes())
    except (UnicodeDecodeError, ValueError):
        manifest = None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("format") != MANIFEST_FORMAT or not all(
            isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and isinstance(entry.get("bytes"), int)
            for entry in files.values()):
        raise DamagedFileError(marker, "not a run manifest (damaged, emptied or written by hand): the run is "
                                       "incomplete")
    absent = [name for name in MANIFEST_REQUIRED if name not in files]
    if absent:
        raise DamagedFileError(marker, f"the manifest does not list {', '.join(absent)}: the run is incomplete")
    return manifest


def verify_run(folder: Path) -> dict[str, Any]:
    """The manifest of a complete-marked folder whose files verify, else :class:`DamagedFileError` naming the first
    file that fails: the marker is a manifest (:func:`read_manifest`), every file it lists has its size and sha256,
    and ``metrics.json`` is a valid run record (:class:`memrepro.runs.record.RunRecord`, older schemas migrated). A
    file of :data:`ON_DEMAND` may be absent (not written yet); when present it is checked as the others are."""
    manifest = read_manifest(folder)
    for name, expected in sorted(manifest["files"].items()):
        path = folder / name
        if not path.is_file():
            if name in ON_DEMAND:
                continue
            raise DamagedFileError(path, "missing from a complete run")
        if path.stat().st_size != expected["bytes"] or sha256_file(path) != expected["sha256"]:
            raise DamagedFileError(path, "differs from the run's manifest (damaged or edited)")
    RunRecord.read(folder / "metrics.json")
    return manifest


def run_problem(folder: Path) -> str | None:
    """None when ``folder`` is a complete run whose files verify, else what is wrong (file named)."""
    try:
        verify_run(folder)
    except DamagedFileError as exc:
        return str(exc)
    except OSError as exc:
        return f"{exc.filename or folder}: unreadable ({exc.strerror or exc})"
    return None


def parse_queries_file(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``queries.jsonl`` (any folder, complete or not), or DamagedFileError naming the bad line."""
    try:
        with open(path, "rb") as handle:
            return parse_queries_lines(handle, path)
    except FileNotFoundError:
        raise DamagedFileError(path, "missing from a complete run") from None


def parse_queries_lines(lines: Iterable[bytes | str], path: Path,
                        parse: Callable[[bytes | str], Any] | None = None) -> list[dict[str, Any]]:
    """The rows of ``queries.jsonl`` lines read from ``path`` (a file, or a kept run's decompressed copy), or
    DamagedFileError naming the bad line. ``parse``: how one line is read (:func:`json_row`, the whole row, by
    default)."""
    parse = parse or json_row
    rows = []
    for number, line in enumerate(lines, start=1):
        try:
            row = parse(line)
        except UnicodeDecodeError:
            raise DamagedFileError(path, f"line {number} is not UTF-8") from None
        except json.JSONDecodeError as exc:
            raise DamagedFileError(path, f"line {number} is not a JSON row ({exc.msg})") from None
        if not isinstance(row, dict):
            raise DamagedFileError(path, f"line {number} is not a JSON object")
        rows.append(row)
    return rows


def json_row(line: bytes | str) -> Any:
    """One JSON line, parsed by orjson (three times the standard parser's speed: a report reads every run's
    rows); what orjson refuses and ``json`` reads (NaN, a lone surrogate escape) by ``json``, which raises on the
    rest. Both give the same values."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


# Rows are written compactly with their ranking after the per-query fields; this key opens the ranking.
_RANKING_KEY = b',"top":'


def row_fields(line: bytes | str, fields: Collection[str]) -> dict[str, Any]:
    """``fields`` of one ``queries.jsonl`` row (a field the row lacks is left out), parsing only the part before
    the row's ranking when that part holds them: the ranking (``top``) is most of a row's bytes and of its parse
    time. Exact, not a guess: the part is only used when it parses as a JSON object on its own (the key cannot
    then sit inside a nested value: a nested cut leaves a bracket open) and no field it lacks is a key later in
    the line; any other row is parsed whole."""
    raw = line.encode("utf-8") if isinstance(line, str) else line
    cut = raw.find(_RANKING_KEY)
    if cut > 0:
        try:
            head = orjson.loads(raw[:cut] + b"}")
        except orjson.JSONDecodeError:
            head = None
        rest = raw[cut:]
        if isinstance(head, dict) and not any(name not in head and b'"%s":' % name.encode() in rest
                                              for name in fields):
            return {name: head[name] for name in fields if name in head}
    row = json_row(line)
    return {name: row[name] for name in fields if name in row} if isinstance(row, dict) else row


def read_row_fields(folder: Path, fields: Collection[str]) -> list[dict[str, Any]]:
    """``fields`` of every query row of a complete run whose manifest the caller has verified (:func:`row_fields`:
    what a reader of a few per-query fields needs, without parsing each ranking)."""
    if not is_complete(folder):
        raise FileNotFoundError(f"{folder} is not a complete run (no {COMPLETE} marker)")
    path = folder / "queries.jsonl"
    with open(path, "rb") as handle:
        return parse_queries_lines(handle, path, lambda line: row_fields(line, fields))


def read_config(folder: Path) -> dict[str, Any]:
    """The run's resolved ``config.yaml`` (a folder whose manifest the caller has verified)."""
    return yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))


def read_record(folder: Path) -> RunRecord:
    """The run's ``metrics.json``, validated (:class:`RunRecordError` names the file and the key)."""
    if not is_complete(folder):
        raise FileNotFoundError(f"{folder} is not a complete run (no {COMPLETE} marker)")
    return RunRecord.read(folder / "metrics.json")


def read_queries(folder: Path) -> list[dict[str, Any]]:
    if not is_complete(folder):
        raise FileNotFoundError(f"{folder} is not a complete run (no {COMPLETE} marker)")
    return parse_queries_file(folder / "queries.jsonl")


def stale_siblings(final: Path) -> list[Path]:
    """Temporary folders a killed commit of this run id left beside it."""
    if not final.parent.is_dir():
        return []
    prefix = f".{final.name}"
    return sorted(p for p in final.parent.iterdir()
                  if p.name.startswith(prefix + TMP_TAG) or p.name.startswith(prefix + OLD_TAG))


def recover(final: Path) -> list[str]:
    """Finish or undo a commit a kill interrupted (call under the run's lock); returns what was done, each line
    also logged.

    The final folder missing and a verified, complete ``.tmp-*`` present: that one is the newest finished run,
    renamed into place. Every other temporary folder of this run id is removed.
    """
    done = _recover(final)
    for line in done:
        log.warning("%s", line)
    return done


def _recover(final: Path, written: Iterable[str] = RUN_FILES) -> list[str]:
    done = []
    if not os.path.lexists(final):
        for candidate in stale_siblings(final):
            if candidate.name.startswith(f".{final.name}{TMP_TAG}") and run_problem(candidate) is None:
                os.replace(candidate, final)
                done.append(f"{final.parent}: completed the interrupted commit {candidate.name} → {final.name}")
                break
    for leftover in stale_siblings(final):
        done.append(discard(leftover, final, written))
    return done


def remove_leftovers(root: Path, written: Iterable[str] = RUN_FILES,
                     older_than_s: float = STALE_AFTER_S) -> list[str]:
    """:func:`recover` every id under ``root/<dataset>/<retriever>/<encoder>/`` whose temporary folders are all
    older than ``older_than_s`` (a younger one may be a live process's); returns one line per thing done."""
    finals = set()
    for path in Path(root).glob("*/*/*/.*"):
        match = _LEFTOVER.match(path.name)
        if match:
            finals.add(path.parent / match["id"])
    done = []
    for final in sorted(finals):
        if all(_untouched_for(p) >= older_than_s for p in stale_siblings(final)):
            done += _recover(final, written)
    return done


def _untouched_for(path: Path) -> float:
    """Seconds since ``path`` or, for a folder, anything it holds last changed (a writer adds and grows files);
    0 when it vanished meanwhile (another process is at work)."""
    try:
        times = [path.lstat().st_mtime]
        if path.is_dir() and not path.is_symlink():
            times += [p.lstat().st_mtime for p in path.iterdir()]
    except FileNotFoundError:
        return 0.0
    return time.time() - max(times)


def written_by_memrepro(folder: Path, written: Iterable[str] = RUN_FILES) -> set[str]:
    """The names in ``folder`` memrepro writes: ``written`` and whatever its ``COMPLETE`` manifest lists."""
    names = set(written)
    try:
        names.update(read_manifest(folder)["files"])
    except (OSError, DamagedFileError):
        pass  # no manifest (or a damaged one): the standard names only
    return names


def discard(leftover: Path, final: Path, written: Iterable[str] = RUN_FILES) -> str:
    """Delete ``leftover`` (a temporary or replaced folder of ``final``) and say what was done, in one line.
    Files memrepro did not write in it move into ``final`` (or, when there is none, into a new
    ``<id>.moved-<x>`` folder); a ``leftover`` that is a file or a link is not memrepro's and is only moved."""
    if leftover.is_symlink() or not leftover.is_dir():
        aside = _moved(final)
        os.replace(leftover, aside)
        return f"{leftover} is not a folder memrepro wrote: moved to {aside}"
    kept, home = carry_foreign(leftover, final, written)
    note = f"; kept {', '.join(kept)} (not written by memrepro) in {home}" if kept else ""
    problem = _remove_tree(leftover)
    if problem:
        return f"could not remove {leftover} ({problem}){note}; delete it by hand"
    return f"{final.parent}: removed {leftover.name}{note}"


def carry_foreign(old: Path, final: Path, written: Iterable[str] = RUN_FILES) -> tuple[list[str], Path | None]:
    """Move what memrepro did not write in ``old`` (a user's notes) into ``final``, or into a new
    ``<id>.moved-<x>`` folder when ``final`` is no folder; returns the names they have there, and where."""
    ours = written_by_memrepro(old, written)
    # ``.<name>.tmp-<pid>``: an atomic write of one of ours (trec_file) a kill interrupted
    foreign = sorted(p.name for p in old.iterdir()
                     if p.name not in ours and not any(p.name.startswith(f".{name}{TMP_TAG}") for name in ours))
    if not foreign:
        return [], None
    home = final if final.is_dir() and not final.is_symlink() else _moved(final)
    home.mkdir(exist_ok=True)
    kept = []
    for name in foreign:
        target = _free(home / name)
        os.replace(old / name, target)
        kept.append(target.name)
    return kept, home


def _remove_tree(folder: Path) -> str | None:
    """Delete ``folder``; None when done, else why not (a removal that fails is said, never skipped silently)."""
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _moved(path: Path) -> Path:
    """A new visible name beside ``path`` for something of the user's moved out of memrepro's way."""
    return path.with_name(f"{path.name}{MOVED_TAG}{uuid.uuid4().hex[:8]}")


def _free(path: Path) -> Path:
    """``path``, or a :func:`_moved` variant of it when that name is taken."""
    return _moved(path) if os.path.lexists(path) else path


def put_in_place(staged: Path, final: Path, written: Iterable[str] = RUN_FILES) -> None:
    """Rename the finished folder ``staged`` to ``final``. A folder there is moved aside first (a kill between the
    two renames leaves both, for :func:`recover`) and removed after the swap, what memrepro did not write in it
    carried into the new folder; a file or link there is moved to ``<id>.moved-<x>``. Whatever of the user's is
    kept is said in one line."""
    if os.path.lexists(final) and (final.is_symlink() or not final.is_dir()):
        aside = _moved(final)
        os.replace(final, aside)
        log.warning("%s is a file, not a folder memrepro wrote: moved to %s; the new folder takes its place",
                    final, aside)
    if os.path.lexists(final):
        trash = final.parent / f".{final.name}{OLD_TAG}{uuid.uuid4().hex[:8]}"
        os.replace(final, trash)
        os.replace(staged, final)
        kept, _ = carry_foreign(trash, final, written)
        if kept:
            log.warning("%s: kept %s from the folder it replaces (not written by memrepro)", final, ", ".join(kept))
        problem = _remove_tree(trash)
        if problem:
            log.warning("could not remove %s (%s), the folder %s replaces; delete it by hand", trash, problem, final)
    else:
        os.replace(staged, final)


def trec_text(rows: list[dict[str, Any]], tag: str) -> str:
    """``run.trec`` of a run: its rows' top-N written out (``split::query_id`` keys when there are several splits)."""
    multi_split = len({r["split"] for r in rows}) > 1
    lines = []
    for row in rows:
        qid = f"{row['split']}::{row['query_id']}" if multi_split else row["query_id"]
        for rank, (memory_id, score) in enumerate(row["top"], start=1):
            lines.append(f"{qid} Q0 {memory_id} {rank} {score:.9g} {tag}")  # 9 digits: float32 round-trips
    return "\n".join(lines) + ("\n" if lines else "")


def trec_file(folder: Path) -> Path:
    """The ``run.trec`` of the complete run ``folder``, written first when absent (a restored run): from its verified
    ``queries.jsonl``, checked against the size and sha256 its manifest records, then renamed into place. A folder
    that fails verification, or rows that do not give the recorded file, raise :class:`DamagedFileError` naming
    the file; nothing is written then."""
    path = folder / TREC
    if path.is_file():
        return path
    expected = verify_run(folder)["files"].get(TREC)
    if expected is None:
        raise DamagedFileError(folder / COMPLETE, f"the manifest does not list {TREC}; recompute the run "
                                                  f"(overwrite=true) to have one")
    text = trec_text(read_queries(folder), folder.name)  # tagged with the run id, the folder's name
    data = text.encode("utf-8")
    if len(data) != expected["bytes"] or hashlib.sha256(data).hexdigest() != expected["sha256"]:
        raise DamagedFileError(path, f"written from queries.jsonl, it differs from the {TREC} the manifest records "
                                     f"(a folder renamed or moved from its run id, or edited)",
                               "recompute the run (overwrite=true)")
    write_text_atomic(path, text)
    return path


def manifest_of(folder: Path, rows: int | None) -> dict[str, Any]:
    """A ``COMPLETE`` manifest of the files in ``folder``: the format, every file's sha256 and size, and ``rows``,
    the query row count."""
    files = {p.name: {"sha256": sha256_file(p), "bytes": p.stat().st_size}
             for p in sorted(folder.iterdir()) if p.is_file() and p.name != COMPLETE}
    return {"format": MANIFEST_FORMAT, "files": files, "rows": rows}


class RunWriter:
    """Collects a run's files in a temporary sibling folder; ``commit()`` writes the manifest and renames."""

    def __init__(self, final: Path) -> None:
        self.final = final
        final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = final.parent / f".{final.name}{TMP_TAG}{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir()
        self.rows: int | None = None

    def write_text(self, name: str, text: str) -> None:
        self._write(name, text.encode("utf-8"))

    def write_json(self, name: str, data: Mapping[str, Any]) -> None:
        self.write_text(name, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")

    def write_jsonl(self, name: str, rows: Iterable[Mapping[str, Any]]) -> None:
        lines = [json.dumps(row, separators=(",", ":"), default=str) + "\n" for row in rows]
        if name == "queries.jsonl":
            self.rows = len(lines)
        self._write(name, "".join(lines).encode("utf-8"))

    def write_bytes(self, name: str, data: bytes) -> None:
        self._write(name, data)

    def _write(self, name: str, data: bytes) -> None:
        with naming(self.final / name), open(self.tmp / name, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    def manifest(self) -> dict[str, Any]:
        """What ``COMPLETE`` will hold (:func:`manifest_of` the folder written so far)."""
        return manifest_of(self.tmp, self.rows)

    def commit(self, manifest: Mapping[str, Any] | None = None) -> Path:
        """Write the manifest (``manifest`` when the caller has just computed it, else computed here) and rename."""
        manifest = self.manifest() if manifest is None else manifest
        self._write(COMPLETE, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
        _fsync_dir(self.tmp)
        put_in_place(self.tmp, self.final)  # overwrite: the old run moved aside first, then swapped
        _fsync_dir(self.final.parent)
        return self.final

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def config_yaml(cfg: DictConfig | Mapping[str, Any]) -> str:
    """The resolved config as YAML, dumped by libyaml when present (OmegaConf's pure-Python dumper took about
    0.1 s per run, a sizeable part of a sweep point); keys keep the config's order."""
    import yaml

    plain = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(plain, Dumper=dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def write_run(folder: Path, cfg: DictConfig | Mapping[str, Any], rows: list[dict[str, Any]],
              record: RunRecord, run_id: str) -> Path:
    """The results folder (config.yaml, queries.jsonl, run.trec, metrics.json, COMPLETE), atomically."""
    writer = RunWriter(folder)
    try:
        writer.write_text("config.yaml", config_yaml(cfg))
        writer.write_jsonl("queries.jsonl", rows)
        writer.write_text(TREC, trec_text(rows, run_id))
        writer.write_json("metrics.json", record.to_json())
        return writer.commit()
    except BaseException:
        writer.abort()
        raise
