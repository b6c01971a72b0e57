"""Fine-tune a cross-encoder with ConvMemory v2's published recipe (``../shared/specs/retrievers.md`` §8.2).

Records come from one split's **dev** conversations only (conversation level, never a row split): the first
stage's protected top-10 with positions, and the gold ids present. Loss: listwise softmax cross-entropy over each
record's candidates against a uniform target on the gold present (records without gold in the list are masked),
AdamW lr 2e-5, weight decay 0.01, linear schedule with warm-up ``min(100, steps // 10)``, 1 epoch, 8 records per
batch, max length 256. The checkpoint folder is written atomically with its recipe in ``memrepro_training.json``.
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
from typing import Any, Sequence

import numpy as np

from memrepro.evaluation.freeze import FrozenRanking
from memrepro.models.cross_encoder import TRAINING_INFO
from memrepro.retrievers.cascade import ARMS, check_candidates, derangement, memory_position, v2_pairs
from memrepro.types import Benchmark, Split


@dataclass(frozen=True)
class TrainRecord:
    query_id: str
    query: str
    candidates: tuple[dict[str, Any], ...]  # {id, text, position}: what inference sees, nothing more
    gold_ids: tuple[str, ...]  # kept apart from the candidates (the inference contract)


@dataclass(frozen=True)
class Recipe:
    lr: float = 2e-5
    weight_decay: float = 0.01
    epochs: int = 1
    batch_records: int = 8
    max_length: int = 256
    protected: int = 10
    arm: str = "full_text"
    seed: int = 0
    extra: dict = field(default_factory=dict)


def build_records(benchmark: Benchmark, split: Split, rankings: dict[str, FrozenRanking],
                  protected: int = 10) -> list[TrainRecord]:
    """One record per scored dev query of ``split``; raises if a test conversation would leak in."""
    dev = set(split.dev_episode_ids)
    if dev & set(split.test_episode_ids):
        raise ValueError(f"split {split.name}: dev and test conversations overlap")
    records = []
    for query in benchmark.queries:
        if query.episode_id not in dev or not query.scored:
            continue
        episode = benchmark.episodes[query.episode_id]
        by_id = {m.id: m for m in episode.memories}
        head = rankings[query.id].memory_ids[:protected]
        candidates = tuple({"id": m, "text": by_id[m].text, "position": memory_position(m, rank)}
                           for rank, m in enumerate(head))
        check_candidates(candidates)
        records.append(TrainRecord(query.id, query.text, candidates, tuple(query.gold)))
    return records


def train(records: Sequence[TrainRecord], base_path: str, out_dir: Path, recipe: Recipe,
          base_label: str, device: str = "cpu", log_every: int = 20) -> dict[str, Any]:
    """Train and save to ``out_dir`` (atomically). Returns the training log."""
    import torch
    from sentence_transformers import CrossEncoder

    if recipe.arm not in ARMS:
        raise ValueError(f"unknown arm {recipe.arm!r}")
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
    optimiser = torch.optim.AdamW(network.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup)))
    rng = np.random.default_rng(recipe.seed)
    losses, masked, started = [], 0, time.perf_counter()
    for epoch in range(recipe.epochs):
        for step, batch in enumerate(batches):
            lefts, rights, spans, targets = [], [], [], []
            for i in batch:
                record = records[i]
                gold = set(record.gold_ids)
                target = np.array([c["id"] in gold for c in record.candidates], dtype=np.float32)
                if not target.any():
                    masked += 1
                    continue
                texts = None
                if recipe.arm == "shuffled_memory_text":
                    texts = [record.candidates[j]["text"] for j in derangement(len(record.candidates), rng)]
                elif recipe.arm == "random_other_query_text":
                    donor = records[int(rng.integers(len(records)))]
                    texts = [donor.candidates[int(rng.integers(len(donor.candidates)))]["text"]
                             for _ in record.candidates]
                pairs = v2_pairs(record.query, record.candidates, recipe.arm, texts)
                spans.append((len(lefts), len(lefts) + len(pairs)))
                lefts += [p[0] for p in pairs]
                rights += [p[1] for p in pairs]
                targets.append(torch.from_numpy(target / target.sum()))
            if not spans:
                continue
            encoded = tokenizer(lefts, rights, truncation=True, max_length=recipe.max_length, padding=True,
                                return_tensors="pt").to(device)
            logits = network(**encoded).logits.squeeze(-1)
            loss = torch.stack([-(t.to(device) * torch.log_softmax(logits[a:b], dim=0)).sum()
                                for (a, b), t in zip(spans, targets)]).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            losses.append(loss.item())
            if log_every and step % log_every == 0:
                print(f"  epoch {epoch} step {step}/{len(batches)} loss {np.mean(losses[-log_every:]):.4f}",
                      flush=True)
    network.eval()
    log = {"base_model": base_label, "recipe": asdict(recipe), "records": len(records), "masked_records": masked,
           "steps": len(losses), "loss_first": losses[0] if losses else None,
           "loss_last_mean": float(np.mean(losses[-20:])) if losses else None,
           "train_seconds": time.perf_counter() - started, "train_query_ids": [r.query_id for r in records]}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{uuid.uuid4().hex[:8]}"
    model.save(str(tmp))
    (tmp / TRAINING_INFO).write_text(json.dumps(log, indent=2))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return log
