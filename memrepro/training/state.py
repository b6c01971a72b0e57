"""Resumable training state, shared by every trainer: saved atomically beside the output folder with a sha256 of
its contents, and read back only when intact and trained for the same identity (a damaged or foreign state is
named in one line and training restarts, instead of continuing from altered weights)."""

from __future__ import annotations

import hashlib
import io
import os
import uuid
from pathlib import Path
from typing import Any

import torch

PARTIAL = ".partial.pt"  # the suffix of a training state, beside the output folder


def partial_path(out_dir: Path) -> Path:
    return out_dir.parent / f"{out_dir.name}{PARTIAL}"


def save_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    buffer = io.BytesIO()
    torch.save(state, buffer)
    blob = buffer.getvalue()
    try:
        torch.save({"sha256": hashlib.sha256(blob).hexdigest(), "state": blob}, tmp)
        os.replace(tmp, path)
    except BaseException:  # SIGTERM or Ctrl-C mid-write: the last whole state stays, no half-written copy beside it
        tmp.unlink(missing_ok=True)
        raise


def load_state(path: Path, identity: Any) -> dict[str, Any] | None:
    """The saved state when ``path`` exists, is intact and belongs to ``identity``; else None (one line why)."""
    if not path.is_file():
        return None
    try:
        outer = torch.load(path, map_location="cpu", weights_only=False)
        blob = outer["state"]
        if hashlib.sha256(blob).hexdigest() != outer["sha256"]:
            raise ValueError("sha256 mismatch")
        state = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable state means: do not resume from it
        print(f"  ignoring {path}: damaged training state ({type(exc).__name__}: {exc}); training restarts",
              flush=True)
        return None
    if state.get("identity") != identity:
        print(f"  ignoring {path}: it belongs to another recipe", flush=True)
        return None
    return state
