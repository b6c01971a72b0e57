"""Errors that name what went wrong and where: file, record, field (or config key), and how to fix it.

Exit codes (the CLI's contract): 2 for bad input (a config value, a data file, a missing model), 1 for a run that
failed (a write that could not happen, an internal error), 130 / 143 for Ctrl-C / SIGTERM. The CLI prints one line
per failure; ``--debug`` or ``HYDRA_FULL_ERROR=1`` adds the traceback.
"""

from __future__ import annotations

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


class MemreproError(Exception):
    """Base class for errors memrepro reports to users (the CLI prints them without a traceback)."""

    exit_code = EXIT_FAILED


class ConfigError(MemreproError, ValueError):
    """A config value outside what its key allows: names the key, the value and the allowed range."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, key: str, value: object, allowed: str) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"config {key}={value!r} is not allowed: expected {allowed}; fix the override or "
                         f"the config file that sets {key}")


class DataError(MemreproError, ValueError):
    """Bad or missing input data: always names the file, the record and the field."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, file: str, record: str, field: str, problem: str) -> None:
        self.file, self.record, self.field, self.problem = str(file), str(record), str(field), problem
        super().__init__(f"{self.file}: record {self.record!r}, field {self.field!r}: {problem}")


class UnverifiedDataError(MemreproError):
    """A data file whose sha256 is not the pinned one, and the run did not allow unverified data."""

    exit_code = EXIT_BAD_INPUT


class MissingDataError(MemreproError, FileNotFoundError):
    """A benchmark file is absent: say where we looked, which variable moves it, and how to get it."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: str, how_to_obtain: str) -> None:
        self.path = str(path)
        super().__init__(
            f"data file not found: {self.path}\n"
            f"  memrepro reads benchmark files under $MEMREPRO_DATA_DIR (default: ./data).\n"
            f"  {how_to_obtain}"
        )


class ModelNotFoundError(MemreproError, OSError):
    """No way to load a model: name every place that was tried."""

    exit_code = EXIT_BAD_INPUT


class DamagedFileError(MemreproError):
    """A file memrepro wrote itself (results, checkpoint, cache) failed its verification."""

    def __init__(self, path: object, problem: str, fix: str = "") -> None:
        self.path, self.problem = str(path), problem
        super().__init__(f"{self.path}: {problem}" + (f"; {fix}" if fix else ""))


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (continuation lines joined with '; ')."""
    parts = [part.strip() for part in str(exc).splitlines() if part.strip()]
    return "; ".join(parts) if parts else type(exc).__name__
