"""``python -m memrepro <command> [hydra overrides]``.

Hydra has no subcommands, so this dispatcher strips the command word and hands the rest of the command line to
that command's own ``@hydra.main`` app (which keeps ``-m`` multirun, ``--cfg``, tab completion and the
override grammar intact).
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable

from memrepro.errors import EXIT_BAD_INPUT, UnknownNameError  # the standard library only: imports without the venv


@dataclass(frozen=True)
class Command:
    summary: str
    entry: str  # "module:function", imported only when the command runs (keeps --help instant)


COMMANDS: dict[str, Command] = {
    "run": Command("retrieve and evaluate one configuration (Hydra; -m for sweeps)", "memrepro.cli.run:main"),
    "data": Command("check (--stats) / download benchmark files", "memrepro.cli.data:main"),
    "experiments": Command("run the declared experiment list (conf/experiments.yaml), skipping done runs",
                           "memrepro.cli.experiments:main"),
    "tables": Command("render the papers' tables and figures from results/ (never runs anything)",
                      "memrepro.cli.tables:main"),
    "eval": Command("score an external run file (TREC or JSONL) under a benchmark's protocol (Hydra)",
                    "memrepro.cli.eval:main"),
    "compare": Command("paired comparison of run folders: means, Δ, bootstrap CI and p (--by category, --latex)",
                       "memrepro.cli.compare:main"),
    "report": Command("a static HTML site of the runs: reproduction, run pages with per-query evidence, comparisons, "
                      "sweeps (opens from disk)", "memrepro.cli.report:main"),
    "check": Command("the protocol check of run folders: each finding, what the run shows and the fix (exit 0 "
                     "none, 1 findings, 2 bad input)", "memrepro.cli.check:main"),
    "leaderboard": Command("every retriever x benchmark on one encoder, Δ vs dense (from results/)",
                           "memrepro.cli.compare:leaderboard_main"),
    "export": Command("write a benchmark's corpus / queries / qrels as BEIR or TREC files",
                      "memrepro.cli.export:main"),
    "train": Command("find or train the models a retriever needs, one per split seed on its dev conversations "
                     "(Hydra; default: ConvMemory v1 + the cascade's cross-encoder)", "memrepro.cli.train:main"),
    "keep": Command("keep complete runs as compressed copies to commit (results/kept); --restore writes them back",
                    "memrepro.cli.keep:main"),
    "bench": Command("speed benchmarks side by side in one process (`bench scale`: 10k-1M memories vs FAISS)",
                     "memrepro.cli.bench:main"),
}


HYDRA_COMMANDS = frozenset({"run", "eval", "train"})  # the rest parse their arguments with memrepro.cli.args
PLAN_FLAGS = {"run": "--dry-run", "train": "--plan"}  # print the training plan and exit


def usage() -> str:
    lines = ["usage: python -m memrepro <command> [overrides...]", "", "commands:"]
    lines += [f"  {name:<12} {command.summary}" for name, command in COMMANDS.items()]
    lines += ["", "--debug (anywhere on the line) prints the traceback of a failure; exit codes: 0 ok, 2 bad input "
              "(config key or value, data or run file, run folder, model, missing dependencies), 1 failed run or "
              "internal error, 130 Ctrl-C, 143 SIGTERM"]
    lines += ["", "run --dry-run / train --plan: print the training plan (each model, its forecast, the total) and "
              "what the run would do, then exit: nothing is trained, computed or written"]
    lines += ["", "examples:",
              "  python -m memrepro run dataset=locomo retriever=dense encoder=mpnet",
              "  python -m memrepro run -m encoder=minilm,mpnet",
              "  python -m memrepro run --help        (config groups, common keys, -m, --dry-run)"]
    return "\n".join(lines)


def _load(entry: str) -> Callable[[], None]:
    import importlib

    module, function = entry.split(":")
    return getattr(importlib.import_module(module), function)


def _hydra_errors_in_one_line() -> None:
    """Hydra reports a failed composition (unknown key or option, bad override, wrong type) itself, with exit code 1
    and sometimes a stack trace, and a task's own failure as a traceback; memrepro's contract is one line, with
    exit code 2 for bad input and 1 for the rest. Hydra offers no hook around composition, so its reporting
    function is replaced (through :mod:`memrepro.hydra_internals`, the one home of Hydra's private names)."""
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from memrepro.hydra_internals import mode_from_command_line, report_errors_with

    def run_and_report(func):
        from memrepro.cli.failures import composition_error, config_file_error, reported

        with reported():  # --debug: the traceback too, as for any failure
            try:
                return func()
            except (HydraException, OmegaConfBaseException) as exc:
                raise composition_error(exc) from exc
            except yaml.YAMLError as exc:  # a config file Hydra could not read (a python/ tag, bad syntax)
                raise config_file_error(exc) from exc

    report_errors_with(run_and_report)
    mode_from_command_line()


# Modules every command imports first: when one is absent, this interpreter is not the project's environment.
CORE_DEPENDENCIES = ("hydra", "omegaconf", "numpy", "torch")


def _missing_dependency() -> str | None:
    """The first core dependency this interpreter cannot import (looked up, not imported: no cost)."""
    from importlib.util import find_spec

    return next((name for name in CORE_DEPENDENCIES if find_spec(name) is None), None)


def _dependencies_error(module: str) -> str:
    return (f"memrepro: error: the dependencies are not installed for {sys.executable} (no module {module!r}); "
            f"run `make install`, then use `.venv/bin/python -m memrepro ...`")


def _nothing_written(scratch: str) -> list[str]:
    """Hydra overrides for a command that writes nothing (``run --dry-run``, ``train --plan``): no log file and no
    ``.hydra/`` folder; the output folders Hydra makes (a sweep's, with its ``multirun.yaml``) go to ``scratch``,
    a temporary folder removed on exit. Given last: they win over the user's own."""
    return [f"hydra.run.dir='{scratch}'", f"hydra.sweep.dir='{scratch}'", "hydra.output_subdir=null",
            "hydra.job_logging.root.handlers=[console]"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:  # tracebacks on, for every command (Hydra reads HYDRA_FULL_ERROR)
        argv = [a for a in argv if a != "--debug"]
        os.environ["MEMREPRO_DEBUG"] = "1"
        os.environ["HYDRA_FULL_ERROR"] = "1"
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        error = UnknownNameError("command", name, list(COMMANDS), "`python -m memrepro --help` describes them")
        print(f"memrepro: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if name in HYDRA_COMMANDS and {"-h", "--help"} & set(rest):  # ours, read from conf/ (Hydra's: --hydra-help)
        from memrepro.cli.help import command_help

        print(command_help(name))
        return 0
    if not {"-h", "--help"} & set(rest):
        from memrepro.paths import outside_notice

        notice = outside_notice()
        if notice:  # before anything is computed or written
            print(notice, file=sys.stderr, flush=True)
    missing = _missing_dependency()
    if missing:
        print(_dependencies_error(missing), file=sys.stderr)
        return EXIT_BAD_INPUT
    plan_only = PLAN_FLAGS.get(name) in rest
    if plan_only:  # the plan only: read by the command (memrepro.training.plan.plan_only)
        from memrepro.training.plan import PLAN_ONLY_ENV

        rest = [a for a in rest if a != PLAN_FLAGS[name]]
        os.environ[PLAN_ONLY_ENV] = "1"
    if name in HYDRA_COMMANDS:
        from memrepro.cli.args import usage_error
        from memrepro.hydra_internals import hydra_usage_error

        problem = hydra_usage_error(rest)
        if problem:  # argparse would print its usage block; the contract is one line
            print(usage_error(f"python -m memrepro {name}", problem, "the config groups and options"),
                  file=sys.stderr)
            return EXIT_BAD_INPUT
    if name in HYDRA_COMMANDS:
        from memrepro.experiments import asks_for_presets, register_presets

        if asks_for_presets(rest):
            register_presets()
    scratch = tempfile.mkdtemp(prefix="memrepro-plan-") if plan_only else None
    sys.argv = [f"memrepro {name}", *rest, *(_nothing_written(scratch) if scratch else ())]
    _hydra_errors_in_one_line()
    from memrepro.cli.failures import install_sigterm_handler, reported

    install_sigterm_handler()
    try:
        with reported():
            try:
                command = _load(COMMANDS[name].entry)
            except ModuleNotFoundError as exc:
                if (exc.name or "memrepro").split(".")[0] == "memrepro":
                    raise
                print(_dependencies_error(exc.name), file=sys.stderr)
                return EXIT_BAD_INPUT
            code = command()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return code if isinstance(code, int) else 0


def cli() -> None:
    """``python -m memrepro`` and the ``memrepro`` console script: :func:`main`, then the process exits."""
    code = main()
    # Nothing is left to free that the operating system does not reclaim: frozen objects are skipped by the
    # collector's passes at shutdown (over Hydra's and OmegaConf's cyclic config trees: about 0.07 s a command).
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    cli()
