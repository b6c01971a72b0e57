"""Every use of Hydra's private modules, in one place.

Hydra has no public hook for the things below, so they come from ``hydra._internal`` here and nowhere else
(``tests/test_hydra_internals.py`` fails when another module imports them, and pins each name's shape to the Hydra
version ``pyproject.toml`` pins):

- :func:`locate`: the object a ``_target_`` string names, resolved exactly as ``hydra.utils.instantiate`` resolves
  it (the public ``hydra.utils.get_object`` does the same but logs three lines per failure).
- :func:`report_errors_with`: composition errors (unknown key or option, bad override) reported by memrepro in one
  line; Hydra reports them itself, with a traceback, through ``hydra._internal.utils.run_and_report``.
- :func:`hydra_usage_error`: Hydra's own command-line parser, asked whether it accepts a command line, so that a
  usage mistake (an unknown flag) is reported in memrepro's one line instead of argparse's usage block.
- :func:`target_refusal`: whether Hydra's instantiation policy refuses a ``_target_`` (its blocklist, and the
  targets that run code from config), asked when the config is checked instead of when the object is built.
- :func:`mode_from_command_line`: Hydra composes the whole config once only to read ``hydra.mode`` and then again
  to run; memrepro's configs never set ``hydra.mode``, so the mode is the command line's (``-m`` or not), which
  is what Hydra falls back to when that first composition fails.
- :func:`basic_sweeper`, :func:`apply_overrides_to_config`, :func:`overrides_dirname`: the compose-once sweeper
  (``hydra_plugins/memrepro_sweeper``) is Hydra's basic sweeper with one method changed, and applies value
  overrides with Hydra's own code so its configs equal a full composition.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from hydra._internal import target_policy as _target_policy
from hydra._internal import utils as _utils
from hydra._internal.config_loader_impl import ConfigLoaderImpl as _ConfigLoaderImpl
from hydra._internal.config_loader_impl import get_overrides_dirname as _get_overrides_dirname

HYDRA_VERSION = "1.3.8"  # the version these names were read from; pyproject.toml pins it

__all__ = ["apply_overrides_to_config", "basic_sweeper", "hydra_usage_error", "locate", "mode_from_command_line",
           "overrides_dirname", "report_errors_with", "target_refusal", "HYDRA_VERSION"]


def basic_sweeper() -> type:
    """Hydra's ``BasicSweeper`` class as its module defines it now.

    Looked up on each call, never bound at import: Hydra's plugin discovery executes the plugin modules again, which
    makes a new ``BasicSweeper`` class; a subclass of an older copy then fails in ``super()`` calls.
    """
    return importlib.import_module("hydra._internal.core_plugins.basic_sweeper").BasicSweeper


def locate(target: str) -> Any:
    """The class or function ``target`` names (ImportError / AttributeError / ValueError when it does not resolve)."""
    return _utils._locate(target)


def target_refusal(target: str) -> str | None:
    """Why Hydra's ``instantiate`` would refuse to build ``target`` (blocklisted, or able to run code named in a
    config; ``HYDRA_INSTANTIATE_ALLOWLIST_OVERRIDE`` honoured), or None when it would build it."""
    from hydra.errors import InstantiationException

    try:
        _target_policy._authorize_target_name(target, target, "")
    except InstantiationException as exc:
        return " ".join(str(exc).split())
    return None


def report_errors_with(report: Callable[[Callable[[], Any]], Any]) -> None:
    """Make ``report(func)`` what Hydra calls around composing a config and running the task (once per process)."""
    if getattr(_utils.run_and_report, "__memrepro__", False):
        return
    report.__memrepro__ = True  # type: ignore[attr-defined]
    _utils.run_and_report = report


def mode_from_command_line() -> None:
    """Run or multirun as the command line says, without the composition Hydra spends reading ``hydra.mode`` (about
    0.1 s of every start); a command line that sets ``hydra.mode`` itself is still read Hydra's way."""
    from hydra._internal.hydra import Hydra

    original = Hydra.get_mode
    if getattr(original, "__memrepro__", False):
        return

    def get_mode(self: Any, config_name: Any, overrides: list[str]) -> Any:
        if any(o.lstrip("+~").startswith("hydra.mode") for o in overrides):
            return original(self, config_name, overrides)
        return None  # Hydra's own answer when it cannot compose: the mode of the command line (-m or not)

    get_mode.__memrepro__ = True  # type: ignore[attr-defined]
    Hydra.get_mode = get_mode  # type: ignore[method-assign]


def apply_overrides_to_config(overrides: list[Any], cfg: Any) -> None:
    """Hydra's own application of value overrides (parsed ``Override`` objects) to a composed config, in place."""
    _ConfigLoaderImpl._apply_overrides_to_config(overrides, cfg)


def overrides_dirname(overrides: list[Any], kv_sep: str, item_sep: str, exclude_keys: list[str]) -> str:
    """``hydra.job.override_dirname`` for ``overrides``, as Hydra computes it."""
    return _get_overrides_dirname(overrides=overrides, kv_sep=kv_sep, item_sep=item_sep, exclude_keys=exclude_keys)


class _UsageError(Exception):
    pass


def hydra_usage_error(argv: list[str]) -> str | None:
    """What Hydra would refuse in the command line ``argv`` (argparse's message, or two modes at once), or None."""

    def refuse(message: str) -> None:
        raise _UsageError(message)

    parser = _utils.get_args_parser()
    parser.error = refuse  # type: ignore[method-assign]
    try:
        args, unknown = parser.parse_known_args(argv)
    except _UsageError as exc:
        return str(exc)
    if unknown:
        return f"unrecognized arguments: {' '.join(unknown)}"
    modes = [flag for flag, on in (("--run", args.run), ("--multirun", args.multirun), ("--cfg", args.cfg),
                                   ("--info", args.info is not None), ("--shell-completion", args.shell_completion))
             if on]
    if len(modes) > 1:  # Hydra's own rule (hydra.main refuses it with a ValueError)
        return f"{' and '.join(modes)} cannot be combined: give one of --run, --multirun, --cfg, --info"
    return None
