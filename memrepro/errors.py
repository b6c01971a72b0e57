"""Errors that name what went wrong and where: file, record, field."""

from __future__ import annotations


class MemreproError(Exception):
    """Base class for errors memrepro reports to users (the CLI prints them without a traceback)."""


class DataError(MemreproError, ValueError):
    """Bad or missing input data: always names the file, the record and the field."""

    def __init__(self, file: str, record: str, field: str, problem: str) -> None:
        self.file, self.record, self.field, self.problem = str(file), str(record), str(field), problem
        super().__init__(f"{self.file}: record {self.record!r}, field {self.field!r}: {problem}")


class MissingDataError(MemreproError, FileNotFoundError):
    """A benchmark file is absent: say where we looked, which variable moves it, and how to get it."""

    def __init__(self, path: str, how_to_obtain: str) -> None:
        self.path = str(path)
        super().__init__(
            f"data file not found: {self.path}\n"
            f"  memrepro reads benchmark files under $MEMREPRO_DATA_DIR (default: ./data).\n"
            f"  {how_to_obtain}"
        )


class ModelNotFoundError(MemreproError, OSError):
    """No way to load a model: name every place that was tried."""
