"""``python -m memrepro train``: find or train every model a retriever needs, one per split seed, on that seed's
dev conversations only. The resolution is the one ``run`` does on demand (``memrepro.training.artifacts``); this
command only does it ahead of time, for all seeds, and prints where the models are."""

from __future__ import annotations

import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro.errors import MemreproError
from memrepro.paths import CONFIG_DIR



def train_all(cfg: DictConfig) -> list[str]:
    from memrepro.models.encoder import resolve_device
    from memrepro.runner import build, encode_and_index, load_benchmark
    from memrepro.training.artifacts import TrainingContext

    if cfg.runtime.torch_threads:
        import torch

        torch.set_num_threads(int(cfg.runtime.torch_threads))  # one per process when seeds train side by side
    device = resolve_device(cfg.runtime.device)
    benchmark, _ = load_benchmark(cfg.dataset)
    encoder = build(cfg.encoder)
    retriever = build(cfg.retriever)
    if not hasattr(retriever, "bind_training"):
        raise MemreproError(f"retriever {retriever.name!r} has no trained models: nothing to train")
    index, query_vectors, _ = encode_and_index(benchmark, encoder, Path(cfg.paths.cache_dir), device,
                                               bool(cfg.runtime.progress), {})
    retriever.bind_training(TrainingContext(benchmark, index, query_vectors, encoder.identity,
                                            Path(cfg.paths.models_dir), device, bool(cfg.runtime.progress),
                                            float(cfg.runtime.checkpoint_every_s)))
    lines = []
    for split in benchmark.splits:
        if cfg.seeds and split.seed not in cfg.seeds:
            continue
        start = time.perf_counter()
        retriever.for_split(split)
        found = "; ".join(f"{a.kind}: {_where(a, split)}" for a in _artifacts(retriever))
        lines.append(f"seed {split.seed}: ready in {time.perf_counter() - start:.0f} s ({found})")
        print(lines[-1], flush=True)
    return lines


def _artifacts(retriever: object) -> list:
    """The per-seed models a retriever resolves: its own, then its first stage's (each once)."""
    from memrepro.training.artifacts import PerSeedArtifact

    found, parts = [], [retriever]
    while parts:
        for value in vars(parts.pop(0)).values():
            if isinstance(value, PerSeedArtifact) and all(value is not f for f in found):
                found.append(value)
            elif hasattr(value, "retrieve") and hasattr(value, "describe"):  # a nested retriever (first stage)
                parts.append(value)
    return found


def _where(artifact, split) -> str:
    """Where this split's model came from: the checkpoint folder for our recipes, else the path or published name."""
    how = artifact.resolved.get(split.name, "")
    return str(artifact.folder(split)) if how.startswith("recipe ") else how


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> None:
    from memrepro.cli.failures import reported
    from memrepro.validate import validate_train_config

    with reported():
        validate_train_config(cfg)
        train_all(cfg)
    print(f"\nmodels under {cfg.paths.models_dir}/ (by recipe hash); `python -m memrepro run` with the same "
          f"settings finds them")
