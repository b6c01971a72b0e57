"""Atomic text writes: through a temporary sibling and a rename, so a reader sees the old file or the new one,
never half a file; the temporary file is removed when the write fails (a full disk, Ctrl-C)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable


def write_lines_atomic(target: Path, lines: Iterable[str]) -> None:
    """Each of ``lines`` plus a newline, written to ``target`` atomically (the lines may come from a generator)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(line + "\n")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(target: Path, text: str) -> None:
    """``text`` (UTF-8) written to ``target`` atomically."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
