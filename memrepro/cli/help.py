"""``python -m memrepro run --help`` (and ``train`` / ``eval``): memrepro's own help, read from ``conf/`` without
Hydra (its ``--help`` composes the config and lists internal schemas; ``--hydra-help`` still shows Hydra's own).

The groups and their options come from the config files (:mod:`memrepro.options`), the project folder from
:mod:`memrepro.paths`; the keys below are the ones a first run reaches for, each with an example value, and
``docs/parameters.md`` lists them all with their defaults and ranges.
"""

from __future__ import annotations

import shutil
import textwrap

from memrepro.options import group_defaults, options
from memrepro.paths import project_root

# The keys a first run reaches for: (override with an example value, what it does). Defaults and ranges live in
# the schemas (docs/parameters.md, `--cfg job`).
COMMON_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "config": (
        ("dataset.seeds=[7,11]", "LoCoMo: these split seeds only"),
        ("dataset.variant=oracle", "LongMemEval's haystack variant"),
        ("retriever.mode=topk retriever.k=10", "dense, BM25: the k best only"),
        ("retriever.recollection.alpha=0.3", "Recollection (retriever=rfmem…)"),
        ("retriever.gate.tau=0.2", "RF-Mem's gate (retriever=rfmem…)"),
        ("retriever.engine=compiled", "RF-Mem in numba: same rankings, faster"),
        ("metrics.extra=[ndcg@10]", "beyond the benchmark's own metrics"),
        ("runtime.device=cpu", "where torch computes"),
        ("runtime.torch_threads=2", "the CPU threads torch may use"),
        ("runtime.progress=false", "no progress bars"),
        ("paths.results_dir=DIR", "also $MEMREPRO_RESULTS_DIR"),
    ),
    "train": (
        ("seeds=[23]", "these split seeds only (default: all)"),
        ("runtime.device=cpu", "where torch computes"),
        ("runtime.torch_threads=2", "the CPU threads torch may use"),
    ),
    "eval": (
        ("run_file=path/to/run.trec", "the file to score (TREC, JSONL)"),
        ("name=my-system", "the row's name (results folder)"),
        ("encoder_label=all-mpnet-base-v2", "the encoder your system used"),
        ("strict=true", "unknown ids, duplicates: errors"),
    ),
}
SUMMARIES = {
    "config": "retrieve and evaluate one configuration into results/runs/ (a complete run is skipped, a kept one "
              "restored)",
    "train": "find or train every model a retriever needs, one per split seed, into models/",
    "eval": "score an external run file under a benchmark's protocol, into results/runs/",
}
COMMAND_CONFIG = {"run": "config", "train": "train", "eval": "eval"}
WIDTH = 118


def _width() -> int:
    return min(WIDTH, max(80, shutil.get_terminal_size((WIDTH, 24)).columns))


def _wrapped(label: str, text: str, indent: int) -> list[str]:
    return textwrap.wrap(text, width=_width(), initial_indent=f"  {label:<{indent - 2}}",
                         subsequent_indent=" " * indent) or [f"  {label}"]


def command_help(command: str) -> str:
    """The help of ``run``, ``train`` or ``eval``."""
    config = COMMAND_CONFIG[command]
    root, what = project_root()
    lines = [f"usage: python -m memrepro {command} [group=option] [key=value]"
             + (" [-m] [--dry-run]" if command == "run" else " [--plan]" if command == "train" else ""),
             "", *textwrap.wrap(f"{SUMMARIES[config][0].upper()}{SUMMARIES[config][1:]}. Project folder: {root} "
                                f"({what or 'the current folder: no checkout found'}; $MEMREPRO_HOME moves it).",
                                width=_width()),
             "", "config groups (group=option, * the default):"]
    for group, default in group_defaults(config).items():
        choices = options(group)
        if len(choices) < 2 and default is not None:
            continue  # one option (metrics, paths): its keys are set directly
        listed = " ".join(f"{name}*" if name == default else name for name in choices)
        lines += _wrapped(group, listed, 17)
    lines += ["", "common keys (`--cfg job` prints every key; docs/parameters.md explains each):"]
    for override, text in COMMON_KEYS[config]:
        lines += _wrapped(override, text, 38)
    lines += ["", "options:"]
    flags = []
    if command == "run":
        flags += [("overwrite=true", "recompute a complete (or kept) run"),
                  ("+experiment=<name>", "a declared paper condition; the names:"),
                  ("", "python -m memrepro experiments --list"),
                  ("-m, --multirun", "a sweep over comma lists (retriever.k=5,10)"),
                  ("--dry-run", "the training plan and what would run; writes nothing")]
    if command == "train":
        flags += [("--plan", "the training plan; trains and writes nothing")]
    flags += [("--cfg job", "print the composed config"),
              ("--debug", "the traceback of a failure too"),
              ("--hydra-help", "Hydra's own options (launchers, sweepers)")]
    for flag, text in flags:
        lines += _wrapped(flag, text, 22)
    if command == "run":
        lines += ["", "examples:",
                  "  python -m memrepro run dataset=locomo retriever=cascade",
                  "  python -m memrepro run dataset=personabench retriever=rfmem_personabench",
                  "  python -m memrepro run -m encoder=minilm,mpnet"]
    return "\n".join(lines)
