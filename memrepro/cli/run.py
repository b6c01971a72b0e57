"""``python -m memrepro run``: the Hydra app around :func:`memrepro.runner.run`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import memrepro.config  # noqa: F401  (registers the schemas in the ConfigStore)
from memrepro.cli.failures import reported
from memrepro.context import RunContext
from memrepro.paths import CONFIG_DIR, shown
from memrepro.report import primary_line, summary_table

if TYPE_CHECKING:
    from memrepro.runner import RunOutcome  # imported when a run starts, not when the command line is parsed

log = logging.getLogger("memrepro")


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig, context: RunContext | None = None) -> RunOutcome | None:
    """One run; returns its outcome, which a sweep's summary (memrepro.sweep) reads. ``context``: the one a sweep's
    points share (``hydra_plugins/memrepro_sweeper`` passes it); a single run gets a fresh one."""
    with reported():  # one line and an exit code per failure, in a launcher's job process too
        from memrepro.checks import say, valid_codes
        from memrepro.cli.check import findings_of
        from memrepro.runner import dry_run, run
        from memrepro.training.plan import plan_only

        ignore = valid_codes(cfg.checks.ignore, "checks.ignore")
        if plan_only():  # --dry-run: the training plan and what would happen; nothing trained or written
            print(dry_run(cfg, context))
            return
        outcome = run(cfg, context=context)  # log lines above progress bars while it computes (runner)
        findings = say(findings_of(outcome.folder, outcome.record), ignore)
    state = "skipped (already complete)" if outcome.skipped else "done"  # a restore is said by the runner's line
    print(f"\n{state}: {shown(outcome.folder)}")
    if HydraConfig.get().mode == RunMode.MULTIRUN:  # one line a point: the sweep summary follows the last one
        print(primary_line(outcome.record))
    else:
        print(summary_table(outcome.record))
    if findings:  # the protocol check (docs/checks.md)
        print(findings)
    return outcome
