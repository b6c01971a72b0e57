"""Reading benchmark files: the data root, checksums and JSON with errors that point at the byte."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from memrepro.errors import DataError, MissingDataError
from memrepro.types import FileProvenance

DATA_DIR_ENV = "MEMREPRO_DATA_DIR"


def data_root(configured: str | os.PathLike[str] | None = None) -> Path:
    """The configured root, else ``$MEMREPRO_DATA_DIR``, else ``./data``."""
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get(DATA_DIR_ENV) or "data").expanduser()


def require_file(path: Path, how_to_obtain: str) -> Path:
    if not path.is_file():
        raise MissingDataError(str(path), how_to_obtain)
    return path


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk_size), b""):
            digest.update(block)
    return digest.hexdigest()


def provenance(path: Path, root: Path | None = None) -> FileProvenance:
    """Path (relative to the data root when under it, so runs compare across machines), sha256, size."""
    shown = str(path)
    if root is not None:
        try:
            shown = str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            pass
    return FileProvenance(path=shown, sha256=sha256_file(path), bytes=path.stat().st_size)


def read_json(path: Path) -> Any:
    """Parse a JSON file; malformed JSON raises a DataError naming the file, line, column and byte offset."""
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(str(path), f"line {exc.lineno} column {exc.colno} (char {exc.pos})", "<json>",
                        f"malformed JSON: {exc.msg}") from exc


def field(record: Any, key: str, expected: type | tuple[type, ...], *, file: str, record_id: str) -> Any:
    """``record[key]`` checked for presence and type, or a DataError naming file, record and field."""
    if not isinstance(record, dict):
        raise DataError(file, record_id, key, f"expected an object, got {type(record).__name__}")
    if key not in record:
        raise DataError(file, record_id, key, "missing field")
    value = record[key]
    if not isinstance(value, expected) or (isinstance(value, bool) and bool not in _as_tuple(expected)):
        names = "/".join(t.__name__ for t in _as_tuple(expected))
        raise DataError(file, record_id, key, f"expected {names}, got {type(value).__name__}: {value!r:.80}")
    return value


def _as_tuple(expected: type | tuple[type, ...]) -> tuple[type, ...]:
    return expected if isinstance(expected, tuple) else (expected,)
