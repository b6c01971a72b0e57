"""Atomic text writes: through a temporary sibling and a rename, so a reader sees the old file or the new one,
never half a file; the temporary file is removed when the write fails (a full disk, Ctrl-C). A write that fails
names its file (:func:`naming`)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

STALE_AFTER_S = 600.0  # a temporary file or folder untouched this long belongs to no running process: a kill left it
TMP_TAG = ".tmp-"  # in the name of what is being written: ``.<name>.tmp-<x>``, renamed to ``<name>`` when whole


@contextmanager
def naming(path: str | os.PathLike[str]) -> Iterator[None]:
    """An OSError raised inside names ``path`` when it names no file itself: a write refused for a full disk
    (ENOSPC) or a quota carries no file name, and "cannot use (unknown path)" tells a user nothing."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


@contextmanager
def _replacing(target: Path) -> Iterator[Path]:
    """A temporary sibling of ``target`` to write; renamed onto ``target`` when the block ends, removed on failure."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}{TMP_TAG}{os.getpid()}")
    try:
        with naming(target):
            yield tmp
            os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_lines_atomic(target: Path, lines: Iterable[str]) -> None:
    """Each of ``lines`` plus a newline, written to ``target`` atomically (the lines may come from a generator)."""
    with _replacing(target) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")


def write_text_atomic(target: Path, text: str) -> None:
    """``text`` (UTF-8) written to ``target`` atomically."""
    with _replacing(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
