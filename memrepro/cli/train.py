"""``python -m memrepro train``: find or train every model a retriever needs, one per split seed, on that seed's
dev conversations only. The resolution is the one ``run`` does on demand (``memrepro.artifacts.per_seed``); this
command only does it ahead of time, for all seeds, and prints where the models are. The training plan (every model,
ready or forecast, and the total) is printed first; ``--plan`` prints it and exits."""

from __future__ import annotations

import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro.context import RunContext
from memrepro.errors import MemreproError
from memrepro.logs import above_progress_bars
from memrepro.paths import CONFIG_DIR



def train_all(cfg: DictConfig, plan_only: bool = False, context: RunContext | None = None) -> list[str]:
    """Find or train every model; ``plan_only``: print the plan and return, with nothing encoded or trained.
    ``context``: shared with the other points of a sweep (a fresh one when None)."""
    from memrepro.models.encoder import resolve_device
    from memrepro.stages import build, encode_and_index, load_benchmark
    from memrepro.artifacts.per_seed import TrainingContext
    from memrepro.training.plan import per_seed_artifacts, planning_context, training_plan

    if cfg.runtime.torch_threads:
        import torch

        torch.set_num_threads(int(cfg.runtime.torch_threads))  # one per process when seeds train side by side
    device = resolve_device(cfg.runtime.device)
    context = context if context is not None else RunContext()
    benchmark, _ = load_benchmark(cfg.dataset, context)
    encoder = build(cfg.encoder, context)
    retriever = build(cfg.retriever)
    if not per_seed_artifacts(retriever):
        raise MemreproError(f"retriever {retriever.name!r} has no trained models: nothing to train")
    splits = [split for split in benchmark.splits if not cfg.seeds or split.seed in cfg.seeds]
    retriever.bind_training(planning_context(benchmark, encoder, Path(cfg.paths.models_dir), device))
    plan = training_plan(retriever, splits, device)
    print(plan.render(), flush=True)
    if plan_only:
        return [plan.render()]
    index, query_vectors, _ = encode_and_index(benchmark, encoder, Path(cfg.paths.cache_dir), device,
                                               bool(cfg.runtime.progress), {}, context=context)
    retriever.bind_training(TrainingContext(benchmark, index, query_vectors, encoder.identity,
                                            Path(cfg.paths.models_dir), device, bool(cfg.runtime.progress),
                                            float(cfg.runtime.checkpoint_every_s), plan_printed=True,
                                            run_context=context))
    lines = []
    for split in splits:
        start = time.perf_counter()
        retriever.for_split(split)
        found = "; ".join(f"{a.kind}: {_where(a, split)}" for a in per_seed_artifacts(retriever))
        lines.append(f"seed {split.seed}: ready in {time.perf_counter() - start:.0f} s ({found})")
        print(lines[-1], flush=True)
    return lines


def _where(artifact, split) -> str:
    """Where this split's model came from: the checkpoint folder for our recipes, else the path or published name."""
    how = artifact.resolved.get(split.name, "")
    return str(artifact.folder(split)) if how.startswith("recipe ") else how


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig, context: RunContext | None = None) -> None:
    """``context``: the one a sweep's points share (``hydra_plugins/memrepro_sweeper``)."""
    from memrepro.cli.failures import reported
    from memrepro.training.plan import plan_only
    from memrepro.validate import validate_train_config

    with reported(), above_progress_bars():
        validate_train_config(cfg)
        train_all(cfg, plan_only(), context)
    if plan_only():
        return
    print(f"\nmodels under {cfg.paths.models_dir}/ (by recipe hash); `python -m memrepro run` with the same "
          f"settings finds them")
