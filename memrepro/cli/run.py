"""``python -m memrepro run``: the Hydra app around :func:`memrepro.runner.run`."""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

import memrepro.config  # noqa: F401  (registers the schemas in the ConfigStore)
from memrepro.cli.failures import reported
from memrepro.paths import CONFIG_DIR
from memrepro.report import summary_table

log = logging.getLogger("memrepro")


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    with reported():  # one line and an exit code per failure, in a launcher's job process too
        from memrepro.checks import findings_of, say, valid_codes
        from memrepro.runner import dry_run, run
        from memrepro.training.plan import plan_only

        ignore = valid_codes(cfg.checks.ignore, "checks.ignore")
        if plan_only():  # --dry-run: the training plan and what would happen; nothing trained or written
            print(dry_run(cfg))
            return
        outcome = run(cfg)
        findings = say(findings_of(outcome.folder, outcome.record), ignore)
    state = "skipped (already complete)" if outcome.skipped else "done"  # a restore is said by the runner's line
    print(f"\n{state}: {outcome.folder}")
    print(summary_table(outcome.record))
    if findings:  # the protocol check (docs/checks.md)
        print(findings)
