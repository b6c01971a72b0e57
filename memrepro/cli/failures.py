"""One error style for every command: one line on stderr (what, where, the fix) and an exit code.

2: bad input (config value, data file, model), 1: a failed run (a write refused by the OS, an internal error),
130: Ctrl-C, 143: SIGTERM. ``--debug`` (or ``HYDRA_FULL_ERROR=1``) prints the traceback as well.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import traceback
from contextlib import contextmanager
from typing import Iterator

from memrepro.errors import EXIT_BAD_INPUT, EXIT_FAILED, MemreproError, one_line

DEBUG_ENV = "MEMREPRO_DEBUG"


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that ``finally`` blocks (checkpoint flush, temp cleanup) run."""


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV) == "1" or os.environ.get("HYDRA_FULL_ERROR") == "1"


def install_sigterm_handler() -> None:
    """SIGTERM (``kill``, a cluster's pre-emption) unwinds like Ctrl-C instead of ending the process on the spot."""

    def _raise(signum, frame):  # noqa: ARG001
        raise Terminated()

    try:
        signal.signal(signal.SIGTERM, _raise)
    except ValueError:  # not the main thread (a launcher running jobs in threads): keep the default
        pass


def _say(message: str) -> None:
    print(f"memrepro: {message}", file=sys.stderr, flush=True)


def exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, MemreproError):
        return int(getattr(exc, "exit_code", EXIT_FAILED))
    return EXIT_FAILED


def describe_os_error(exc: OSError) -> str:
    where = exc.filename if exc.filename is not None else "(unknown path)"
    what = exc.strerror or type(exc).__name__
    hint = {errno.EACCES: "make it writable or point MEMREPRO_RESULTS_DIR / MEMREPRO_CACHE_DIR elsewhere",
            errno.EROFS: "the file system is read-only: point MEMREPRO_RESULTS_DIR / MEMREPRO_CACHE_DIR elsewhere",
            errno.ENOSPC: "free disk space, then rerun: the run resumes from what it saved",
            errno.EPERM: "make it writable or point MEMREPRO_RESULTS_DIR / MEMREPRO_CACHE_DIR elsewhere"}.get(
        exc.errno, "fix the path, then rerun")
    return f"cannot use {where}: {what}; {hint}"


@contextmanager
def reported() -> Iterator[None]:
    """Turn any failure inside the block into one line on stderr and ``sys.exit(code)``."""
    try:
        yield
    except SystemExit:
        raise
    except KeyboardInterrupt:
        _say("interrupted (Ctrl-C); rerun the same command to resume from the last saved batch")
        sys.exit(130)
    except Terminated:
        _say("terminated (SIGTERM); rerun the same command to resume from the last saved batch")
        sys.exit(143)
    except MemreproError as exc:
        if debug_enabled():
            traceback.print_exc()
        kind = "error" if exit_code_for(exc) == EXIT_BAD_INPUT else "run failed"
        _say(f"{kind}: {one_line(exc)}")
        sys.exit(exit_code_for(exc))
    except OSError as exc:
        if debug_enabled():
            traceback.print_exc()
        _say(f"run failed: {describe_os_error(exc)}")
        sys.exit(EXIT_FAILED)
    except Exception as exc:  # a bug: still one line, the traceback on request
        if debug_enabled():
            traceback.print_exc()
        _say(f"internal error: {type(exc).__name__}: {one_line(exc)} (rerun with --debug for the traceback)")
        sys.exit(EXIT_FAILED)
