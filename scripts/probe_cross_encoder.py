"""A cheap pre-screen of a cross-encoder recipe that touches no test conversation: train it on one split seed's dev
conversations minus one held-out dev conversation, then, on the held-out one, compare the CE's order of the record
stage's top 10 with the stage's own order (MRR over the questions whose gold is in that top 10, i.e. exactly what
the cascade can change). A recipe that cannot beat its first stage here cannot make the cascade help; one that does
is worth the 5-seed run (`python -m memrepro train model=cascade ...`).

    python scripts/probe_cross_encoder.py --seed 7 first_stage=dense cross_encoder.recipe.head_lr=1e-3

With ``--pool 500`` it also measures what the full pool would do on the held-out conversation: the record
stage's top 500 of (up to ``--pool-questions``, evenly spaced) held-out questions reordered by the CE over plain
``(query, text)`` pairs at the library's max length, the full pool's protocol (``retriever=fullpool_trained``), the
rest in stage order; MRR of that order against the stage's own, and the share of questions taken by the five most
frequent top-1 turns (hubs):

    python scripts/probe_cross_encoder.py --seed 7 --pool 500 --model fullpool_trained cross_encoder=trained_head_lr \
        cross_encoder.recipe.hard_negatives=10 cross_encoder.recipe.pair_format=plain

Positional arguments are the same Hydra overrides `python -m memrepro train` takes. One JSON line is printed and
appended to --out.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def reciprocal_rank(is_gold: np.ndarray) -> float:
    hits = np.flatnonzero(is_gold)
    return 1.0 / (1 + hits[0]) if len(hits) else 0.0


def sign_test(ours: list[float], theirs: list[float]) -> tuple[int, int, float | None]:
    """Wins, losses and the two-sided sign test's p over paired reciprocal ranks (ties dropped)."""
    from scipy.stats import binomtest

    wins = int(sum(a > b for a, b in zip(ours, theirs)))
    losses = int(sum(a < b for a, b in zip(ours, theirs)))
    return wins, losses, float(binomtest(wins, wins + losses).pvalue) if wins + losses else None


def hub_share(top1: list[str], hubs: int = 5) -> float:
    """The share of questions whose first turn is one of the ``hubs`` most frequent first turns."""
    return sum(n for _, n in Counter(top1).most_common(hubs)) / max(1, len(top1))


def full_pool_probe(resolver, rankings: dict, held: str, folder: Path, pool: int, limit: int) -> dict:
    """The full pool's protocol on the held-out conversation's questions (``FullPoolRetriever``: plain pairs,
    library max length, stable sort so ties keep stage order, the tail in stage order)."""
    from memrepro.models.cross_encoder import CrossEncoderScorer
    from memrepro.retrievers.cascade import protected_rerank

    benchmark = resolver.context.benchmark
    by_id = {q.id: q for q in benchmark.queries}
    rankings = {q: r for q, r in rankings.items() if by_id[q].episode_id == held}
    ids = sorted(rankings)
    ids = [ids[i] for i in np.linspace(0, len(ids) - 1, min(limit, len(ids))).round().astype(int)]
    scorer = CrossEncoderScorer(str(folder), path=str(folder), max_length=None)
    texts = {m.id: m.text for m in benchmark.episodes[held].memories}
    ce_rr, stage_rr, ce_top1, stage_top1 = [], [], [], []
    for query_id in ids:
        query, ranked = by_id[query_id], list(rankings[query_id].memory_ids)
        scores = scorer.score([(query.text, texts[m]) for m in ranked[:pool]])
        order = protected_rerank(np.arange(len(ranked)), np.zeros(len(ranked), np.float32), scores, pool).positions
        reranked = [ranked[i] for i in order]
        gold = set(query.gold)
        ce_rr.append(reciprocal_rank(np.array([m in gold for m in reranked])))
        stage_rr.append(reciprocal_rank(np.array([m in gold for m in ranked])))
        ce_top1.append(reranked[0])
        stage_top1.append(ranked[0])
    wins, losses, p = sign_test(ce_rr, stage_rr)
    return {"pool": pool, "pool_questions": len(ids), "mrr_pool_cross_encoder": float(np.mean(ce_rr)),
            "mrr_pool_first_stage": float(np.mean(stage_rr)), "pool_wins": wins, "pool_losses": losses,
            "pool_sign_test_p": p,
            "pool_top5_hub_share_cross_encoder": hub_share(ce_top1),
            "pool_top5_hub_share_first_stage": hub_share(stage_top1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--held-out", type=int, default=-1, help="which dev conversation to hold out (index)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default="cascade", choices=["cascade", "fullpool_trained"],
                        help="whose cross-encoder recipe (a plain-pair recipe is the full pool's)")
    parser.add_argument("--pool", type=int, default=0, help="also rerank the stage's top POOL (the full pool)")
    parser.add_argument("--pool-questions", type=int, default=80, help="held-out questions scored over the pool")
    parser.add_argument("--out", default="results/probes/cross_encoder_probe.jsonl")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    import torch

    import memrepro.config  # noqa: F401
    from memrepro.models.cross_encoder import CrossEncoderScorer
    from memrepro.models.encoder import resolve_device
    from memrepro.stages import build, encode_and_index, load_benchmark
    from memrepro.artifacts.per_seed import TrainingContext
    from memrepro.training.cross_encoder import Recipe, train, training_pairs

    torch.set_num_threads(args.threads)
    with initialize_config_dir(CONF, version_base="1.3"):
        cfg = compose("train", [f"model={args.model}", f"seeds=[{args.seed}]", *args.overrides])
    device = resolve_device(cfg.runtime.device)
    benchmark, _ = load_benchmark(cfg.dataset)
    encoder = build(cfg.encoder)
    retriever = build(cfg.retriever)
    index, query_vectors, _ = encode_and_index(benchmark, encoder, Path(cfg.paths.cache_dir), device, False, {})
    retriever.bind_training(TrainingContext(benchmark, index, query_vectors, encoder.identity,
                                            Path(cfg.paths.models_dir), device, False))
    resolver = retriever.cross_encoders
    split = next(s for s in benchmark.splits if s.seed == args.seed)
    held = split.dev_episode_ids[args.held_out]
    rankings = resolver.stage_rankings(split)  # once: the training records and the pool check share them
    records = resolver.records(split, rankings)
    fits = [r for r in records if r.episode_id != held]
    tops = [replace(r, candidates=r.candidates[:resolver.recipe.protected]) for r in records if r.episode_id == held]
    checks = [r for r in tops if set(r.gold_ids) & {c["id"] for c in r.candidates}]  # hard negatives dropped
    recipe = Recipe(**{**asdict(resolver.recipe), "seed": args.seed})
    base_path, base_label = resolver.base()
    with tempfile.TemporaryDirectory() as tmp:
        log = train(fits, base_path, Path(tmp) / "probe", recipe, base_label, device=device, progress=True,
                    donors=resolver.donors([e for e in split.dev_episode_ids if e != held]))
        scorer = CrossEncoderScorer(str(Path(tmp) / "probe"), path=str(Path(tmp) / "probe"),
                                    max_length=recipe.max_length)
        ce_rr, stage_rr = [], []
        for record in checks:
            scores = scorer.score(training_pairs(record, recipe, None))
            gold = np.array([c["id"] in set(record.gold_ids) for c in record.candidates])
            ce_rr.append(reciprocal_rank(gold[np.argsort(-scores, kind="stable")]))  # the cascade's tie rule
            stage_rr.append(reciprocal_rank(gold))
        if args.pool:
            pool_result = full_pool_probe(resolver, rankings, held, Path(tmp) / "probe", args.pool,
                                          args.pool_questions)
    wins, losses, p = sign_test(ce_rr, stage_rr)
    result = {"seed": args.seed, "held_out": held, "model": args.model, "overrides": args.overrides,
              "record_stage": resolver.recipe_identity()["record_stage"], "recipe": recipe.hashed(),
              "base": base_label, "train_records": len(fits), "held_out_questions": len(checks),
              "steps": log["steps"], "loss_first": log["loss_first"], "loss_last_mean": log["loss_last_mean"],
              "train_seconds": round(log["train_seconds"]), "mrr_in_top_cross_encoder": float(np.mean(ce_rr)),
              "mrr_in_top_first_stage": float(np.mean(stage_rr)), "wins": wins, "losses": losses,
              "sign_test_p": p, **(pool_result if args.pool else {})}
    line = json.dumps(result, default=lambda o: o.item() if hasattr(o, "item") else str(o))  # numpy scalars
    print(line)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as handle:
        handle.write(line + "\n")


if __name__ == "__main__":
    main()
