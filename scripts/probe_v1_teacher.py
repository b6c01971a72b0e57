"""Pre-screen a v1 teacher before paying for its training (docs/convmemory-training.md#pre-screening-a-recipe): on
an even sample of one split seed's dev questions (the ones v1 trains on; no test conversation is read), how well
does a cross-encoder order the dense top-500 that v1's pairwise term takes its top-16 / bottom-64 from, against the
dense cosine (the default teacher)?

    python scripts/probe_v1_teacher.py --seed 7 --questions 40 \\
        --teacher-model 'models/cross_encoder/71058ea7f471466a/seed{seed}'

Positional arguments are Hydra overrides as `python -m memrepro train` takes them (dataset.file=…, encoder=…).
Per teacher: MRR of the first gold over the pool, the share of questions with a gold in the teacher's top 16 (what
the pairwise term pulls up) and in its bottom 64 (what it pushes down). One JSON line is printed and appended to --out.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def teacher_stats(scores: np.ndarray, gold: np.ndarray, top_k: int = 16, bottom_k: int = 64
                  ) -> tuple[float, float, float]:
    """(reciprocal rank of the first gold, gold in the teacher's top ``top_k``, gold in its bottom ``bottom_k``):
    the two sets v1's pairwise term takes (``pairwise_top_k`` / ``pairwise_bottom_k``; they overlap in a small pool,
    as in the loss)."""
    ordered = gold[np.argsort(-np.asarray(scores), kind="stable")]
    first = int(np.flatnonzero(ordered)[0]) + 1
    return 1.0 / first, float(ordered[:top_k].any()), float(ordered[-bottom_k:].any())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--teacher-model", required=True, help="a cross-encoder name or folder; {seed} allowed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="results/probes/v1_teacher_probe.jsonl")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides as `python -m memrepro train` takes them")
    args = parser.parse_args()

    import torch

    import memrepro.config  # noqa: F401
    from memrepro.models.encoder import resolve_device
    from memrepro.stages import build, encode_and_index, load_benchmark
    from memrepro.artifacts.per_seed import TrainingContext

    torch.set_num_threads(args.threads)
    with initialize_config_dir(CONF, version_base="1.3"):
        cfg = compose("train", ["model=convmemory_v1", f"seeds=[{args.seed}]",
                                "retriever.model.recipe.teacher=cross_encoder",
                                f"retriever.model.recipe.teacher_model='{args.teacher_model}'", *args.overrides])
    device = resolve_device(cfg.runtime.device)
    benchmark, _ = load_benchmark(cfg.dataset)
    encoder = build(cfg.encoder)
    models = build(cfg.retriever).models
    index, query_vectors, _ = encode_and_index(benchmark, encoder, Path(cfg.paths.cache_dir), device, False, {})
    models.bind(TrainingContext(benchmark, index, query_vectors, encoder.identity, Path(cfg.paths.models_dir),
                                device, False))
    split = next(s for s in benchmark.splits if s.seed == args.seed)
    items = models.items(split)  # v1's training items: dev questions, dense top-500
    sample = [items[i] for i in np.linspace(0, len(items) - 1, min(args.questions, len(items))).astype(int)]
    cross_encoder, recipe = models.teacher_for(split), models.recipe
    rows: dict[str, list[tuple[float, float, float]]] = {"dense": [], "cross_encoder": []}
    start = time.perf_counter()
    for item in sample:
        gold = np.isin([item.memory_ids[int(p)] for p in item.inputs.candidates], list(item.gold))
        if not gold.any():
            continue  # no gold in the pool: neither teacher can be judged on it
        for teacher, scores in (("dense", item.inputs.raw_scores[item.inputs.candidates]),
                                ("cross_encoder", cross_encoder(item))):
            rows[teacher].append(teacher_stats(scores, gold, recipe.pairwise_top_k, recipe.pairwise_bottom_k))
    result = {"seed": args.seed, "teacher_model": args.teacher_model, "questions": len(rows["dense"]),
              "dev_questions": len(items), "seconds": round(time.perf_counter() - start)}
    for teacher, values in rows.items():
        for i, name in enumerate(("mrr_pool", "gold_in_top16", "gold_in_bottom64")):
            result[f"{teacher}_{name}"] = round(float(np.mean([v[i] for v in values])), 4) if values else None
    line = json.dumps(result)
    print(line)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as handle:
        handle.write(line + "\n")


if __name__ == "__main__":
    main()
