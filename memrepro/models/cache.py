"""On-disk embedding cache: one folder per encoder identity, append-only shards of ``.npy`` vectors, each verified.

The key is everything that changes a vector: the encoder identity (model, weights hash, max length,
normalisation, dtype, the role's prefix) names the folder; the text's sha256 names the row.

A shard is three files written in this order, each atomically (temporary file, fsync, rename):
``<shard>.npy`` (the vectors), ``<shard>.meta.json`` (row count, dim, dtype, sha256 of the ``.npy`` bytes and of
the ``.keys`` bytes) and ``<shard>.keys`` (one text sha256 per row). The keys file is what makes a shard visible,
so an interrupted write leaves nothing that reads back as cached; concurrent writers use distinct shard names.

Nothing read back is trusted unverified. Before a shard serves its first vector in a process:

* its bytes are hashed and compared with its ``.meta.json``, and its shape with the row count and dim; a shard that
  fails (garbled bytes, a deleted or edited key line, a truncated or zero-length file, a damaged header, non-ASCII
  keys, a deleted ``.npy``) is damaged;
* it must belong to the folder's identity: the metadata names the identity it was written for, and the vectors'
  dim, dtype and norms must fit it; a shard of another encoder copied into the folder is foreign;
* a shard whose metadata names no identity (written before it did) has a deterministic sample of its rows
  (``ROW_CHECK_SAMPLE``) re-encoded, and is bound to the identity when they agree with the stored rows; a shard
  without any metadata has no digests, so each of its rows is re-encoded before it is served, and it is adopted
  (given its metadata) once all of them agreed.

A damaged or foreign shard, or one whose rows disagree, is reported with the file at fault, moved to
``quarantine/`` beside it, and its rows count as missing, so they are encoded again and the run completes with
correct vectors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from memrepro.context import FileDigests
from memrepro.datasets.io import sha256_file
from memrepro.files import STALE_AFTER_S, naming

log = logging.getLogger("memrepro")

META_SUFFIX = ".meta.json"
QUARANTINE = "quarantine"
FORMAT = 2  # 2: the metadata names the identity the rows were written for; 1: it does not
_KEY = re.compile(r"^[0-9a-f]{64}$")
_NORM_TOLERANCE = 1e-3  # rows of a normalising encoder are unit-norm (or zero) float32
ROW_CHECK_SAMPLE = 8  # rows re-encoded to bind a shard whose metadata names no identity
# 1 - cosine between a stored row and its re-encoding (float noise across devices is far smaller; another text's vector
# is far larger)
ROW_CHECK_TOLERANCE = 1e-5
Reencode = Callable[[Sequence[str]], np.ndarray]  # texts -> the vectors the cache's encoder gives them now


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identity_key(identity: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(dict(identity), sort_keys=True, default=str).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Quarantined:
    path: str  # the shard's file at fault (.npy, .keys or .meta.json) as it was found
    reason: str
    rows: int
    moved_to: str


class ShardDamaged(Exception):
    """A shard that cannot serve: ``suffix`` names its file at fault; ``foreign``: intact, but another encoder's."""

    def __init__(self, reason: str, suffix: str = ".npy", foreign: bool = False) -> None:
        super().__init__(reason)
        self.suffix, self.foreign = suffix, foreign


class EmbeddingCache:
    """One identity's folder of shards. ``reencode`` (texts -> vectors from the identity's encoder) lets it check
    rows of shards that cannot prove their identity (see the module docstring); without it, or without the texts,
    such rows are reported missing rather than served. ``digests``: the run context's, so that the caches of a
    sweep's points hash each shard once (:class:`memrepro.context.FileDigests`)."""

    def __init__(self, root: str | os.PathLike[str], identity: Mapping[str, object],
                 reencode: Reencode | None = None, digests: FileDigests | None = None) -> None:
        self.folder = Path(root) / identity_key(identity)
        self.identity = dict(identity)
        self.reencode = reencode
        self.digests = digests if digests is not None else FileDigests()
        self._index: dict[str, tuple[str, int]] | None = None
        self._shard_keys: dict[str, list[str]] = {}
        self._shards: dict[str, np.ndarray] = {}  # verified shards only
        self._unbound: dict[str, dict | None] = {}  # verified shards whose rows await a re-encoding check: metadata
        self._checked_rows: dict[str, set[int]] = {}  # rows of unbound shards that re-encoded to their stored vector
        self.quarantined: list[Quarantined] = []

    # ------------------------------------------------------------------------------------------------ reading

    def _load_index(self) -> dict[str, tuple[str, int]]:
        if self._index is None:
            self._index = {}
            removed = remove_leftovers(self.folder)
            if removed:
                log.info("embedding cache %s: removed %d file(s) of interrupted writes (%s)", self.folder,
                         len(removed), ", ".join(removed[:3]) + (" ..." if len(removed) > 3 else ""))
            if self.folder.is_dir():
                for keys_file in sorted(self.folder.glob("*.keys")):
                    if keys_file.name.startswith("."):
                        continue
                    shard = keys_file.stem
                    try:
                        keys = _read_keys(keys_file)
                    except ShardDamaged as exc:
                        self._quarantine(shard, exc, rows=0)
                        continue
                    self._shard_keys[shard] = keys
                    for row, key in enumerate(keys):
                        self._index.setdefault(key, (shard, row))
        return self._index

    def _verified_shard(self, shard: str) -> np.ndarray | None:
        """The shard's vectors after verification, or None once it has been quarantined."""
        if shard in self._shards:
            return self._shards[shard]
        keys = self._shard_keys.get(shard)
        if keys is None:
            return None
        try:
            vectors, meta = _verify(self.folder, shard, keys, self.digests)
            self._check_identity(meta, vectors)
        except ShardDamaged as exc:
            self._quarantine(shard, exc, rows=len(keys))
            return None
        if meta is None or "identity" not in meta:
            self._unbound[shard] = meta
        self._shards[shard] = vectors
        return vectors

    def _check_identity(self, meta: dict | None, vectors: np.ndarray) -> None:
        """Refuse a shard written for another identity: the one its metadata names, or a dim, dtype or norm that
        this identity's encoder never writes."""
        named = (meta or {}).get("identity")
        if named is not None and named != self.folder.name:
            raise ShardDamaged(f"written for encoder identity {named}, this folder is {self.folder.name}",
                               META_SUFFIX, foreign=True)
        dim = self.identity.get("dim")
        if dim is not None and vectors.shape[1] != dim:
            raise ShardDamaged(f"its vectors are {vectors.shape[1]}-d, this encoder's identity is {dim}-d",
                               foreign=True)
        dtype, expected = (meta or {}).get("dtype", "float32"), self.identity.get("dtype", "float32")
        if dtype != expected:
            raise ShardDamaged(f"its vectors are {dtype}, this encoder's identity is {expected}", META_SUFFIX,
                               foreign=True)
        # a shard without metadata had its norms checked already (_legacy_vectors)
        if meta is not None and self.identity.get("normalize") and not _unit_rows(vectors):
            raise ShardDamaged("its vectors are not unit-norm, this encoder's identity normalises", foreign=True)

    def lookup(self, keys: Sequence[str], texts: Sequence[str] | None = None,
               ) -> tuple[dict[int, np.ndarray], list[int]]:
        """Vectors found for ``keys`` (by position) and the positions still missing. ``texts`` (the texts of
        ``keys``) let rows of a shard that cannot prove its identity be checked by re-encoding them."""
        index = self._load_index()
        found: dict[int, np.ndarray] = {}
        missing: list[int] = []
        pending = list(range(len(keys)))
        while pending:  # a round per quarantine: a key of a quarantined shard may still be held by another shard
            wanted: dict[str, list[tuple[int, int]]] = {}
            for position in pending:
                hit = index.get(keys[position])
                if hit is None:
                    missing.append(position)
                else:
                    wanted.setdefault(hit[0], []).append((position, hit[1]))
            pending = []
            for shard, rows in wanted.items():
                vectors = self._verified_shard(shard)
                if vectors is not None and shard in self._unbound:
                    checked = self._check_rows(shard, vectors, {row: texts[p] if texts is not None else None
                                                                for p, row in rows})
                    if checked is None:  # no re-encoder here: these rows cannot be served
                        missing += [p for p, _ in rows]
                        continue
                    if not checked:  # quarantined: its keys left the index
                        vectors = None
                if vectors is None:
                    pending += [p for p, _ in rows]
                    continue
                for position, row in rows:
                    found[position] = np.array(vectors[row], dtype=np.float32)
        return found, sorted(missing)

    def _check_rows(self, shard: str, vectors: np.ndarray, texts: Mapping[int, str | None]) -> bool | None:
        """Re-encode rows of an unbound shard and compare them with the stored ones: True when they agree (the shard
        is bound to this identity once enough rows did), False when it was quarantined, None when it cannot be
        checked here. A shard with metadata (digests since it was written) needs a sample; one without, every row."""
        meta = self._unbound[shard]
        checked = self._checked_rows.setdefault(shard, set())
        todo = sorted(row for row in texts if row not in checked)
        if meta is not None:  # digests vouch for every row since one writer wrote them: a sample tells which
            todo = _spread(todo, ROW_CHECK_SAMPLE)
        if todo:
            if self.reencode is None or any(texts[row] is None for row in todo):
                return None
            fresh = np.asarray(self.reencode([texts[row] for row in todo]), dtype=np.float32)
            problem = _disagreement(np.asarray(vectors[todo], dtype=np.float32), fresh, todo)
            if problem:
                self._quarantine(shard, ShardDamaged(problem, foreign=meta is not None),
                                 rows=len(self._shard_keys.get(shard, ())))
                return False
            checked.update(todo)
        if meta is not None or len(checked) == len(vectors):
            self._bind(shard, meta, len(checked))
        return True

    def _bind(self, shard: str, meta: dict | None, checked: int) -> None:
        """Record in the shard's metadata that its rows are this identity's (a legacy shard gets its digests)."""
        keys = self._shard_keys[shard]
        npy_path, meta_path = self.folder / f"{shard}.npy", self.folder / f"{shard}{META_SUFFIX}"
        if meta is None:
            vectors = self._shards[shard]
            meta = {"rows": int(vectors.shape[0]), "dim": int(vectors.shape[1]), "dtype": "float32",
                    "npy_sha256": sha256_file(npy_path),
                    "keys_sha256": hashlib.sha256("\n".join(keys).encode("ascii")).hexdigest(), "adopted": True}
        try:
            _atomic_write_bytes(meta_path, json.dumps({**meta, "format": FORMAT, "identity": self.folder.name},
                                                      sort_keys=True).encode())
        except OSError:  # a read-only cache still serves the checked rows
            pass
        del self._unbound[shard]
        self._checked_rows.pop(shard, None)
        log.info("embedding cache shard %s: %d rows re-encoded agree with the stored ones; bound to this encoder",
                 npy_path, checked)

    def _quarantine(self, shard: str, problem: ShardDamaged, rows: int) -> None:
        target = self.folder / QUARANTINE
        stamp = time.strftime("%Y%m%dT%H%M%S")
        moved = []
        for suffix in (".keys", META_SUFFIX, ".npy"):
            source = self.folder / f"{shard}{suffix}"
            if source.exists():
                target.mkdir(parents=True, exist_ok=True)
                destination = target / f"{stamp}-{shard}{suffix}"
                try:
                    os.replace(source, destination)
                    moved.append(destination)
                except FileNotFoundError:  # another process quarantined it first
                    pass
        for key in self._shard_keys.pop(shard, []):
            if self._index is not None and self._index.get(key, ("",))[0] == shard:
                del self._index[key]
        self._shards.pop(shard, None)
        self._unbound.pop(shard, None)
        self._checked_rows.pop(shard, None)
        if self._index is not None:  # keys of this shard that other shards also hold stay findable
            for other, other_keys in self._shard_keys.items():
                for row, key in enumerate(other_keys):
                    self._index.setdefault(key, (other, row))
        at_fault = self.folder / f"{shard}{problem.suffix}"
        moved_to = str(target) if moved else "(already moved)"
        self.quarantined.append(Quarantined(str(at_fault), str(problem), rows, moved_to))
        log.warning("embedding cache shard %s %s (%s): moved to %s; its %d rows are encoded again", at_fault,
                    "belongs to another encoder" if problem.foreign else "is damaged", problem, moved_to, rows)

    # ------------------------------------------------------------------------------------------------ writing

    def store(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        if len(keys) == 0:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(keys):
            raise ValueError(f"cache store: {len(keys)} keys for vectors of shape {vectors.shape}")
        self.folder.mkdir(parents=True, exist_ok=True)
        manifest = self.folder / "identity.json"
        if not manifest.exists():
            _atomic_write_bytes(manifest, json.dumps(self.identity, indent=2, sort_keys=True,
                                                     default=str).encode())
        shard = uuid.uuid4().hex
        npy_path = self.folder / f"{shard}.npy"
        tmp = self.folder / f".{shard}.npy.tmp"
        try:
            with naming(npy_path), open(tmp, "wb") as handle:
                np.save(handle, vectors)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, npy_path)
            keys_bytes = "\n".join(keys).encode("ascii")
            npy_sha256 = sha256_file(npy_path)
            meta = {"format": FORMAT, "identity": self.folder.name, "rows": int(vectors.shape[0]),
                    "dim": int(vectors.shape[1]), "dtype": "float32", "npy_sha256": npy_sha256,
                    "keys_sha256": hashlib.sha256(keys_bytes).hexdigest()}
            _atomic_write_bytes(self.folder / f"{shard}{META_SUFFIX}", json.dumps(meta, sort_keys=True).encode())
            _atomic_write_bytes(self.folder / f"{shard}.keys", keys_bytes)  # last: the shard becomes visible
        except BaseException:  # a full disk, Ctrl-C: nothing of the invisible shard stays behind
            for leftover in (tmp, npy_path, self.folder / f"{shard}{META_SUFFIX}"):
                leftover.unlink(missing_ok=True)
            raise
        self.digests.remember(npy_path, npy_sha256)
        index = self._load_index()
        self._shard_keys[shard] = list(keys)
        self._shards[shard] = vectors
        for row, key in enumerate(keys):
            index[key] = (shard, row)


def _read_keys(path: Path) -> list[str]:
    data = path.read_bytes()
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise ShardDamaged(f"keys file has non-ASCII bytes at offset {exc.start}", ".keys") from None
    keys = text.split("\n") if text else []
    bad = next((i for i, key in enumerate(keys) if not _KEY.match(key)), None)
    if bad is not None:
        raise ShardDamaged(f"keys file line {bad + 1} is not a sha256 key", ".keys")
    return keys


def _verify(folder: Path, shard: str, keys: list[str], digests: FileDigests) -> tuple[np.ndarray, dict | None]:
    """The shard's vectors (memory-mapped) after checking them against its metadata, and the metadata (None for a
    shard written before metadata existed: checked structurally); raises ShardDamaged."""
    npy_path, meta_path = folder / f"{shard}.npy", folder / f"{shard}{META_SUFFIX}"
    if not npy_path.is_file():
        raise ShardDamaged("its .npy file is missing")
    if not meta_path.is_file():
        return _legacy_vectors(npy_path, keys), None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        rows, dim = int(meta["rows"]), int(meta["dim"])
        npy_sha, keys_sha = str(meta["npy_sha256"]), str(meta["keys_sha256"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ShardDamaged(f"unreadable {META_SUFFIX} ({type(exc).__name__})", META_SUFFIX) from None
    if len(keys) != rows:
        raise ShardDamaged(f"{len(keys)} keys for {rows} rows", ".keys")
    if hashlib.sha256("\n".join(keys).encode("ascii")).hexdigest() != keys_sha:
        raise ShardDamaged("keys sha256 differs from its metadata", ".keys")
    if digests.sha256(npy_path) != npy_sha:
        raise ShardDamaged("vectors sha256 differs from its metadata")
    vectors = _load_npy(npy_path)
    if vectors.shape != (rows, dim):
        raise ShardDamaged(f"vectors have shape {vectors.shape}, metadata says ({rows}, {dim})")
    return vectors, meta


def _load_npy(path: Path) -> np.ndarray:
    try:
        vectors = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:  # truncated, zero-length, damaged header
        raise ShardDamaged(f"unreadable .npy ({type(exc).__name__}: {str(exc)[:80]})") from None
    if vectors.dtype != np.float32 or vectors.ndim != 2:
        raise ShardDamaged(f"expected a 2-D float32 array, found {vectors.dtype} with shape {vectors.shape}")
    return vectors


def _legacy_vectors(npy_path: Path, keys: list[str]) -> np.ndarray:
    """A shard from before digests, checked structurally (its rows are then re-encoded before they serve)."""
    vectors = _load_npy(npy_path)
    if vectors.shape[0] != len(keys):
        raise ShardDamaged(f"{len(keys)} keys for {vectors.shape[0]} rows", ".keys")
    if not np.isfinite(np.asarray(vectors, dtype=np.float64)).all():
        raise ShardDamaged("non-finite values in the vectors")
    if not _unit_rows(vectors):
        raise ShardDamaged("vectors are not unit-norm (garbled bytes)")
    return vectors


def _unit_rows(vectors: np.ndarray) -> bool:
    norms = np.linalg.norm(np.asarray(vectors, dtype=np.float64), axis=1)
    return bool(np.all((norms == 0) | (np.abs(norms - 1.0) <= _NORM_TOLERANCE)))


def _spread(rows: list[int], n: int) -> list[int]:
    """At most ``n`` of ``rows``, evenly spaced from the first to the last (deterministic)."""
    if len(rows) <= n:
        return rows
    return [rows[round(i * (len(rows) - 1) / (n - 1))] for i in range(n)] if n > 1 else rows[:1]


def _disagreement(stored: np.ndarray, fresh: np.ndarray, rows: Sequence[int]) -> str | None:
    """Why stored rows are not what the encoder gives now (None when every row agrees to ROW_CHECK_TOLERANCE)."""
    if stored.shape != fresh.shape:
        return f"its rows are {stored.shape[1]}-d, this encoder gives {fresh.shape[1]}-d vectors"
    a, b = np.asarray(stored, dtype=np.float64), np.asarray(fresh, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    both_zero = ~a.any(axis=1) & ~b.any(axis=1)
    cosine = np.where(norms > 0, np.sum(a * b, axis=1) / np.where(norms > 0, norms, 1.0), both_zero * 1.0)
    off = np.flatnonzero(1.0 - cosine > ROW_CHECK_TOLERANCE)
    if off.size == 0:
        return None
    return (f"{off.size} of {len(rows)} re-encoded rows differ from the stored ones (row {rows[off[0]]}: cosine "
            f"{cosine[off[0]]:.4f})")


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with naming(path), open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_leftovers(folder: Path, older_than_s: float = STALE_AFTER_S) -> list[str]:
    """Delete what killed writes left in a cache folder: temporary files (``.<name>.tmp``) and the ``.npy`` /
    ``.meta.json`` of a shard whose ``.keys`` was never written (invisible, never read), once untouched for
    ``older_than_s`` (a younger one may be another process's write in progress). Returns the names removed."""
    removed = []
    now = time.time()
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        shard = path.name.removesuffix(".npy").removesuffix(META_SUFFIX)
        leftover = (path.name.startswith(".") and path.name.endswith(".tmp")) or (
            shard != path.name and not path.name.startswith(".") and not (folder / f"{shard}.keys").exists())
        try:
            if leftover and path.is_file() and now - path.stat().st_mtime >= older_than_s:
                path.unlink()
                removed.append(path.name)
        except FileNotFoundError:  # another process finished or removed it meanwhile
            continue
    return removed
