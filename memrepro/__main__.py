"""``python -m memrepro <command> [hydra overrides]``.

Hydra has no subcommands, so this dispatcher strips the command word and hands the rest of the command line to
that command's own ``@hydra.main`` app (which keeps ``-m`` multirun, ``--cfg``, tab completion and the
override grammar intact).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable


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
    "leaderboard": Command("every retriever x benchmark on one encoder, Δ vs dense (from results/)",
                           "memrepro.cli.compare:leaderboard_main"),
    "export": Command("write a benchmark's corpus / queries / qrels as BEIR or TREC files",
                      "memrepro.cli.export:main"),
    "train": Command("find or train the models a retriever needs, one per split seed on its dev conversations "
                     "(Hydra; default: ConvMemory v1 + the cascade's cross-encoder)", "memrepro.cli.train:main"),
    "keep": Command("keep complete runs as compressed copies to commit (results/kept); --restore writes them back",
                    "memrepro.cli.keep:main"),
    "migrate": Command("move runs written before run ids hashed algorithm versions to their current ids",
                       "memrepro.migrate:main"),
    "bench": Command("speed benchmarks side by side in one process (`bench scale`: 10k-1M memories vs FAISS)",
                     "memrepro.cli.bench:main"),
}


def usage() -> str:
    lines = ["usage: python -m memrepro <command> [overrides...]", "", "commands:"]
    lines += [f"  {name:<12} {command.summary}" for name, command in COMMANDS.items()]
    lines += ["", "--debug (anywhere on the line) prints the traceback of a failure; exit codes: 0 ok, 2 bad input "
              "(config value, data file, model), 1 failed run, 130 Ctrl-C, 143 SIGTERM"]
    lines += ["", "examples:",
              "  python -m memrepro run dataset=locomo retriever=dense encoder=mpnet",
              "  python -m memrepro run -m encoder=minilm,mpnet",
              "  python -m memrepro run --help        (Hydra: config groups and options)"]
    return "\n".join(lines)


def _load(entry: str) -> Callable[[], None]:
    import importlib

    module, function = entry.split(":")
    return getattr(importlib.import_module(module), function)


def _hydra_errors_in_one_line() -> None:
    """Hydra reports a failed composition (unknown key, bad override, wrong type) itself, with exit code 1 and
    sometimes a stack trace; memrepro's contract is one line and exit code 2 for bad input, 1 for the rest."""
    try:
        from hydra._internal import utils as hydra_utils
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException
    except ImportError:  # pragma: no cover - Hydra is a dependency
        return
    original = hydra_utils.run_and_report
    if getattr(original, "__memrepro__", False):
        return

    def run_and_report(func):
        from memrepro.cli.failures import debug_enabled
        from memrepro.errors import one_line

        if debug_enabled():
            return original(func)
        try:
            return func()
        except (HydraException, OmegaConfBaseException) as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else None
            detail = one_line(exc) + (f"; {one_line(cause)}" if cause and str(cause) not in str(exc) else "")
            print(f"memrepro: error: config: {detail}; `--cfg job` prints the composed config, `--help` the "
                  f"groups", file=sys.stderr)
            sys.exit(2)
        except Exception as exc:  # noqa: BLE001 - one line; --debug shows the traceback
            print(f"memrepro: internal error: {type(exc).__name__}: {one_line(exc)} (rerun with --debug for the "
                  f"traceback)", file=sys.stderr)
            sys.exit(1)

    run_and_report.__memrepro__ = True  # type: ignore[attr-defined]
    hydra_utils.run_and_report = run_and_report


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
        known = ", ".join(COMMANDS)
        print(f"memrepro: unknown command {name!r}; commands: {known}\n\n{usage()}", file=sys.stderr)
        return 2
    sys.argv = [f"memrepro {name}", *rest]
    _hydra_errors_in_one_line()
    from memrepro.cli.failures import install_sigterm_handler, reported

    install_sigterm_handler()
    with reported():
        code = _load(COMMANDS[name].entry)()
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
