"""``python -m memrepro train``: one cross-encoder per split seed, trained on that seed's dev conversations only."""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro.errors import ModelNotFoundError
from memrepro.provenance import config_hash

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "conf")


def _base_model(cfg: DictConfig) -> tuple[str, str]:
    """The configured base (the papers' ms-marco cross-encoder) when it loads, else the offline backbone, labelled."""
    from memrepro.models.resolve import resolve_model

    try:
        resolved = resolve_model(cfg.base_model)
        return resolved.path, resolved.name
    except ModelNotFoundError:
        fallback = resolve_model(cfg.fallback_base_model)
        return fallback.path, f"{fallback.name} (bi-encoder backbone; substitute for {cfg.base_model})"


def train_all(cfg: DictConfig) -> Path:
    from memrepro.evaluation.freeze import freeze
    from memrepro.models.encoder import resolve_device
    from memrepro.retrievers.base import RetrievalInput
    from memrepro.runner import build, encode_and_index, load_benchmark
    from memrepro.training.checkpoints import checkpoint_complete
    from memrepro.training.cross_encoder import Recipe, build_records, train

    device = resolve_device(cfg.runtime.device)
    benchmark, _ = load_benchmark(cfg.dataset)
    encoder = build(cfg.encoder)
    first_stage = build(cfg.first_stage)
    base_path, base_label = _base_model(cfg)
    recipe = Recipe(lr=cfg.lr, weight_decay=cfg.weight_decay, epochs=cfg.epochs, batch_records=cfg.batch_records,
                    max_length=cfg.max_length, protected=cfg.protected, arm=cfg.arm)
    identity = {"dataset": OmegaConf.to_container(cfg.dataset, resolve=True), "encoder": encoder.identity,
                "first_stage": first_stage.describe(), "base": base_label, "recipe": vars(recipe),
                "data_sha256": benchmark.data_sha256, "limit_queries": cfg.limit_queries}
    identity["dataset"].pop("data_dir", None)
    identity["dataset"].pop("allow_unverified", None)
    root = Path(cfg.paths.models_dir) / "cross_encoder" / config_hash(identity)
    root.mkdir(parents=True, exist_ok=True)
    (root / "identity.json").write_text(json.dumps(identity, indent=2, default=str))

    timings: dict[str, float] = {}
    index, query_vectors, _ = encode_and_index(benchmark, encoder, Path(cfg.paths.cache_dir), device,
                                               bool(cfg.runtime.progress), timings)
    for split in benchmark.splits:
        if cfg.seeds and split.seed not in cfg.seeds:
            continue
        out_dir = root / f"seed{split.seed}"
        if checkpoint_complete(out_dir):
            print(f"seed {split.seed}: complete at {out_dir} (skipped)")
            continue
        dev = [q for q in benchmark.queries if q.episode_id in set(split.dev_episode_ids) and q.scored]
        dev = dev[: cfg.limit_queries] if cfg.limit_queries else dev
        results = first_stage.retrieve([RetrievalInput(q.id, q.text, q.episode_id) for q in dev],
                                       __import__("numpy").stack([query_vectors[q.id] for q in dev]), index)
        rankings = {q.id: freeze(q.id, r.hits, benchmark.episodes[q.episode_id], first_stage.order)
                    for q, r in zip(dev, results)}
        records = [r for r in build_records(benchmark, split, rankings, cfg.protected) if r.query_id in rankings]
        print(f"seed {split.seed}: {len(records)} records from dev conversations {list(split.dev_episode_ids)}",
              flush=True)
        recipe_seed = Recipe(**{**vars(recipe), "seed": int(split.seed or 0)})
        log = train(records, base_path, out_dir, recipe_seed, base_label, device=device)
        print(f"seed {split.seed}: {log['steps']} steps in {log['train_seconds']:.0f} s, "
              f"loss {log['loss_first']:.3f} → {log['loss_last_mean']:.3f}; saved {out_dir}", flush=True)
    return root


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def main(cfg: DictConfig) -> None:
    from memrepro.cli.failures import reported

    from memrepro.validate import validate_train_config

    with reported():
        validate_train_config(cfg)
        root = train_all(cfg)
    print(f"\ncheckpoints: {root}/seed{{seed}}\nuse: python -m memrepro run retriever=cascade "
          f"retriever.cross_encoder.template='{root}/seed{{seed}}'")
