"""Atomic writes (memrepro/files.py): the target holds the old text or the new, never part of either, and a
failed write leaves no temporary file behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from memrepro.files import write_lines_atomic, write_text_atomic


def test_text_and_lines_are_written_into_new_folders(tmp_path: Path) -> None:
    write_text_atomic(tmp_path / "a" / "t.md", "héllo\n")
    write_lines_atomic(tmp_path / "b" / "t.jsonl", (str(i) for i in range(3)))
    assert (tmp_path / "a" / "t.md").read_text(encoding="utf-8") == "héllo\n"
    assert (tmp_path / "b" / "t.jsonl").read_text(encoding="utf-8") == "0\n1\n2\n"


def test_a_write_that_fails_midway_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_text("old\n", encoding="utf-8")

    def lines():
        yield "new"
        raise KeyboardInterrupt  # Ctrl-C while the lines are produced

    with pytest.raises(KeyboardInterrupt):
        write_lines_atomic(target, lines())
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(target, "\ud800")  # a lone surrogate cannot be encoded
    assert target.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]
