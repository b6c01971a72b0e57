"""On-disk embedding cache: one folder per encoder identity, append-only shards of ``.npy`` vectors.

The key is everything that changes a vector: the encoder identity (model, weights hash, max length,
normalisation, dtype, the role's prefix) names the folder; the text's sha256 names the row. Shards are
written atomically (temporary file + rename, keys last), so an interrupted run never leaves a row that reads
back as complete; concurrent writers use distinct shard names.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identity_key(identity: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(dict(identity), sort_keys=True, default=str).encode()).hexdigest()[:24]


class EmbeddingCache:
    def __init__(self, root: str | os.PathLike[str], identity: Mapping[str, object]) -> None:
        self.folder = Path(root) / identity_key(identity)
        self.identity = dict(identity)
        self._index: dict[str, tuple[str, int]] | None = None
        self._shards: dict[str, np.ndarray] = {}

    def _load_index(self) -> dict[str, tuple[str, int]]:
        if self._index is None:
            self._index = {}
            if self.folder.is_dir():
                for keys_file in sorted(self.folder.glob("*.keys")):
                    shard = keys_file.stem
                    for row, key in enumerate(keys_file.read_text().split()):
                        self._index[key] = (shard, row)
        return self._index

    def _vector(self, shard: str, row: int) -> np.ndarray:
        if shard not in self._shards:
            self._shards[shard] = np.load(self.folder / f"{shard}.npy", mmap_mode="r")
        return self._shards[shard][row]

    def lookup(self, keys: Sequence[str]) -> tuple[dict[int, np.ndarray], list[int]]:
        """Vectors found for ``keys`` (by position) and the positions still missing."""
        index = self._load_index()
        found: dict[int, np.ndarray] = {}
        missing: list[int] = []
        for position, key in enumerate(keys):
            hit = index.get(key)
            if hit is None:
                missing.append(position)
            else:
                found[position] = np.asarray(self._vector(*hit), dtype=np.float32)
        return found, missing

    def store(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        if len(keys) == 0:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        manifest = self.folder / "identity.json"
        if not manifest.exists():
            _atomic_write_bytes(manifest, json.dumps(self.identity, indent=2, sort_keys=True,
                                                     default=str).encode())
        shard = uuid.uuid4().hex
        tmp = self.folder / f".{shard}.npy.tmp"
        with open(tmp, "wb") as handle:
            np.save(handle, np.ascontiguousarray(vectors, dtype=np.float32))
        os.replace(tmp, self.folder / f"{shard}.npy")
        _atomic_write_bytes(self.folder / f"{shard}.keys", "\n".join(keys).encode())
        index = self._load_index()
        for row, key in enumerate(keys):
            index[key] = (shard, row)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
