"""``python -m memrepro run``: the Hydra app around :func:`memrepro.runner.run`."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import memrepro.config  # noqa: F401  (registers the schemas in the ConfigStore)
from memrepro.errors import MemreproError
from memrepro.report import summary_table

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "conf")
log = logging.getLogger("memrepro")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    from memrepro.runner import run

    try:
        outcome = run(cfg)
    except MemreproError as exc:
        print(f"memrepro: error: {exc}", file=sys.stderr)
        sys.exit(1)
    state = "skipped (already complete)" if outcome.skipped else "done"
    print(f"\n{state}: {outcome.folder}")
    print(summary_table(outcome.metrics))
