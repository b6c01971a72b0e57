"""Embedding cache under damage: every kind of damaged shard is named, quarantined and re-encoded, never served."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from memrepro.models import cache as cache_module
from memrepro.models.cache import META_SUFFIX, QUARANTINE, EmbeddingCache
from memrepro.models.encoder import CachedEncoder, FakeEncoder

TEXTS = [f"memory number {i} about topic {i % 7}" for i in range(300)]


def _shard(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A cache with one 300-row shard and the vectors an uncached encode gives."""
    reference = CachedEncoder(FakeEncoder(dim=64), None).encode(TEXTS, "document")
    CachedEncoder(FakeEncoder(dim=64), tmp_path).encode(TEXTS, "document")
    keys = [p for p in tmp_path.rglob("*.keys") if QUARANTINE not in p.parts]
    assert len(keys) == 1
    return keys[0].with_suffix(""), reference


def _garble_middle(base: Path) -> None:
    npy = base.with_suffix(".npy")
    data = bytearray(npy.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 8192] = bytes(range(256)) * 32  # 8 KB of garbage, valid-looking floats included
    npy.write_bytes(bytes(data))


def _delete_key_line(base: Path) -> None:
    keys_file = base.with_suffix(".keys")
    lines = keys_file.read_text().split("\n")
    keys_file.write_text("\n".join(lines[:10] + lines[11:]))


def _truncate(base: Path) -> None:
    npy = base.with_suffix(".npy")
    npy.write_bytes(npy.read_bytes()[:5000])


def _zero_length(base: Path) -> None:
    base.with_suffix(".npy").write_bytes(b"")


def _damage_header(base: Path) -> None:
    npy = base.with_suffix(".npy")
    data = bytearray(npy.read_bytes())
    data[10:40] = b"x" * 30
    npy.write_bytes(bytes(data))


def _non_ascii_keys(base: Path) -> None:
    keys_file = base.with_suffix(".keys")
    keys_file.write_bytes(b"\xff\xfe" + keys_file.read_bytes()[2:])


def _delete_npy(base: Path) -> None:
    base.with_suffix(".npy").unlink()


def _delete_meta_and_garble(base: Path) -> None:
    """A shard without digests (as written before they existed) that is also damaged: caught structurally."""
    Path(str(base) + META_SUFFIX).unlink()
    _garble_middle(base)


def _garble_meta(base: Path) -> None:
    Path(str(base) + META_SUFFIX).write_text("{not json")


DAMAGE: dict[str, Callable[[Path], None]] = {
    "garbled 8 KB in the middle": _garble_middle,
    "one key line deleted": _delete_key_line,
    "truncated npy": _truncate,
    "zero-length npy": _zero_length,
    "damaged npy header": _damage_header,
    "non-ASCII keys": _non_ascii_keys,
    "deleted npy": _delete_npy,
    "legacy shard garbled": _delete_meta_and_garble,
    "garbled metadata": _garble_meta,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_shard_is_named_quarantined_and_reencoded(damage: str, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    base, reference = _shard(tmp_path)
    DAMAGE[damage](base)
    again = CachedEncoder(FakeEncoder(dim=64), tmp_path)
    with caplog.at_level(logging.WARNING, logger="memrepro"):
        vectors = again.encode(TEXTS, "document")
    np.testing.assert_array_equal(vectors, reference)  # the correct vectors, never the damaged ones
    assert again.encoded["document"] == len(TEXTS)
    if damage != "deleted npy":
        assert str(base) in caplog.text and "damaged" in caplog.text
    assert [q["rows"] for q in again.quarantined] in ([len(TEXTS)], [0], [len(TEXTS) - 1])
    assert not base.with_suffix(".keys").exists()  # moved aside: the quarantine keeps the evidence
    assert list((base.parent / QUARANTINE).iterdir())
    # the repaired cache serves the next process without encoding anything
    third = CachedEncoder(FakeEncoder(dim=64), tmp_path)
    np.testing.assert_array_equal(third.encode(TEXTS, "document"), reference)
    assert third.encoded["document"] == 0 and not third.quarantined


def test_deleted_keys_file_rows_are_recomputed(tmp_path: Path) -> None:
    base, reference = _shard(tmp_path)
    base.with_suffix(".keys").unlink()
    again = CachedEncoder(FakeEncoder(dim=64), tmp_path)
    np.testing.assert_array_equal(again.encode(TEXTS, "document"), reference)
    assert again.encoded["document"] == len(TEXTS)


def test_shard_carries_row_count_dim_and_digests(tmp_path: Path) -> None:
    base, _ = _shard(tmp_path)
    meta = json.loads(Path(str(base) + META_SUFFIX).read_text())
    assert (meta["rows"], meta["dim"], meta["dtype"]) == (len(TEXTS), 64, "float32")
    assert len(meta["npy_sha256"]) == 64 and len(meta["keys_sha256"]) == 64
    assert not [p for p in base.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_intact_legacy_shard_is_adopted(tmp_path: Path) -> None:
    base, reference = _shard(tmp_path)
    meta = Path(str(base) + META_SUFFIX)
    meta.unlink()
    encoder = FakeEncoder(dim=64)  # without digests, each row is re-encoded and compared before it is adopted
    cache = EmbeddingCache(tmp_path, {**encoder.identity, "prefix": ""},
                           reencode=lambda texts: encoder.encode(texts, "document"))
    found, missing = cache.lookup([cache_module.text_sha256(t) for t in TEXTS], TEXTS)
    assert not missing and not cache.quarantined
    np.testing.assert_array_equal(np.stack([found[i] for i in range(len(TEXTS))]), reference)
    assert json.loads(meta.read_text())["adopted"] is True


def test_leftovers_of_killed_shard_writes_are_removed_once_stale(tmp_path: Path) -> None:
    """A kill mid-write leaves a ``.npy.tmp`` (or a shard without its ``.keys``); a later run removes it once no
    process can still be writing it, and never a young one (another process's write in progress)."""
    import os
    import time

    from memrepro.models.cache import remove_leftovers

    folder = tmp_path / "embeddings" / "x"
    folder.mkdir(parents=True)
    stale = [folder / ".abc.npy.tmp", folder / "def.npy", folder / "def.meta.json", folder / ".m.json.1234.tmp"]
    young, whole = folder / ".young.npy.tmp", [folder / "ok.npy", folder / "ok.meta.json", folder / "ok.keys"]
    for path in [*stale, young, *whole]:
        path.write_bytes(b"x")
    long_ago = time.time() - 24 * 3600
    for path in [*stale, *whole]:
        os.utime(path, (long_ago, long_ago))
    assert sorted(remove_leftovers(folder)) == sorted(p.name for p in stale)
    assert young.exists() and all(p.exists() for p in whole)
