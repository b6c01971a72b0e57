"""``python -m memrepro eval dataset=<name> run_file=<path>``: score an external run file exactly as ``run``
scores its own rankings (same freeze, metrics, aggregation and results folder), so ``tables``, ``compare`` and
``leaderboard`` treat it like any run. Validation rules: :mod:`memrepro.runs.runfile`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import hydra
from omegaconf import MISSING, DictConfig, OmegaConf

import memrepro.config  # noqa: F401  (registers the schemas eval.yaml names, eval_schema among them)
from memrepro.context import RunContext
from memrepro.errors import ConfigError
from memrepro.paths import CONFIG_DIR
from memrepro.runs.record import RunRecord


@dataclass
class EvalOutcome:
    folder: Path
    skipped: bool
    record: RunRecord
    warnings: list[str]


def evaluate_run_file(cfg: DictConfig, context: RunContext | None = None) -> EvalOutcome:
    """Validate, freeze, score and write; nothing is written when validation fails."""
    from memrepro.datasets.io import sha256_file
    from memrepro.evaluation.freeze import TIE_RULE
    from memrepro.provenance import config_hash
    from memrepro.runs.folder import is_complete, read_record, run_dir, run_problem, write_run
    from memrepro.runs.identity import semantic_config
    from memrepro.runs.runfile import WARNING_FIXES, depth_warning, order_warning, read_run_file, validate
    from memrepro.stages import load_benchmark, metric_names_for, score_rankings

    timings: dict[str, float] = {}
    start = time.perf_counter()
    benchmark, verification = load_benchmark(cfg.dataset, context)
    timings["load_s"] = time.perf_counter() - start
    start = time.perf_counter()
    parsed = read_run_file(cfg.run_file, cfg.format)
    checked = validate(parsed, benchmark, order=cfg.order, strict=bool(cfg.strict))
    timings["validate_s"] = time.perf_counter() - start
    run_sha = sha256_file(parsed.path)
    name = cfg.name or f"external-{parsed.path.stem}"

    semantic = semantic_config(cfg)
    semantic.pop("output", None)  # output.top_n changes how much of a ranking is stored, not a score: not in the id
    run_id = config_hash({"config": semantic, "data_sha256": benchmark.data_sha256, "run_file_sha256": run_sha})
    folder = run_dir(cfg.paths.results_dir, benchmark.name, name, cfg.encoder_label, run_id)
    warnings = [f"{line}: {WARNING_FIXES[kind]}" for kind, line in zip(checked.warnings, checked.lines())]
    metric_names = metric_names_for(cfg, benchmark)
    truncated = depth_warning(parsed.path, checked, metric_names)
    tied = order_warning(parsed, checked, cfg.order)
    warnings += [f"warning: {line}" for line in (truncated, tied) if line]
    if is_complete(folder) and not cfg.overwrite:
        problem = run_problem(folder)  # as `run` does: a damaged folder is rescored, never returned as done
        if not problem:
            return EvalOutcome(folder, True, read_record(folder), warnings)
        warnings.append(f"{problem}; the run is rescored")

    start = time.perf_counter()
    rows, counts, summary = score_rankings(benchmark, checked.rankings, {}, metric_names, {}, int(cfg.output.top_n))
    timings["metrics_s"] = time.perf_counter() - start
    retriever = {"name": name, "external_run_file": str(parsed.path), "format": parsed.format,
                 "order": cfg.order, "run_file_sha256": run_sha}
    config = OmegaConf.to_container(cfg, resolve=True)
    config["retriever"] = retriever
    config["encoder"] = {"label": cfg.encoder_label}
    record = RunRecord.build(  # an external run carries no timing memrepro measured: no latency
        run_id=run_id, config=config, rows=rows, benchmark=benchmark, verification=verification,
        retriever=retriever, encoder=config["encoder"], metric_names=metric_names, counts=counts, summary=summary,
        timings=timings, source=str(folder / "metrics.json"), warnings=[line for line in (truncated, tied) if line],
        validation={"warnings": dict(checked.warnings), "examples": checked.examples, "strict": bool(cfg.strict),
                    "order": cfg.order, "format": parsed.format},
        tie_rule=TIE_RULE if cfg.order == "score" else "the run file's own order (order=rank)",
        run_file={"path": str(parsed.path), "sha256": run_sha})
    folder = write_run(folder, config, rows, record, run_id)
    return EvalOutcome(folder, False, record, warnings)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="eval")
def main(cfg: DictConfig, context: RunContext | None = None) -> None:
    """``context``: the one a sweep's points share (``hydra_plugins/memrepro_sweeper``)."""
    from memrepro.cli.failures import reported
    from memrepro.report import summary_table
    from memrepro.validate import validate_eval_config

    with reported():  # one line and an exit code per failure: 2 for a bad config or run file, 1 for the rest
        if OmegaConf.is_missing(cfg, "run_file"):
            raise ConfigError("run_file", MISSING, "a TREC or JSONL run file, e.g. python -m memrepro eval "
                              "dataset=locomo run_file=path/to/run.trec (run_file is required)")
        validate_eval_config(cfg)
        from memrepro.checks import say, valid_codes
        from memrepro.cli.check import findings_of

        ignore = valid_codes(cfg.checks.ignore, "checks.ignore")
        outcome = evaluate_run_file(cfg, context)
        for line in outcome.warnings:
            print(line, file=sys.stderr)
        state = "skipped (already complete)" if outcome.skipped else "done"
        print(f"\n{state}: {outcome.folder}")
        print(summary_table(outcome.record))
        findings = say(findings_of(outcome.folder, outcome.record), ignore)
        if findings:  # the protocol check (docs/checks.md)
            print(findings)
