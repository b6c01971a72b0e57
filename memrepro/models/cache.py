"""On-disk embedding cache: one folder per encoder identity, append-only shards of ``.npy`` vectors, each verified.

The key is everything that changes a vector: the encoder identity (model, weights hash, max length,
normalisation, dtype, the role's prefix) names the folder; the text's sha256 names the row.

A shard is three files written in this order, each atomically (temporary file, fsync, rename):
``<shard>.npy`` (the vectors), ``<shard>.meta.json`` (row count, dim, dtype, sha256 of the ``.npy`` bytes and of
the ``.keys`` bytes) and ``<shard>.keys`` (one text sha256 per row). The keys file is what makes a shard visible,
so an interrupted write leaves nothing that reads back as cached; concurrent writers use distinct shard names.

Nothing read back is trusted unverified: before a shard serves its first vector in a process, its bytes are
hashed and compared with its ``.meta.json``, and its shape with the row count and dim. A shard that fails (garbled
bytes, a deleted or edited key line, a truncated or zero-length file, a damaged header, non-ASCII keys, a deleted
``.npy``) is reported with its path, moved to ``quarantine/`` beside it, and its rows count as missing, so they
are encoded again and the run completes with correct vectors. Shards written before digests existed are checked
structurally (row count = key count, finite, unit norm) and adopted (their ``.meta.json`` written) when they pass.
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
from typing import Mapping, Sequence

import numpy as np

from memrepro.datasets.io import sha256_file

log = logging.getLogger("memrepro")

META_SUFFIX = ".meta.json"
QUARANTINE = "quarantine"
FORMAT = 1
_KEY = re.compile(r"^[0-9a-f]{64}$")
_NORM_TOLERANCE = 1e-3  # legacy shards: rows are unit-norm (or zero) float32
# (path, size, mtime_ns) of .npy files already verified in this process: a sweep hashes each shard once
_VERIFIED: set[tuple[str, int, int]] = set()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identity_key(identity: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(dict(identity), sort_keys=True, default=str).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Quarantined:
    path: str  # the shard's .keys file as it was found
    reason: str
    rows: int
    moved_to: str


class ShardDamaged(Exception):
    pass


class EmbeddingCache:
    def __init__(self, root: str | os.PathLike[str], identity: Mapping[str, object]) -> None:
        self.folder = Path(root) / identity_key(identity)
        self.identity = dict(identity)
        self._index: dict[str, tuple[str, int]] | None = None
        self._shard_keys: dict[str, list[str]] = {}
        self._shards: dict[str, np.ndarray] = {}  # verified shards only
        self.quarantined: list[Quarantined] = []

    # ------------------------------------------------------------------------------------------------ reading

    def _load_index(self) -> dict[str, tuple[str, int]]:
        if self._index is None:
            self._index = {}
            if self.folder.is_dir():
                for keys_file in sorted(self.folder.glob("*.keys")):
                    if keys_file.name.startswith("."):
                        continue
                    shard = keys_file.stem
                    try:
                        keys = _read_keys(keys_file)
                    except ShardDamaged as exc:
                        self._quarantine(shard, str(exc), rows=0)
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
            vectors = _verify(self.folder, shard, keys)
        except ShardDamaged as exc:
            self._quarantine(shard, str(exc), rows=len(keys))
            return None
        self._shards[shard] = vectors
        return vectors

    def lookup(self, keys: Sequence[str]) -> tuple[dict[int, np.ndarray], list[int]]:
        """Vectors found for ``keys`` (by position) and the positions still missing."""
        index = self._load_index()
        found: dict[int, np.ndarray] = {}
        missing: list[int] = []
        for position, key in enumerate(keys):
            vector = None
            while vector is None and key in index:
                shard, row = index[key]
                vectors = self._verified_shard(shard)
                if vectors is None:  # quarantined: its keys left the index; another shard may still hold the key
                    if index.get(key, ("",))[0] == shard:
                        del index[key]
                    continue
                vector = np.array(vectors[row], dtype=np.float32)
            if vector is None:
                missing.append(position)
            else:
                found[position] = vector
        return found, missing

    def _quarantine(self, shard: str, reason: str, rows: int) -> None:
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
        if self._index is not None:  # keys of this shard that other shards also hold stay findable
            for other, other_keys in self._shard_keys.items():
                for row, key in enumerate(other_keys):
                    self._index.setdefault(key, (other, row))
        keys_path = self.folder / f"{shard}.keys"
        moved_to = str(target) if moved else "(already moved)"
        self.quarantined.append(Quarantined(str(keys_path), reason, rows, moved_to))
        log.warning("embedding cache shard %s is damaged (%s): moved to %s; its %d rows are encoded again",
                    keys_path.with_suffix(""), reason, moved_to, rows)

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
        with open(tmp, "wb") as handle:
            np.save(handle, vectors)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, npy_path)
        keys_bytes = "\n".join(keys).encode("ascii")
        meta = {"format": FORMAT, "rows": int(vectors.shape[0]), "dim": int(vectors.shape[1]), "dtype": "float32",
                "npy_sha256": sha256_file(npy_path), "keys_sha256": hashlib.sha256(keys_bytes).hexdigest()}
        _atomic_write_bytes(self.folder / f"{shard}{META_SUFFIX}", json.dumps(meta, sort_keys=True).encode())
        _atomic_write_bytes(self.folder / f"{shard}.keys", keys_bytes)  # last: the shard becomes visible
        stat = npy_path.stat()
        _VERIFIED.add((str(npy_path), stat.st_size, stat.st_mtime_ns))
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
        raise ShardDamaged(f"keys file has non-ASCII bytes at offset {exc.start}") from None
    keys = text.split("\n") if text else []
    bad = next((i for i, key in enumerate(keys) if not _KEY.match(key)), None)
    if bad is not None:
        raise ShardDamaged(f"keys file line {bad + 1} is not a sha256 key")
    return keys


def _verify(folder: Path, shard: str, keys: list[str]) -> np.ndarray:
    """The shard's vectors (memory-mapped) after checking them against its metadata; raises ShardDamaged."""
    npy_path, meta_path = folder / f"{shard}.npy", folder / f"{shard}{META_SUFFIX}"
    if not npy_path.is_file():
        raise ShardDamaged("its .npy file is missing")
    if not meta_path.is_file():
        return _adopt_legacy(npy_path, meta_path, keys)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        rows, dim = int(meta["rows"]), int(meta["dim"])
        npy_sha, keys_sha = str(meta["npy_sha256"]), str(meta["keys_sha256"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ShardDamaged(f"unreadable {META_SUFFIX} ({type(exc).__name__})") from None
    if len(keys) != rows:
        raise ShardDamaged(f"{len(keys)} keys for {rows} rows")
    if hashlib.sha256("\n".join(keys).encode("ascii")).hexdigest() != keys_sha:
        raise ShardDamaged("keys sha256 differs from its metadata")
    stat = npy_path.stat()
    stamp = (str(npy_path), stat.st_size, stat.st_mtime_ns)
    if stamp not in _VERIFIED:
        if sha256_file(npy_path) != npy_sha:
            raise ShardDamaged("vectors sha256 differs from its metadata")
    vectors = _load_npy(npy_path)
    if vectors.shape != (rows, dim):
        raise ShardDamaged(f"vectors have shape {vectors.shape}, metadata says ({rows}, {dim})")
    _VERIFIED.add(stamp)
    return vectors


def _load_npy(path: Path) -> np.ndarray:
    try:
        vectors = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:  # truncated, zero-length, damaged header
        raise ShardDamaged(f"unreadable .npy ({type(exc).__name__}: {str(exc)[:80]})") from None
    if vectors.dtype != np.float32 or vectors.ndim != 2:
        raise ShardDamaged(f"expected a 2-D float32 array, found {vectors.dtype} with shape {vectors.shape}")
    return vectors


def _adopt_legacy(npy_path: Path, meta_path: Path, keys: list[str]) -> np.ndarray:
    """A shard from before digests: checked structurally, then given its metadata so later loads are hashed."""
    vectors = _load_npy(npy_path)
    if vectors.shape[0] != len(keys):
        raise ShardDamaged(f"{len(keys)} keys for {vectors.shape[0]} rows")
    dense = np.asarray(vectors, dtype=np.float64)
    if not np.isfinite(dense).all():
        raise ShardDamaged("non-finite values in the vectors")
    norms = np.linalg.norm(dense, axis=1)
    if not np.all((norms == 0) | (np.abs(norms - 1.0) <= _NORM_TOLERANCE)):
        raise ShardDamaged("vectors are not unit-norm (garbled bytes)")
    meta = {"format": FORMAT, "rows": int(vectors.shape[0]), "dim": int(vectors.shape[1]), "dtype": "float32",
            "npy_sha256": sha256_file(npy_path),
            "keys_sha256": hashlib.sha256("\n".join(keys).encode("ascii")).hexdigest(), "adopted": True}
    try:
        _atomic_write_bytes(meta_path, json.dumps(meta, sort_keys=True).encode())
    except OSError:  # a read-only cache still serves verified rows
        pass
    return vectors


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
