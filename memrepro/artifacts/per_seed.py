"""One trained model per split seed, resolved like an embedding: found by recipe hash, trained on demand, verified
on load.

A retriever that needs a trained model per split seed (ConvMemory v1, the cascade's cross-encoder, the full-pool
row with our cross-encoders) holds a :class:`PerSeedArtifact`. For a split it resolves, in order:

1. an explicit ``path`` (a folder, or a template with ``{seed}``/``{split}``): loaded as given; when it carries
   our training log, its identity (recipe, base model, data hash, encoder) must equal the run's, else refused
   with both named;
2. a published checkpoint when asked for (``published``: one model for every seed, online; labelled as leaking);
3. our checkpoint for the configured recipe: ``<models_dir>/<kind>/<recipe hash>/seed{seed}``, verified;
4. trained on demand when absent (``train_on_demand``): one line saying what (and, when no plan was printed
   before, roughly how long), a progress bar per stage, resumable, then the run continues.

:meth:`PerSeedArtifact.locate` does steps 1-3 without loading or training anything; :meth:`PerSeedArtifact.plan_steps`
turns it into the lines of the training plan (``memrepro.training.plan``) with a forecast from the per-unit seconds
each subclass declares (measured, one per stage). The subclasses, which train, live in ``memrepro.training``.

Training reads the benchmark's gold of the split's **dev** conversations only (asserted); nothing of it reaches a
retriever at retrieval time.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from memrepro.artifacts.forecast import PlanStep, cpu_threads, where
from memrepro.artifacts.published import trained_on as published_trained_on
from memrepro.context import RunContext
from memrepro.errors import EXIT_BAD_INPUT, MemreproError
from memrepro.models.cross_encoder import TRAINING_INFO
from memrepro.provenance import config_hash
from memrepro.search import EpisodeIndex
from memrepro.types import Benchmark, Query, Split


class CheckpointMismatchError(MemreproError):
    """A checkpoint trained for another recipe, base model, data or encoder than the run asks for, or damaged."""

    exit_code = EXIT_BAD_INPUT


class MissingArtifactError(MemreproError):
    """No trained model at a configured path, or none for a split while training on demand is off."""

    exit_code = EXIT_BAD_INPUT


@dataclass
class TrainingContext:
    """What training on demand may read: the benchmark (with gold), the encoded vectors, where models live.
    A planning context (``memrepro.training.plan.planning_context``) has no vectors, only their width."""

    benchmark: Benchmark
    index: EpisodeIndex | None
    query_vectors: Mapping[str, np.ndarray]
    encoder_identity: Mapping[str, Any]
    models_dir: Path
    device: str = "cpu"
    progress: bool = True
    checkpoint_every_s: float = 60.0
    vector_dim: int | None = None  # the encoder's width when there is no index (planning)
    plan_printed: bool = False  # the training plan (with every forecast) was printed: training lines omit theirs
    run_context: RunContext | None = None  # the run's (models resolved and weights hashed once by a sweep's points)

    @property
    def dim(self) -> int:
        """The vectors' width (a model's input size, part of its identity)."""
        if self.index is not None:
            return int(self.index.matrix.shape[-1])
        if self.vector_dim is None:
            raise MemreproError("training context without an index or a vector width")
        return int(self.vector_dim)

    def dev_queries(self, split: Split, limit: int | None = None) -> list[Query]:
        """The scored questions of the split's dev conversations, in file order; never a test conversation."""
        dev, test = set(split.dev_episode_ids), set(split.test_episode_ids)
        if not dev:
            raise MemreproError(f"split {split.name} has no dev conversations to train on")
        if dev & test:
            raise MemreproError(f"split {split.name}: dev and test conversations overlap ({sorted(dev & test)})")
        queries = [q for q in self.benchmark.queries if q.episode_id in dev and q.scored]
        return queries[:limit] if limit else queries


def published_folder(name: str, context: RunContext | None = None) -> Path:
    """A published checkpoint's folder: a local path or offline bundle as is, else a snapshot from the Hub."""
    from memrepro.models.resolve import resolve_model

    # raises ModelNotFoundError naming every place tried (offline: no Hub)
    resolved = resolve_model(name, context=context)
    folder = Path(resolved.path)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(resolved.path))
    return folder


def weights_sha256(folder: Path) -> str:
    """One digest over every file a checkpoint folder holds except our training log (weights, configs,
    tokenizer), in name order: written into the log at save time, checked on every load."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != TRAINING_INFO):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def data_identity(context: TrainingContext) -> dict[str, Any]:
    # which split seeds a run evaluates does not change the model trained for one seed
    return {"dataset": context.benchmark.name, "data_sha256": context.benchmark.data_sha256,
            "loader_options": {k: v for k, v in dict(context.benchmark.options).items() if k != "seeds"},
            "encoder": dict(context.encoder_identity)}


class PerSeedArtifact(ABC):
    """Resolution, verification and on-demand training of one model per split; subclasses say what the model is
    (``kind``, ``recipe_identity``, ``train``, ``load``, ``load_published``, ``retrained_label``)."""

    kind = "model"
    PUBLISHED_NOTE = "one checkpoint for every seed"  # what a published checkpoint's label adds

    def __init__(self, path: str | None = None, published: str | None = None, train_on_demand: bool = True) -> None:
        self.path, self.published, self.train_on_demand = path or None, published or None, train_on_demand
        self.context: TrainingContext | None = None
        self._loaded: dict[Any, Any] = {}
        self.resolved: dict[str, str] = {}  # split name -> how the model was found (for describe())
        # split name -> the conversations that split's model was trained on (None: unknown), for describe(): the
        # protocol check names a model scored on conversations it saw (memrepro.checks)
        self.trained_on: dict[str, list[str] | None] = {}
        self._verified: set[tuple[Path, str]] = set()  # (folder, identity hash) this resolver has verified

    @property
    def run_context(self) -> RunContext | None:
        """The run context of the training context bound (None before one is)."""
        return self.context.run_context if self.context is not None else None

    # -- what subclasses provide -----------------------------------------------------------------------------------
    @abstractmethod
    def recipe_identity(self) -> dict[str, Any]:
        """What the model is trained with (recipe, architecture, base model): hashed into its folder's name."""

    @abstractmethod
    def train(self, split: Split, out_dir: Path) -> None:
        """Train this split's model on its dev conversations into ``out_dir`` (with our training log)."""

    @abstractmethod
    def load(self, folder: Path) -> Any:
        """The model saved in ``folder``."""

    @abstractmethod
    def load_published(self, name: str) -> Any:
        """The published checkpoint ``name``."""

    @abstractmethod
    def retrained_label(self) -> str:
        """How :attr:`label` names our own per-seed models (the recipe or base they are trained from)."""

    @property
    def label(self) -> str:
        """How ``describe()`` names the models: published, a given checkpoint, or ours retrained per seed."""
        if self.published:
            return f"published {self.published} ({self.PUBLISHED_NOTE})"
        if self.path:
            return f"checkpoint {self.path}"
        return self.retrained_label()

    UNIT, SECONDS_PER_UNIT = "questions", 1.0  # what one training step reads, and its measured cost (one thread)
    SCALES_WITH_THREADS = False  # whether that cost divides over torch's CPU threads (large batched matmuls do)

    def seconds_per_unit(self) -> float:
        return self.SECONDS_PER_UNIT

    def dev_questions(self, split: Split) -> list[Query]:
        """The dev questions training reads (the recipe's ``limit_queries`` applied)."""
        return self.context.dev_queries(split, getattr(getattr(self, "recipe", None), "limit_queries", None))

    def training_step(self, split: Split, folder: Path | None = None) -> PlanStep:
        """The training of this split's model as a plan line: units (dev questions x epochs) x measured seconds."""
        n = len(self.dev_questions(split)) * getattr(getattr(self, "recipe", None), "epochs", 1)
        seconds = n * self.seconds_per_unit() / (cpu_threads() if self.SCALES_WITH_THREADS else 1)
        return PlanStep(self.kind, split, "train", "train on", n, self.UNIT, seconds, str(folder or ""))

    def training_steps(self, split: Split, folder: Path) -> list[PlanStep]:
        """What training this split's model takes, stage by stage (a subclass adds the stages before training)."""
        return [self.training_step(split, folder)]

    def plan_steps(self, split: Split) -> list[PlanStep]:
        """This split's lines of the training plan: ready (found, verified) or the stages training it takes."""
        how, folder = self.locate(split)
        if how == "train":
            return self.training_steps(split, folder)
        source = {"path": f"given path {folder}", "published": f"published {self.published}"}.get(how, str(folder))
        return [PlanStep(self.kind, split, "train", "ready", location=source, done=True)]

    def estimate(self, split: Split) -> str:
        """The forecast printed before training on demand when no plan was printed: ``N questions, about M min on
        T CPU threads``."""
        return f"{self.training_step(split).forecast()} on {where(self.context.device)}"

    # -- resolution --------------------------------------------------------------------------------------------------
    def bind(self, context: TrainingContext) -> None:
        self.context = context

    def identity(self) -> dict[str, Any]:
        if self.context is None:
            raise MemreproError(f"{self.kind}: no training context bound (the runner binds one before retrieval)")
        return {"kind": self.kind, "recipe": self.recipe_identity(), **data_identity(self.context)}

    def identity_hash(self) -> str:
        return config_hash(self.identity())

    def folder(self, split: Split) -> Path:
        assert self.context is not None
        return Path(self.context.models_dir) / self.kind / self.identity_hash() / f"seed{split.seed}"

    def locate(self, split: Split) -> tuple[str, Path | None]:
        """How this split's model is found, without loading or training it: ``("path", folder)``,
        ``("published", None)``, ``("recipe", folder)`` (ours, present and verified) or ``("train", folder)``
        (absent: trained on demand there). Raises what loading would (a missing path, a mismatched or damaged
        checkpoint, training on demand off), so a run fails before it trains anything."""
        if self.path:
            folder = Path(self.path.format(seed=split.seed, split=split.name))
            if not folder.exists():
                raise MissingArtifactError(f"{self.kind}: no checkpoint at {folder} (from path={self.path!r}); "
                                           f"fix the path or drop it to use/train the recipe's own checkpoints")
            self._verify(folder)
            return "path", folder
        if self.published:
            return "published", None
        folder = self.folder(split)
        if (folder / TRAINING_INFO).is_file():
            self._verify(folder)
            return "recipe", folder
        if not self.train_on_demand:
            raise MissingArtifactError(
                f"{self.kind}: no checkpoint for split {split.name} at {folder}; run `python -m memrepro "
                f"train` with the same settings, or set train_on_demand=true")
        return "train", folder

    def __call__(self, split: Split) -> Any:
        key = split.seed if split.seed is not None else split.name
        if key in self._loaded:
            return self._loaded[key]
        how, folder = self.locate(split)
        if how == "published":
            self.resolved[split.name] = f"published {self.published}"
            known = published_trained_on(self.published)
            self.trained_on[split.name] = list(known.episodes) if known else None
            model = self.load_published(self.published)
        else:
            if how == "train":
                hint = "" if self.context.plan_printed else f", {self.estimate(split)}"
                print(f"memrepro: training {self.kind} for split {split.name} (recipe {self.identity_hash()})"
                      f"{hint} -> {folder}", flush=True)
                folder.parent.mkdir(parents=True, exist_ok=True)
                (folder.parent / "identity.json").write_text(json.dumps(self.identity(), indent=2, default=str))
                self.train(split, folder)
                self._verify(folder)
            self.resolved[split.name] = f"path {folder}" if how == "path" else f"recipe {self.identity_hash()}"
            self.trained_on[split.name] = (sorted(split.dev_episode_ids) if how != "path"
                                           else self._logged_conversations(folder))
            model = self.load(folder)
        self._loaded[key] = model
        return model

    def _logged_conversations(self, folder: Path) -> list[str] | None:
        """The conversations a given checkpoint was trained on, from our training log (its ``dev_episodes``, or the
        dev conversations of the split it names); None for a checkpoint trained elsewhere."""
        try:
            info = json.loads((folder / TRAINING_INFO).read_text())
        except (OSError, ValueError):
            return None
        if isinstance(info.get("dev_episodes"), list):
            return sorted(str(e) for e in info["dev_episodes"])
        named = [s for s in (self.context.benchmark.splits if self.context else ()) if s.name == info.get("split")]
        return sorted(named[0].dev_episode_ids) if named else None

    def _verify(self, folder: Path) -> None:
        """Our checkpoints carry the identity they were trained for and the sha256 of their files; refuse one
        whose files do not match it (or that records none) or whose identity differs from the run's. A folder
        verified once in this process (the plan verifies before the run loads) is not hashed again. Weights are
        read only as tensors (safetensors, or ``torch.load(..., weights_only=True)``), never as pickled code."""
        info_path = folder / TRAINING_INFO
        if not info_path.is_file() or self.context is None:
            return  # a foreign checkpoint (published, or trained elsewhere): loaded as given, labelled by its path
        if (folder, self.identity_hash()) in self._verified:
            return
        try:
            info = json.loads(info_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointMismatchError(f"{info_path}: unreadable training log ({exc}); delete {folder} to "
                                          f"retrain it") from None
        expected = info.get("weights_sha256")
        if not isinstance(expected, str):  # nothing to verify its weights against: never loaded unverified
            raise CheckpointMismatchError(f"{info_path}: no weights_sha256, so the checkpoint in {folder} cannot be "
                                          f"verified; delete the folder to retrain it")
        if weights_sha256(folder) != expected:
            raise CheckpointMismatchError(f"{folder}: damaged checkpoint (its files' sha256 is not the one recorded in "
                                          f"{TRAINING_INFO} when it was trained); delete the folder to retrain it")
        theirs, ours = info.get("identity"), self.identity()
        if theirs is None:
            return  # written before identities were recorded
        if config_hash(theirs) != config_hash(ours):
            a, b = _flatten(theirs), _flatten(ours)
            differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            detail = "; ".join(f"{k}: checkpoint {_short(a.get(k))} vs run {_short(b.get(k))}" for k in differ[:6])
            raise CheckpointMismatchError(f"{folder}: trained for another recipe, base model, data or encoder than "
                                          f"this run ({detail}); use the matching settings or another checkpoint")
        self._verified.add((folder, self.identity_hash()))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"recipe": {"lr": 1}}`` → ``{"recipe.lr": 1}``: a mismatch is named by its leaves."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


# ---------------------------------------------------------------------------------------------------------------
# Derived files kept beside a model folder (a cross-encoder's training records): JSON with a digest and identity


def save_checked(path: Path, identity: Any, content: Any) -> None:
    """Write ``content`` atomically as a first line holding the sha256 of the rest, then ``{identity, content}``
    as JSON, so a damaged or foreign file is recognised on read."""
    payload = json.dumps({"identity": identity, "content": content}, default=str).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "wb") as handle:
            handle.write(json.dumps({"sha256": hashlib.sha256(payload).hexdigest()}).encode() + b"\n" + payload)
        os.replace(tmp, path)
    except BaseException:  # killed mid-write: the previous file (if any) stays whole, no partial copy beside it
        tmp.unlink(missing_ok=True)
        raise


def load_checked(path: Path, identity: Any, what: str, quiet: bool = False) -> Any | None:
    """The content :func:`save_checked` wrote when ``path`` exists, is intact and was written for ``identity``;
    else None, and (unless ``quiet``) one line naming the file and why it is not used."""
    if not path.is_file():
        return None
    try:
        header, _, payload = path.read_bytes().partition(b"\n")
        if hashlib.sha256(payload).hexdigest() != json.loads(header)["sha256"]:
            raise ValueError("sha256 mismatch")
        document = json.loads(payload)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if not quiet:
            print(f"  ignoring {path}: damaged {what} ({type(exc).__name__}: {exc}); rebuilding it", flush=True)
        return None
    if config_hash(document.get("identity")) != config_hash(identity):
        if not quiet:
            print(f"  ignoring {path}: {what} for another recipe, data or split; rebuilding it", flush=True)
        return None
    return document["content"]
