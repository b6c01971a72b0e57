"""``python -m memrepro <command> [hydra overrides]``.

Hydra has no subcommands, so this dispatcher strips the command word and hands the rest of the command line to
that command's own ``@hydra.main`` app (which keeps ``-m`` multirun, ``--cfg``, tab completion and the
override grammar intact).
"""

from __future__ import annotations

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
    "train": Command("fine-tune a cross-encoder per split seed on its dev conversations (Hydra)",
                     "memrepro.cli.train:main"),
}


def usage() -> str:
    lines = ["usage: python -m memrepro <command> [overrides...]", "", "commands:"]
    lines += [f"  {name:<12} {command.summary}" for name, command in COMMANDS.items()]
    lines += ["", "examples:",
              "  python -m memrepro run dataset=locomo retriever=dense encoder=mpnet",
              "  python -m memrepro run -m encoder=minilm,mpnet",
              "  python -m memrepro run --help        (Hydra: config groups and options)"]
    return "\n".join(lines)


def _load(entry: str) -> Callable[[], None]:
    import importlib

    module, function = entry.split(":")
    return getattr(importlib.import_module(module), function)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        known = ", ".join(COMMANDS)
        print(f"memrepro: unknown command {name!r}; commands: {known}\n\n{usage()}", file=sys.stderr)
        return 2
    sys.argv = [f"memrepro {name}", *rest]
    code = _load(COMMANDS[name].entry)()
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
