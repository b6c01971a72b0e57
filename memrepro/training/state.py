"""Resumable training state, shared by every trainer: saved atomically beside the output folder behind a header
that holds the sha256 of its contents, and read back only when intact and trained for the same identity (a
damaged or foreign state is named in one line and training restarts, instead of continuing from altered weights).

Nothing is unpickled before it is verified: the header and the digest are checked on the raw bytes first, and the
verified contents are then read with ``torch.load(..., weights_only=True)``, which builds tensors and plain
containers only, never an object a pickle names. A file that is not such a state (another format, a pickle
placed in ``models/`` by hand) is refused on its first line without being deserialised."""

from __future__ import annotations

import hashlib
import io
import os
import uuid
from pathlib import Path
from typing import Any

import torch

from memrepro.files import naming

PARTIAL = ".partial.pt"  # the suffix of a training state, beside the output folder
MAGIC = b"memrepro-training-state 1 "  # the header: this, the sha256 of the contents in hex, a newline


def partial_path(out_dir: Path) -> Path:
    return out_dir.parent / f"{out_dir.name}{PARTIAL}"


def save_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    buffer = io.BytesIO()
    torch.save(state, buffer)
    blob = buffer.getvalue()
    try:
        with naming(path), open(tmp, "wb") as handle:
            handle.write(MAGIC + hashlib.sha256(blob).hexdigest().encode() + b"\n" + blob)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:  # SIGTERM or Ctrl-C mid-write: the last whole state stays, no half-written copy beside it
        tmp.unlink(missing_ok=True)
        raise


def _verified_contents(path: Path) -> bytes:
    """The state's contents once its header and sha256 check out; ValueError naming what does not."""
    data = path.read_bytes()
    header, newline, blob = data.partition(b"\n")
    if not newline or not header.startswith(MAGIC):
        raise ValueError("not a memrepro training state (no header); it is not read")
    if hashlib.sha256(blob).hexdigest().encode() != header[len(MAGIC):]:
        raise ValueError("sha256 mismatch")
    return blob


def load_state(path: Path, identity: Any) -> dict[str, Any] | None:
    """The saved state when ``path`` exists, is intact and belongs to ``identity``; else None (one line why)."""
    if not path.is_file():
        return None
    try:
        state = torch.load(io.BytesIO(_verified_contents(path)), map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise TypeError(f"a {type(state).__name__}, not a state")
    except Exception as exc:  # noqa: BLE001 - any unreadable state means: do not resume from it
        print(f"  ignoring {path}: damaged training state ({type(exc).__name__}: {str(exc)[:200]}); training "
              f"restarts", flush=True)
        return None
    if state.get("identity") != identity:
        print(f"  ignoring {path}: it belongs to another recipe", flush=True)
        return None
    return state
