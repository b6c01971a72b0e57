"""Fine-tune a cross-encoder with ConvMemory v2's published recipe (docs/convmemory-training.md#cross-encoder-recipes).

Records come from one split's **dev** conversations only (conversation level, never a row split): the first
stage's protected top-10 with positions, and the gold ids present. Loss: listwise softmax cross-entropy over each
record's candidates against a uniform target on the gold present (records without gold in the list are masked),
AdamW lr 2e-5, weight decay 0.01, linear schedule with warm-up ``min(100, steps // 10)``, 1 epoch, 8 records per
batch, max length 256. The checkpoint folder is written atomically with its recipe in ``memrepro_training.json``.
Two knobs are ours, for a model that must rank the full pool rather than a top 10: ``hard_negatives`` (deeper
turns added to each record) and ``pair_format=plain`` (the full pool's ``(query, text)`` pairs).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from memrepro.artifacts.forecast import PlanStep
from memrepro.artifacts.per_seed import (PerSeedArtifact, load_checked, published_folder, save_checked,
                                         weights_sha256)
from memrepro.evaluation.freeze import FrozenRanking
from memrepro.models.cross_encoder import TRAINING_INFO, CrossEncoderScorer
from memrepro.models.sanity import SANITY_RECORDS, DivergedModelError, check_loss, check_scores, check_weights
from memrepro.retrievers.arms import ARMS, NO_TEXT_ARMS
from memrepro.retrievers.base import RetrievalInput, RetrieverBase
from memrepro.retrievers.cascade import (DonorTexts, arm_rng, as_candidate, check_candidates, corrupt_texts,
                                         v2_pairs)
from memrepro.training.recipes import CrossEncoderRecipe, divergence_fix
from memrepro.types import Benchmark, Split


@dataclass(frozen=True)
class TrainRecord:
    query_id: str
    query: str
    candidates: tuple[dict[str, Any], ...]  # {id, text, position}: what inference sees, nothing more
    gold_ids: tuple[str, ...]  # kept apart from the candidates (the inference contract)
    episode_id: str = ""  # the conversation: random_other_query_text draws from the others


@dataclass
class Recipe(CrossEncoderRecipe):
    """The configured recipe plus what the owner sets: the arm (the cascade's) and the seed (the split's)."""

    arm: str = "full_text"
    seed: int = 0
    extra: dict = field(default_factory=dict)


def build_records(benchmark: Benchmark, split: Split, rankings: dict[str, FrozenRanking],
                  protected: int = 10, hard_negatives: int = 0, negative_pool: int = 500) -> list[TrainRecord]:
    """One record per scored dev query of ``split``; raises if a test conversation would leak in. With
    ``hard_negatives``, a record also holds that many non-gold turns drawn from ranks ``protected``+1 ..
    ``negative_pool`` (a generator per split seed and question) and every gold turn there, in rank order."""
    dev = set(split.dev_episode_ids)
    if dev & set(split.test_episode_ids):
        raise ValueError(f"split {split.name}: dev and test conversations overlap")
    records = []
    for query in benchmark.queries:
        if query.episode_id not in dev or not query.scored or query.id not in rankings:  # rankings: limit_queries
            continue
        episode = benchmark.episodes[query.episode_id]
        by_id = {m.id: m for m in episode.memories}
        ranked = rankings[query.id].memory_ids
        ranks = list(range(min(protected, len(ranked))))
        if hard_negatives:
            deep = range(len(ranks), min(negative_pool, len(ranked)))
            gold = set(query.gold)
            negatives = [r for r in deep if ranked[r] not in gold]
            drawn = arm_rng(int(split.seed or 0), query.id).choice(
                len(negatives), size=min(hard_negatives, len(negatives)), replace=False)
            ranks += sorted({negatives[i] for i in drawn.tolist()} | {r for r in deep if ranked[r] in gold})
        candidates = tuple(as_candidate(by_id[ranked[r]], r) for r in ranks)
        check_candidates(candidates)
        records.append(TrainRecord(query.id, query.text, candidates, tuple(query.gold), query.episode_id))
    return records


def training_pairs(record: TrainRecord, recipe: Recipe, texts: Sequence[str] | None) -> list[tuple[str, str]]:
    """The pairs in the format the model will be scored with: v2's (the cascade) or plain (the full pool)."""
    if recipe.pair_format == "plain":
        return [(record.query, t) for t in (texts if texts is not None else [c["text"] for c in record.candidates])]
    return v2_pairs(record.query, record.candidates, recipe.arm, texts)


def train(records: Sequence[TrainRecord], base_path: str, out_dir: Path, recipe: Recipe,
          base_label: str, device: str = "cpu", info: dict | None = None, donors: DonorTexts | None = None,
          checkpoint_every_s: float = 60.0, progress: bool = True) -> dict[str, Any]:
    """Train and save to ``out_dir`` (atomically). Returns the training log. A corrupted-text arm corrupts each
    record as inference does (``corrupt_texts``, seeded by the split seed and the question; ``donors``: the dev
    conversations' memories). Resumable: every ``checkpoint_every_s`` (and when interrupted) the weights,
    optimiser, schedule, position and torch RNG (dropout) are saved beside ``out_dir``; a rerun with the same
    identity continues from there and ends with the weights an uninterrupted run ends with."""
    import torch
    from sentence_transformers import CrossEncoder
    from tqdm.auto import tqdm

    from memrepro.training.state import load_state, partial_path, save_state

    if recipe.arm not in ARMS:
        raise ValueError(f"unknown arm {recipe.arm!r}")
    if recipe.pair_format == "plain" and recipe.arm in NO_TEXT_ARMS:
        raise ValueError(f"arm {recipe.arm} has no text to put in plain pairs: use cross_encoder.recipe.pair_format=v2")
    if recipe.arm == "random_other_query_text" and donors is None:
        raise ValueError("arm random_other_query_text needs donors (the dev conversations' memory texts)")
    random.seed(recipe.seed)
    np.random.seed(recipe.seed)
    torch.manual_seed(recipe.seed)
    model = CrossEncoder(base_path, num_labels=1, max_length=recipe.max_length, device=device)
    network, tokenizer = model.model, model.tokenizer
    network.train()
    order = list(range(len(records)))
    random.Random(recipe.seed).shuffle(order)
    batches = [order[i:i + recipe.batch_records] for i in range(0, len(order), recipe.batch_records)]
    steps = max(1, len(batches) * recipe.epochs)
    warmup = min(100, steps // 10)
    head = [p for name, p in network.named_parameters() if name.startswith("classifier")]
    body = [p for name, p in network.named_parameters() if not name.startswith("classifier")]
    optimiser = torch.optim.AdamW([{"params": body, "lr": recipe.lr},
                                   {"params": head, "lr": recipe.head_lr or recipe.lr}],
                                  weight_decay=recipe.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup)))
    identity = {"identity": (info or {}).get("identity"), "recipe": asdict(recipe), "base": base_label,
                "train_query_ids": [r.query_id for r in records]}
    partial = partial_path(out_dir)
    done, losses, masked, seconds = 0, [], 0, 0.0
    state = load_state(partial, identity)
    if state is not None:
        network.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["torch_rng"])
        done, losses, masked, seconds = state["done"], state["losses"], state["masked"], state["seconds"]
        print(f"  resuming from {partial}: {done} of {len(batches) * recipe.epochs} batches done", flush=True)

    def save() -> None:
        save_state(partial, {"identity": identity, "model": network.state_dict(), "optimiser": optimiser.state_dict(),
                             "schedule": schedule.state_dict(), "torch_rng": torch.get_rng_state(), "done": done,
                             "losses": losses, "masked": masked, "seconds": time.perf_counter() - started})

    def pairs_of(record: TrainRecord) -> list[tuple[str, str]]:
        pool = donors.excluding(record.episode_id) if donors is not None else ()
        return training_pairs(record, recipe, corrupt_texts(recipe.arm, record.query_id, record.candidates, pool,
                                                             recipe.seed))

    total = len(batches) * recipe.epochs
    last_save, started = time.perf_counter(), time.perf_counter() - seconds
    bar = tqdm(total=total, initial=done, desc=f"cross-encoder seed {recipe.seed}", disable=not progress,
               unit="batch")
    what = f"cross-encoder training into {out_dir} (recipe lr {recipe.lr:g}, head_lr {recipe.head_lr or recipe.lr:g})"
    fix = divergence_fix(recipe)
    try:
        for position in range(done, total):
            lefts, rights, spans, targets = [], [], [], []
            for i in batches[position % len(batches)]:
                record = records[i]
                gold = set(record.gold_ids)
                target = np.array([c["id"] in gold for c in record.candidates], dtype=np.float32)
                if not target.any():
                    masked += 1
                    continue
                pairs = pairs_of(record)
                spans.append((len(lefts), len(lefts) + len(pairs)))
                lefts += [p[0] for p in pairs]
                rights += [p[1] for p in pairs]
                targets.append(torch.from_numpy(target / target.sum()))
            if spans:
                encoded = tokenizer(lefts, rights, truncation=True, max_length=recipe.max_length, padding=True,
                                    return_tensors="pt").to(device)
                logits = network(**encoded).logits.squeeze(-1)
                loss = torch.stack([-(t.to(device) * torch.log_softmax(logits[a:b], dim=0)).sum()
                                    for (a, b), t in zip(spans, targets)]).mean()
                check_loss(loss.item(), what, position + 1, total, fix)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                schedule.step()
                losses.append(loss.item())
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}", refresh=False)
            done = position + 1
            bar.update(1)
            if checkpoint_every_s >= 0 and time.perf_counter() - last_save >= checkpoint_every_s and done < total:
                save()
                last_save = time.perf_counter()
        network.eval()
        check_weights(network.state_dict(), what, fix)
        sample = records[:SANITY_RECORDS]
        if sample:
            check_scores(model.predict([pair for record in sample for pair in pairs_of(record)],
                                       activation_fn=torch.nn.Identity(), show_progress_bar=False), what, len(sample),
                         fix)
    except DivergedModelError:
        partial.unlink(missing_ok=True)  # resuming would diverge again: a rerun starts afresh
        raise
    except BaseException:
        if done:
            save()
        raise
    finally:
        bar.close()
    log = {**(info or {}), "base_model": base_label, "recipe": asdict(recipe), "records": len(records), "masked_records": masked,
           "steps": len(losses), "loss_first": losses[0] if losses else None,
           "loss_last_mean": float(np.mean(losses[-20:])) if losses else None,
           "train_seconds": time.perf_counter() - started, "train_query_ids": [r.query_id for r in records],
           "loss_curve": [float(np.mean(losses[i:i + 20])) for i in range(0, len(losses), 20)]}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        model.save(str(tmp))
        log["weights_sha256"] = weights_sha256(tmp)  # checked on every load (a damaged file is refused)
        (tmp / TRAINING_INFO).write_text(json.dumps(log, indent=2))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:  # SIGTERM or Ctrl-C mid-save: no half-saved model folder left beside out_dir
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    partial.unlink(missing_ok=True)
    return log


class TrainedCrossEncoders(PerSeedArtifact):
    """The cascade's (or the full pool's) cross-encoder, one per split seed, trained with the v2 recipe on the
    protected top-``protected`` of ``record_stage`` (the owning cascade's first stage unless configured) over that
    seed's dev conversations; or one published checkpoint for every seed (``published``, online)."""

    kind = "cross_encoder"
    UNIT = "records"
    # measured, one torch thread, MiniLM-L6 backbone, 10 pairs a record: 1.5-2.0 s with the memory text (LoCoMo:
    # 1,338-1,839 s for a seed's ~1,000 records with the other core busy), 0.23 s without it (scalar_only: only the
    # time and rank prefixes, a few tokens a pair). Batched matmuls: on 2 threads 0.59-0.80 s a record (~13 min a
    # seed), so the forecast divides by torch's threads.
    SECONDS_PER_RECORD = {"text": 1.5, "no_text": 0.25}
    SCALES_WITH_THREADS = True
    RECORD_BATCH = 64  # dev questions per record-stage call while building records (one progress-bar step)

    def seconds_per_unit(self) -> float:
        pairs = self.recipe.protected + self.recipe.hard_negatives  # the figures are for 10 pairs a record
        return self.SECONDS_PER_RECORD["no_text" if self.recipe.arm in NO_TEXT_ARMS else "text"] * pairs / 10

    def __init__(self, recipe: Mapping[str, Any] | None = None,
                 base_model: str = "cross-encoder/ms-marco-MiniLM-L-6-v2",
                 fallback_base_model: str = "sentence-transformers/all-MiniLM-L6-v2",
                 record_stage: RetrieverBase | None = None,
                 path: str | None = None, published: str | None = None, train_on_demand: bool = True,
                 max_length: int | None = 256, batch_size: int = 32, activation: str = "logit",
                 device: str = "auto") -> None:
        super().__init__(path=path, published=published, train_on_demand=train_on_demand)
        self.recipe = Recipe(**dict(recipe or {}))
        if self.recipe.arm not in ARMS:
            raise ValueError(f"cross-encoder recipe: arm must be one of {ARMS}, got {self.recipe.arm!r}")
        self.base_model, self.fallback_base_model = base_model, fallback_base_model
        self.record_stage = record_stage
        self.scorer_kwargs = {"max_length": max_length, "batch_size": batch_size, "activation": activation,
                              "device": device}
        self._base: tuple[str, str] | None = None

    def use_arm(self, arm: str) -> None:
        """An ablation arm trains with the corruption it is evaluated with (the owning cascade's arm)."""
        if arm not in ARMS:
            raise ValueError(f"cascade arm must be one of {ARMS}, got {arm!r}")
        self.recipe = Recipe(**{**asdict(self.recipe), "arm": arm})

    def use_first_stage(self, stage: RetrieverBase) -> None:
        """Records come from the owner's first stage unless the config names another one."""
        if self.record_stage is None:
            self.record_stage = stage

    def bind(self, context) -> None:
        super().bind(context)
        if self.record_stage is not None:
            self.record_stage.bind_training(context)

    def base(self, verify: bool = False) -> tuple[str, str]:
        """The configured base (the papers' ms-marco cross-encoder) when it loads, else the offline backbone:
        ``(where it is, its name)``. The name is what the recipe hashes; ``verify`` (to train from it) extracts and
        checks an offline bundle's weights first (:func:`memrepro.models.resolve.resolve_model`)."""
        if self._base is None or verify:
            from memrepro.errors import ModelNotFoundError
            from memrepro.models.resolve import resolve_model

            try:
                resolved = resolve_model(self.base_model, verify=verify, context=self.run_context)
                self._base = (resolved.path, resolved.name)
            except ModelNotFoundError:
                fallback = resolve_model(self.fallback_base_model, verify=verify, context=self.run_context)
                self._base = (fallback.path, f"{fallback.name} (bi-encoder backbone; substitute for "
                                             f"{self.base_model})")
        return self._base

    def recipe_identity(self) -> dict[str, Any]:
        return {"recipe": self.recipe.hashed(), "base": self.base()[1],
                "record_stage": self.record_stage.artifact_identity()}

    def retrained_label(self) -> str:
        return f"per-seed retrained from {self.base()[1]}"

    def training_steps(self, split: Split, folder: Path) -> list[PlanStep]:
        """Building the records (the record stage ranks every dev question; none when they are cached), then
        training on them."""
        cache = self.records_cache(split)
        if load_checked(cache, self._records_identity(split), "training-record cache", quiet=True) is not None:
            build = PlanStep(self.kind, split, "records", "records built", location=str(cache), done=True)
        else:
            n = len(self.dev_questions(split))
            build = PlanStep(self.kind, split, "records", f"build records from {self.record_stage_name}'s rankings of",
                             n, "questions", n * self.record_stage.SECONDS_PER_QUERY, str(cache))
        return [build, self.training_step(split, folder)]

    @property
    def record_stage_name(self) -> str:
        return str(self.record_stage.name)

    def stage_rankings(self, split: Split) -> dict[str, FrozenRanking]:
        """The record stage's frozen ranking of each of the split's dev questions (a progress bar over them)."""
        from tqdm.auto import tqdm

        from memrepro.evaluation.freeze import freeze

        ctx, stage = self.context, self.record_stage
        dev = self.dev_questions(split)
        stage.for_split(split)
        rankings: dict[str, FrozenRanking] = {}
        with tqdm(total=len(dev), desc=f"records seed {split.seed} ({self.record_stage_name})", unit="q",
                  disable=not ctx.progress) as bar:
            for start in range(0, len(dev), self.RECORD_BATCH):  # each question is ranked alone: same result
                batch = dev[start:start + self.RECORD_BATCH]
                results = stage.retrieve([RetrievalInput(q.id, q.text, q.episode_id) for q in batch],
                                         np.stack([ctx.query_vectors[q.id] for q in batch]), ctx.index)
                rankings.update({q.id: freeze(q.id, r.hits, ctx.benchmark.episodes[q.episode_id], stage.order)
                                 for q, r in zip(batch, results)})
                bar.update(len(batch))
        return rankings

    def records(self, split: Split, rankings: dict[str, FrozenRanking] | None = None) -> list[TrainRecord]:
        """The split's dev questions as training records: the record stage's protected top (and hard negatives
        when the recipe asks), gold kept apart. ``rankings``: ``stage_rankings(split)`` when the caller has them."""
        rankings = self.stage_rankings(split) if rankings is None else rankings
        return build_records(self.context.benchmark, split, rankings, self.recipe.protected,
                             self.recipe.hard_negatives, self.recipe.negative_pool)

    def records_cache(self, split: Split) -> Path:
        """Where this split's built records are kept, beside its model folder (same recipe hash)."""
        folder = self.folder(split)
        return folder.parent / f"{folder.name}.records.json"

    def _records_identity(self, split: Split) -> dict[str, Any]:
        return {"identity": self.identity(), "split": split.name, "seed": split.seed,
                "dev_episodes": sorted(split.dev_episode_ids)}

    def _cached_records(self, split: Split, quiet: bool = False) -> list[TrainRecord] | None:
        rows = load_checked(self.records_cache(split), self._records_identity(split), "training-record cache", quiet)
        if rows is None:
            return None
        return [TrainRecord(r["query_id"], r["query"], tuple(dict(c) for c in r["candidates"]), tuple(r["gold_ids"]),
                            r["episode_id"]) for r in rows]

    def training_records(self, split: Split) -> list[TrainRecord]:
        """:meth:`records`, kept beside the model folder once built (atomically, with a digest and the identity they
        were built for): a resumed training does not rank the dev questions again; a damaged or foreign cache is
        named in one line and rebuilt."""
        cached = self._cached_records(split)
        if cached is not None:
            print(f"  records for split {split.name}: {len(cached)} read from {self.records_cache(split)}", flush=True)
            return cached
        records = self.records(split)
        save_checked(self.records_cache(split), self._records_identity(split), [asdict(r) for r in records])
        return records

    def donors(self, episode_ids: Sequence[str]) -> DonorTexts:
        return DonorTexts({e: [m.text for m in self.context.benchmark.episodes[e].memories] for e in episode_ids})

    def train(self, split: Split, out_dir: Path) -> None:
        records = self.training_records(split)
        base_path, base_label = self.base(verify=True)
        recipe = Recipe(**{**asdict(self.recipe), "seed": int(split.seed or 0)})
        log = train(records, base_path, out_dir, recipe, base_label, device=self.context.device,
                    donors=self.donors(split.dev_episode_ids), checkpoint_every_s=self.context.checkpoint_every_s,
                    progress=self.context.progress,
                    info={"identity": self.identity(), "split": split.name, "seed": split.seed})
        self.records_cache(split).unlink(missing_ok=True)  # the model is saved: its records are spent
        print(f"  cross-encoder seed {split.seed}: {log['steps']} steps in {log['train_seconds']:.0f} s, loss "
              f"{log['loss_first']:.3f} -> {log['loss_last_mean']:.3f}", flush=True)

    def load(self, folder: Path) -> CrossEncoderScorer:
        return CrossEncoderScorer(str(folder), path=str(folder), context=self.run_context, **self.scorer_kwargs)

    def load_published(self, name: str) -> CrossEncoderScorer:
        """The published v2 layout keeps the model in ``cross_encoder/`` beside its config; plain models load as is."""
        folder = published_folder(name, self.run_context)
        if (folder / "cross_encoder").is_dir():
            folder = folder / "cross_encoder"
        return CrossEncoderScorer(name, path=str(folder), context=self.run_context, **self.scorer_kwargs)
