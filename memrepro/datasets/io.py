"""Reading benchmark files: the data root, checksums and JSON with errors that point at the byte."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from memrepro.errors import DataError, MissingDataError
from memrepro.paths import FOLDERS, folder_path
from memrepro.types import FileProvenance

DATA_DIR_ENV = FOLDERS["data_dir"][0]
# dataset keys read by the runner, not by the loader: taken off before the loader is built
RUNNER_SWITCHES = ("allow_unverified", "gold_labels")


def data_root(configured: str | os.PathLike[str] | None = None) -> Path:
    """The configured root, else ``$MEMREPRO_DATA_DIR``, else ``data/`` under the project root."""
    if configured:
        return Path(configured).expanduser()
    return folder_path("data_dir")


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
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(str(path), f"line {exc.lineno} column {exc.colno} (char {exc.pos})", "<json>",
                        f"malformed JSON: {exc.msg}") from exc


def read_text(path: Path) -> str:
    """A UTF-8 text file; bytes that are not UTF-8 raise a DataError naming the file, line and byte offset."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(str(path), f"line {line} (byte {exc.start})", "<encoding>",
                        f"not UTF-8 ({exc.reason}, byte 0x{data[exc.start]:02x}); re-save the file as UTF-8 or "
                        f"restore the original (`python -m memrepro data check` compares it with its pinned sha256)"
                        ) from None


@contextmanager
def utf8_errors(path: Path) -> Iterator[None]:
    """For streamed text reads (CSV, JSONL): a UnicodeDecodeError becomes a DataError naming the file."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise DataError(str(path), f"byte {exc.start} of a read block", "<encoding>",
                        f"not UTF-8 ({exc.reason}); re-save the file as UTF-8 or restore the original") from None


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
