"""Train ConvMemory v1 with the official recipe (``experiments/reproduce_locomo.py`` + ``support/convmem_ce_lite.py``
``train_one_item``), one model per split seed on that seed's **dev** conversations only.

One question per optimiser step, in file order (conversation, then question), over the raw-dense top
``min(500, N)`` candidates with the mixer over **all** stride-1 windows of the conversation (the official
training always uses full windows, whatever the evaluation's window mode). Loss per question::

    pairwise_weight · mean_ij σ((t_i − t_j)/0.1) · softplus(−(s_i − s_j))   i ∈ teacher top-16, j ∈ bottom-64
  + 0.35 · (logsumexp(s) − logsumexp(s_gold))                                 gold listwise (duplicates kept)
  + 0.05 · (logsumexp(s) − s_target)                                          first rank (best gold by teacher)

AdamW lr 2e-4, weight decay 1e-4, 1 epoch. The teacher ``t`` is the published ms-marco cross-encoder in the
paper; offline it is a labelled substitute: ``dense`` (the raw cosine of the same candidates: the calibration
setting) or ``cross_encoder`` with any scorer. ``pairwise_weight=0`` is the gold-only variant.

Resumable: every ``checkpoint_every_s`` the model, optimiser and position are saved atomically next to the output;
a restarted run continues from there (the loop has no randomness after initialisation, so the result is the one an
uninterrupted run gives).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from memrepro.artifacts.per_seed import PerSeedArtifact, published_folder, weights_sha256
from memrepro.models.convmemory_v1_shape import V1_DEFAULT_SHAPE, V1Architecture
from memrepro.models.cross_encoder import TRAINING_INFO
from memrepro.models.sanity import SANITY_RECORDS, DivergedModelError, check_loss, check_scores, check_weights
from memrepro.training.recipes import V1ModelsConfig, V1Recipe, divergence_fix
from memrepro.types import Split
from memrepro.parameters import validate_arguments

if TYPE_CHECKING:  # torch and the v1 module (a torch module) are imported where a model is trained or loaded
    import torch

    from memrepro.models.convmemory_v1 import ConvMemoryV1, QueryInputs



@dataclass(frozen=True)
class TrainItem:
    """One dev question: what the loss needs (gold stays here; it never reaches a retriever)."""

    query_id: str
    inputs: QueryInputs
    gold: tuple[str, ...]
    memory_ids: tuple[str, ...]


def item_loss(model: ConvMemoryV1, item: TrainItem, teacher: np.ndarray, recipe: V1Recipe) -> torch.Tensor:
    """The official ``train_one_item`` loss for one question (candidates in raw dense order)."""
    import torch

    from memrepro.models.convmemory_v1 import features, sliding_windows

    cand = item.inputs.candidates
    windows = sliding_windows(len(item.inputs.memory_vectors), model.architecture.window_size)
    logits = model.scorer(features(model, item.inputs, windows))
    t = torch.from_numpy(np.asarray(teacher, dtype=np.float32))
    top = torch.topk(t, k=min(recipe.pairwise_top_k, t.numel())).indices
    bottom = torch.topk(-t, k=min(recipe.pairwise_bottom_k, t.numel())).indices
    diff = logits[top][:, None] - logits[bottom][None, :]
    weights = torch.sigmoid((t[top][:, None] - t[bottom][None, :]) / recipe.teacher_temperature).detach()
    loss = recipe.pairwise_weight * (torch.nn.functional.softplus(-diff) * weights).mean()
    slot = {int(p): i for i, p in enumerate(cand)}
    position = {m: i for i, m in enumerate(item.memory_ids)}
    gold = [slot[position[g]] for g in item.gold if g in position and position[g] in slot]  # duplicates kept
    if gold:
        gold_t = torch.tensor(gold, dtype=torch.long)
        loss = loss + recipe.gold_weight * (torch.logsumexp(logits, 0) - torch.logsumexp(logits[gold_t], 0))
    target = None
    if recipe.first_rank_target == "best_gold" and gold:
        target = gold_t[torch.argmax(t[gold_t])]
    elif recipe.first_rank_target == "teacher":
        target = torch.argmax(t)
    if recipe.first_rank_weight > 0 and target is not None:
        loss = loss + recipe.first_rank_weight * (torch.logsumexp(logits, 0) - logits[target])
    return loss


def train_v1(items: Sequence[TrainItem], teacher_of: Callable[[TrainItem], np.ndarray], out_dir: Path,
             recipe: V1Recipe, seed: int, architecture: V1Architecture, info: dict[str, Any],
             checkpoint_every_s: float = 60.0, progress: bool = True) -> dict[str, Any]:
    """Train on ``items`` (one split's dev questions) and write ``out_dir`` atomically in the official layout
    (``config.json`` + ``model.pt``, loadable by ``convmemory.ConvMemory.from_pretrained``) plus our
    ``memrepro_training.json``. Resumes from ``out_dir``'s partial state when one exists for the same identity."""
    import torch

    from memrepro.models.convmemory_v1 import ConvMemoryV1
    from memrepro.training.state import load_state, partial_path

    from tqdm.auto import tqdm

    partial = partial_path(out_dir)
    torch.manual_seed(seed if recipe.init_seed is None else recipe.init_seed)
    model = ConvMemoryV1(architecture)
    optimiser = torch.optim.AdamW(list(model.conv_model.parameters()) + list(model.scorer.parameters()),
                                  lr=recipe.lr, weight_decay=recipe.weight_decay)
    done, losses, seconds = 0, [], 0.0
    state = load_state(partial, info.get("identity"))
    if state is not None:
        model.load_official_state(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        done, losses, seconds = state["done"], state["losses"], state["seconds"]
        print(f"  resuming from {partial}: {done} of {len(items) * recipe.epochs} steps done", flush=True)
    model.train()
    total = len(items) * recipe.epochs
    last_save, started = time.perf_counter(), time.perf_counter() - seconds
    bar = tqdm(total=total, initial=done, desc=f"v1 seed {seed}", disable=not progress, unit="q")
    what = f"convmemory_v1 training into {out_dir} (recipe {recipe.label}, lr {recipe.lr:g})"
    try:
        for step in range(done, total):
            item = items[step % len(items)]
            if len(item.inputs.candidates) >= 2:  # the official loop skips single-candidate questions
                loss = item_loss(model, item, teacher_of(item), recipe)
                value = float(loss.detach())
                check_loss(value, what, step + 1, total, divergence_fix(recipe))
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                losses.append(value)
            done = step + 1
            bar.update(1)
            if checkpoint_every_s >= 0 and time.perf_counter() - last_save >= checkpoint_every_s and done < total:
                _save_partial(partial, model, optimiser, done, losses, time.perf_counter() - started, info)
                last_save = time.perf_counter()
        model.eval()
        _check_trained(model, items, what, divergence_fix(recipe))
    except DivergedModelError:
        partial.unlink(missing_ok=True)  # resuming would diverge again: a rerun starts afresh
        raise
    except BaseException:
        if done:
            _save_partial(partial, model, optimiser, done, losses, time.perf_counter() - started, info)
        raise
    finally:
        bar.close()
    log = {**info, "recipe": asdict(recipe), "recipe_label": recipe.label, "architecture": architecture.to_dict(),
           "init_seed": seed if recipe.init_seed is None else recipe.init_seed, "steps": len(losses),
           "parameters": sum(p.numel() for p in model.parameters()),
           "loss_curve": [float(np.mean(losses[i:i + 100])) for i in range(0, len(losses), 100)],
           "train_seconds": time.perf_counter() - started, "train_query_ids": [i.query_id for i in items]}
    save_v1(model, out_dir, log)
    partial.unlink(missing_ok=True)
    return log


def _check_trained(model: ConvMemoryV1, items: Sequence[TrainItem], what: str, fix: str) -> None:
    """Finite weights, and finite CE-lite scores of a few dev questions, before the model may be saved."""
    from memrepro.models.convmemory_v1 import ce_lite_scores

    check_weights(model.state_dict(), what, fix)
    sample = [item for item in items if len(item.inputs.candidates) >= 2][:SANITY_RECORDS]
    if sample:
        check_scores(np.concatenate([ce_lite_scores(model, item.inputs, "candidate_local") for item in sample]),
                     what, len(sample), fix)


def _save_partial(path: Path, model: ConvMemoryV1, optimiser, done: int, losses: list[float], seconds: float,
                  info: dict) -> None:
    from memrepro.training.state import save_state

    save_state(path, {"identity": info.get("identity"), "model": model.official_state(),
                      "optimiser": optimiser.state_dict(), "done": done, "losses": losses, "seconds": seconds})


def save_v1(model: ConvMemoryV1, out_dir: Path, log: dict[str, Any], embedding_model: str | None = None) -> None:
    """The official checkpoint layout, written to a temporary folder and renamed into place."""
    import torch

    import shutil

    a = model.architecture
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    config = {"format": "convmemory", "version": 1, "embedding_model": embedding_model or log.get("encoder_model"),
              "model_config": a.model_config(),
              "rerank_config": {"window_size": a.window_size, "stride": 1, "candidate_top_n": a.pool,
                                "raw_weight": a.raw_weight, "dca_router_block_size": a.router_block_size,
                                "lexical_features": a.lexical_features, "window_mode": "candidate_local"}}
    (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    torch.save(model.official_state(), tmp / "model.pt")
    log = {**log, "weights_sha256": weights_sha256(tmp)}  # checked on every load (a damaged file is refused)
    (tmp / TRAINING_INFO).write_text(json.dumps(log, indent=2, default=str))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)


def load_v1(folder: Path) -> tuple[ConvMemoryV1, dict | None]:
    """A v1 checkpoint in the official layout (ours or the published one) and our training log, if any."""
    import torch

    from memrepro.models.convmemory_v1 import ConvMemoryV1

    config = json.loads((folder / "config.json").read_text())
    mc, rc = config["model_config"], config.get("rerank_config", {})
    d = V1_DEFAULT_SHAPE  # a key the file lacks takes the published model's value
    architecture = V1Architecture(
        dim=int(mc["embedding_dim"]), window_size=int(mc.get("window_size", d.window_size)),
        kernel_size=int(mc.get("kernel_size", d.kernel_size)), hidden_dim=int(mc.get("hidden_dim", d.hidden_dim)),
        token_mlp_dim=int(mc.get("token_mlp_dim", d.token_mlp_dim)),
        channel_mlp_dim=int(mc.get("channel_mlp_dim", d.channel_mlp_dim)),
        router_block_size=int(rc.get("dca_router_block_size", d.router_block_size)),
        lexical_features=bool(rc.get("lexical_features", d.lexical_features)),
        pool=int(rc.get("candidate_top_n", d.pool)), raw_weight=float(rc.get("raw_weight", d.raw_weight)))
    if architecture.extra_scalar_features != int(mc.get("extra_scalar_features", architecture.extra_scalar_features)):
        raise ValueError(f"{folder}/config.json: extra_scalar_features {mc['extra_scalar_features']} does not match "
                         f"router/lexical settings ({architecture.extra_scalar_features})")
    model = ConvMemoryV1(architecture)
    model.load_official_state(torch.load(folder / "model.pt", map_location="cpu", weights_only=True))
    check_weights(model.state_dict(), f"{folder / 'model.pt'}", f"delete {folder} to train it again")
    model.eval()
    info = folder / TRAINING_INFO
    return model, (json.loads(info.read_text()) if info.is_file() else None)


# ---------------------------------------------------------------------------------------------------------------
# One model per split seed, found or trained on demand (memrepro.artifacts.per_seed)


class V1Models(PerSeedArtifact):
    """ConvMemory v1 checkpoints for a retriever: ``recipe`` (a :class:`V1Recipe` as a mapping) and the model
    shape; ``published`` loads one checkpoint for every seed (``Purdy0228/ConvMemory-LoCoMo-MPNet``: trained on
    seed 23's dev conversations, so it has seen test conversations of the other four seeds)."""

    kind = "convmemory_v1"
    PUBLISHED_NOTE = "trained on seed 23's dev conversations: leaks on 4 of 5 seeds"
    # measured on LoCoMo (~600 windows a question), dense teacher, on an idle 2-core CPU: 103-162 s for seeds
    # 11, 23, 31 and 47 (842-1,040 dev questions, 0.12-0.16 s a question); beside other jobs it took up to twice
    # that (0.24-0.27 s). Small per-question tensors, so more threads do not speed it up (SCALES_WITH_THREADS
    # stays False)
    UNIT, SECONDS_PER_UNIT = "questions", 0.14
    # a cross-encoder teacher scores each question's whole pool: measured on one thread, seed 7, a MiniLM
    # teacher over 500 plain pairs: 4,385 s for 1,039 questions against 234 s with the dense cosine
    TEACHER_SECONDS_PER_QUESTION = 4.0

    def seconds_per_unit(self) -> float:
        if self.recipe.teacher != "cross_encoder":
            return self.SECONDS_PER_UNIT
        return self.SECONDS_PER_UNIT + self.TEACHER_SECONDS_PER_QUESTION * self.shape["pool"] / 500

    def __init__(self, recipe: Mapping[str, Any] | None = None, path: str | None = None,
                 published: str | None = None, train_on_demand: bool = True, pool: int = V1_DEFAULT_SHAPE.pool,
                 raw_weight: float = V1_DEFAULT_SHAPE.raw_weight,
                 router_block_size: int = V1_DEFAULT_SHAPE.router_block_size,
                 lexical_features: bool = V1_DEFAULT_SHAPE.lexical_features) -> None:
        self.shape = {"pool": pool, "raw_weight": raw_weight, "router_block_size": router_block_size,
                      "lexical_features": lexical_features}
        validate_arguments(V1ModelsConfig, self.shape, prefix="model")  # the ranges its config schema declares
        super().__init__(path=path, published=published, train_on_demand=train_on_demand)
        self.recipe = V1Recipe(**dict(recipe or {}))
        self._teacher = None

    def architecture(self) -> V1Architecture:
        assert self.context is not None
        return V1Architecture(dim=self.context.dim, **self.shape)

    def recipe_identity(self) -> dict[str, Any]:
        return {"recipe": asdict(self.recipe), "architecture": self.architecture().to_dict()}

    def retrained_label(self) -> str:
        return f"per-seed retrained, {self.recipe.label}"

    def items(self, split: Split) -> list[TrainItem]:
        from memrepro.models.convmemory_v1 import QueryInputs
        from memrepro.search import search

        ctx = self.context
        queries = self.dev_questions(split)
        vectors = {e: ctx.index.vectors(e) for e in {q.episode_id for q in queries}}
        texts = {e: [m.text for m in ctx.benchmark.episodes[e].memories] for e in vectors}
        ids = {e: tuple(m.id for m in ctx.benchmark.episodes[e].memories) for e in vectors}
        qv = np.stack([ctx.query_vectors[q.id] for q in queries]) if queries else np.zeros((0, 1), np.float32)
        hits = search(ctx.index, qv, [q.episode_id for q in queries], k=self.shape["pool"])
        return [TrainItem(q.id, QueryInputs(q.text, np.asarray(ctx.query_vectors[q.id], np.float32),
                                            vectors[q.episode_id], texts[q.episode_id], h.positions,
                                            vectors[q.episode_id] @ np.asarray(ctx.query_vectors[q.id], np.float32)),
                          tuple(q.gold), ids[q.episode_id]) for q, h in zip(queries, hits)]

    def teacher_for(self, split: Split) -> Callable[[TrainItem], np.ndarray]:
        if self.recipe.teacher == "dense":
            return lambda item: item.inputs.raw_scores[item.inputs.candidates]
        from memrepro.models.cross_encoder import CrossEncoderScorer

        name = str(self.recipe.teacher_model).format(seed=split.seed, split=split.name)
        scorer = CrossEncoderScorer(name, path=name if Path(name).exists() else None, device=self.context.device,
                                    context=self.run_context)
        return lambda item: scorer.score([(item.inputs.query_text, item.inputs.memory_texts[int(p)])
                                          for p in item.inputs.candidates])

    def train(self, split: Split, out_dir: Path) -> None:
        ctx = self.context
        info = {"identity": self.identity(), "split": split.name, "seed": split.seed,
                "dev_episodes": list(split.dev_episode_ids),
                "encoder_model": ctx.encoder_identity.get("model")}
        log = train_v1(self.items(split), self.teacher_for(split), out_dir, self.recipe, int(split.seed or 0),
                       self.architecture(), info, ctx.checkpoint_every_s, ctx.progress)
        print(f"  v1 seed {split.seed}: {log['steps']} steps in {log['train_seconds']:.0f} s, loss "
              f"{log['loss_curve'][0] if log['loss_curve'] else float('nan'):.3f} -> "
              f"{log['loss_curve'][-1] if log['loss_curve'] else float('nan'):.3f}", flush=True)

    def load(self, folder: Path) -> ConvMemoryV1:
        model, _ = load_v1(folder)
        return model

    def load_published(self, name: str) -> ConvMemoryV1:
        model, _ = load_v1(published_folder(name, self.run_context))
        return model
