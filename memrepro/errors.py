"""Errors that name what went wrong and where: file, record, field (or config key), and how to fix it.

Exit codes (the CLI's contract): 2 for bad input (a config key or value, a data or run file, a run folder, a
missing model, missing dependencies), 1 for a run that failed (a write that could not happen, an internal error),
130 / 143 for Ctrl-C / SIGTERM. The CLI prints one line per failure; ``--debug`` or ``HYDRA_FULL_ERROR=1`` adds
the traceback.
"""

from __future__ import annotations

import difflib
from typing import Sequence

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


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


class MissingValueError(MemreproError, ValueError):
    """A config key that has no default and was not set (``retriever=external`` without ``retriever.target``)."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"config {key} has no value and needs one: set it ({key}=...)")


class UnknownNameError(MemreproError, ValueError):
    """A name outside a closed list (a config key, a config group option, a command): names the nearest valid
    names and the whole list."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, what: str, name: str, valid: Sequence[str], fix: str, within: str = "", context: str = ""
                 ) -> None:
        """``within``: the prefix the valid names live under (``retriever`` for ``retriever.alpah``); the nearest
        names are matched on the last part of ``name`` and shown with the prefix. ``context`` follows the name
        (``of config group dataset``)."""
        self.name, self.valid = name, list(valid)
        leaf = name[len(within) + 1:] if within and name.startswith(f"{within}.") else name
        self.nearest = [f"{within}.{v}" if within else v for v in nearest(leaf, self.valid)]
        near = f"nearest: {', '.join(self.nearest)}" if self.nearest else "no close match"
        scope = f" under {within}" if within else ""
        super().__init__(f"unknown {what} {name!r}{' ' + context if context else ''} ({near}; valid{scope}: "
                         f"{', '.join(self.valid)}); {fix}")


class KeyOfOtherOptionsError(UnknownNameError):
    """A config key the chosen option of its group lacks and other options have: names them."""

    SHOWN = 4  # options named in the line; `run --help` lists them all

    def __init__(self, key: str, options: Sequence[str], block: bool = False) -> None:
        group = key.split(".")[0]
        self.name, self.valid, self.nearest = key, list(options), []
        shown = "|".join(self.valid[:self.SHOWN]) + (f"|… ({len(self.valid)} options)" if len(self.valid) > self.SHOWN
                                                     else "")
        keys = f"{key}.*" if block else key
        choose = "one of them" if len(self.valid) > 1 else "it"
        MemreproError.__init__(self, f"config key {key!r} is not one of the chosen {group}'s keys: {keys} belongs to "
                                     f"{group}={shown}; choose {choose} (e.g. {group}={self.valid[0]}) or drop the key")


def nearest(name: str, valid: Sequence[str], n: int = 3) -> list[str]:
    """The valid names closest to a mistyped one, best first (none when nothing is close)."""
    return difflib.get_close_matches(name, list(valid), n=n, cutoff=0.6)


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
            f"  memrepro reads benchmark files under $MEMREPRO_DATA_DIR (default: data/ in the project folder)\n"
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
