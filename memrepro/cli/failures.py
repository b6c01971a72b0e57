"""One error style for every command: one line on stderr (what, where, the fix) and an exit code.

2: bad input (a config key or value, a data or run file, a model), 1: a failed run (a write refused by the OS, an
internal error), 130: Ctrl-C, 143: SIGTERM (the codes of :mod:`memrepro.errors`). ``--debug`` (or
``HYDRA_FULL_ERROR=1``) prints the traceback as well.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import signal
import sys
import traceback
from contextlib import contextmanager
from typing import Any, Iterator

from memrepro.errors import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TERMINATED, ConfigError,
                             MemreproError, MissingValueError, UnknownNameError, nearest, one_line)
from memrepro.options import unknown_config_key

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
        sys.exit(EXIT_INTERRUPTED)
    except Terminated:
        _say("terminated (SIGTERM); rerun the same command to resume from the last saved batch")
        sys.exit(EXIT_TERMINATED)
    except Exception as exc:  # noqa: BLE001 - every failure ends in one line
        if debug_enabled():
            traceback.print_exc()
        known = exc if isinstance(exc, MemreproError) else _memrepro_cause(exc)
        if known is not None:  # memrepro's own error, or one another library wrapped (a config resolver's)
            kind = "error" if exit_code_for(known) == EXIT_BAD_INPUT else "run failed"
            _say(f"{kind}: {one_line(known)}")
            sys.exit(exit_code_for(known))
        if isinstance(exc, OSError):
            _say(f"run failed: {describe_os_error(exc)}")
            sys.exit(EXIT_FAILED)
        # a bug: still one line, the traceback on request
        _say(f"internal error: {type(exc).__name__}: {one_line(exc)} (rerun with --debug for the traceback)")
        sys.exit(EXIT_FAILED)


def _memrepro_cause(exc: BaseException) -> MemreproError | None:
    """The memrepro error a Hydra or OmegaConf exception wraps (OmegaConf re-raises a resolver's error as its
    own, without ``from``), if any; any other exception is taken as it is."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    seen: BaseException | None = exc
    while isinstance(seen, (HydraException, OmegaConfBaseException)):
        seen = seen.__cause__ or seen.__context__
    return seen if isinstance(seen, MemreproError) else None


class CompositionError(MemreproError):
    """Hydra could not compose the config (a bad override, a wrong type): its message on one line."""

    exit_code = EXIT_BAD_INPUT


def _unreadable(exc: Any) -> str:
    """Where Hydra's override grammar stops reading an override (its parser's words are token names)."""
    if "=" not in exc.override and not exc.override.startswith("~"):
        return "it has no '='"
    stop = re.search(r"input '([^']*)'", exc.message)
    return f"it cannot be read from {stop.group(1)!r} on" if stop else "it is not in the key=value form"


def config_file_error(exc: Exception) -> MemreproError:
    """A config file that is not plain YAML, named with its line: a ``!!python/...`` tag (a config holds values,
    never Python objects, so the safe loader has no constructor for it) or a syntax error."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "a config file"
    problem = str(getattr(exc, "problem", None) or exc)
    tag = re.search(r"tag:yaml\.org,2002:(python/\S+?)'", problem)
    if tag:
        problem = f"the tag !!{tag.group(1)} is not allowed (a config holds plain values, never Python objects)"
    return CompositionError(f"{where}: {one_line(problem)}; fix the file (plain YAML only)")


def composition_error(exc: Exception) -> MemreproError:
    """A failed Hydra composition as one error in memrepro's words: a mistyped config group option or key names
    the nearest valid names (Hydra's own message lists search paths, or suggests ``+key=value``, which the closed
    schema refuses); a value of the wrong type names the key, the value, what it takes and an example; an override
    Hydra cannot read says how one is written."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import (ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException,
                                  ValidationError)

    from memrepro.options import SCHEMA_SUFFIX

    known = _memrepro_cause(exc)
    if known is not None:  # raised by one of memrepro's config resolvers while Hydra composed
        return known
    if isinstance(exc, MissingConfigException) and exc.options and "/" in (exc.missing_cfg_file or ""):
        group, choice = exc.missing_cfg_file.rsplit("/", 1)
        options = [o for o in exc.options if not o.endswith(SCHEMA_SUFFIX)]
        example = (nearest(choice, options) or options)[:1]
        return UnknownNameError("option", choice, options, f"choose one, e.g. {group}={example[0]}" if example else
                                "add a config file to the group", context=f"of config group {group}")
    if isinstance(exc, OverrideParseException):
        return CompositionError(f"cannot read the override {exc.override!r}: {_unreadable(exc)}; write key=value, a "
                                "list as key=[a,b], a sweep (with -m) as key=a,b, and quote a value with spaces or "
                                "brackets: 'key=\"a (b)\"'")
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    schema = getattr(cause, "object_type", None)
    key = str(getattr(cause, "full_key", "") or "")
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and key and dataclasses.is_dataclass(schema):
        return unknown_config_key(key, schema)
    if (isinstance(cause, ValidationError) and key and dataclasses.is_dataclass(schema)
            and cause.key in {spec.name for spec in dataclasses.fields(schema)}):
        from memrepro.parameters import as_override, expected

        allowed, example = expected(schema, str(cause.key))
        return ConfigError(key, cause.value, f"{allowed} (e.g. {key}={as_override(example)})")
    if isinstance(cause, MissingMandatoryValue) and key:
        return MissingValueError(key)
    detail = one_line(exc)
    if isinstance(cause, OmegaConfBaseException) and str(cause) not in str(exc):
        detail += f"; {one_line(cause)}"
    return CompositionError(f"config: {detail}; `--cfg job` prints the composed config, `--help` the groups")
