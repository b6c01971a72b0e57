"""The training plan: every model a run (or ``python -m memrepro train``) finds or trains, one line per model and
stage, printed once before anything trains, with a forecast from measured per-unit rates and the total.

The plan is computed without the expensive work: it counts each split's dev questions from the benchmark, looks
for each model by its recipe hash (a model present is verified and listed as ready) and multiplies by the per-unit
seconds each stage declares (``SECONDS_PER_UNIT`` and the like, measured on a shared 2-core CPU and documented where
they are declared). No vectors are needed: the planning context knows the encoder's width only.

``--dry-run`` (``run``) and ``--plan`` (``train``) print it and exit: the dispatcher sets :data:`PLAN_ONLY_ENV`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from memrepro.artifacts.forecast import PlanStep, duration, where

PLAN_ONLY_ENV = "MEMREPRO_PLAN_ONLY"  # set by `python -m memrepro run --dry-run` / `train --plan`
RATES_MEASURED_ON = "per-unit rates measured on a shared 2-core CPU"


def plan_only() -> bool:
    """True when the command was asked to print its plan and exit without training or writing anything."""
    return os.environ.get(PLAN_ONLY_ENV) == "1"


@dataclass(frozen=True)
class TrainingPlan:
    steps: tuple[PlanStep, ...]
    device: str = "cpu"

    @property
    def to_do(self) -> list[PlanStep]:
        return [s for s in self.steps if not s.done]

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.to_do)

    def summary(self) -> str:
        """``10 models to train and 5 record sets to build, about 1 h 46 min``."""
        train = sum(1 for s in self.to_do if s.stage == "train")
        records = sum(1 for s in self.to_do if s.stage == "records")
        text = f"{train} model{'s' if train != 1 else ''} to train"
        if records:
            text += f" and {records} record set{'s' if records != 1 else ''} to build"
        return f"{text}, {duration(self.seconds)}" if self.to_do else text

    def render(self) -> str:
        """The plan as printed: a header, one line per step, the total."""
        ready = sum(1 for s in self.steps if s.done and s.stage == "train")
        header = f"memrepro: plan on {where(self.device)} (forecasts from {RATES_MEASURED_ON}):"
        total = f"  total: {self.summary()}; {ready} ready"
        return "\n".join([header, *(s.line() for s in self.steps), total])


def per_seed_artifacts(retriever: Any) -> list:
    """The per-seed models a retriever resolves, each once, a model's dependencies first (v1 before the
    cross-encoder trained on its rankings): the order they are trained in; empty when it trains nothing."""
    from memrepro.artifacts.per_seed import PerSeedArtifact  # loads torch: the dispatcher imports this module early
    from memrepro.retrievers.base import RetrieverBase

    found: list = []
    seen: set[int] = set()

    def visit(part: Any) -> None:
        if id(part) in seen:
            return
        seen.add(id(part))
        for value in vars(part).values():
            if isinstance(value, PerSeedArtifact):
                visit(value)  # its record stage (and that stage's models) first
                if all(value is not f for f in found):
                    found.append(value)
            elif isinstance(value, RetrieverBase):  # a nested retriever (first stage)
                visit(value)

    visit(retriever)
    return found


def training_plan(retriever: Any, splits: Iterable[Any], device: str = "cpu") -> TrainingPlan:
    """Every model ``retriever`` needs for ``splits``, in training order (its training context bound)."""
    artifacts = per_seed_artifacts(retriever)
    return TrainingPlan(tuple(step for split in splits for artifact in artifacts
                              for step in artifact.plan_steps(split)), device)


def vector_dim(encoder: Any) -> int:
    """The encoder's output width without encoding the benchmark: its declared ``dim``, else one probe text."""
    import numpy as np

    dim = getattr(encoder, "dim", None)
    return int(dim) if dim else int(np.asarray(encoder.encode(["width probe"], "query")).shape[-1])


def planning_context(benchmark: Any, encoder: Any, models_dir: Path, device: str, uses_vectors: bool = True):
    """A training context that can plan but not train: the benchmark and the encoder's identity and width, no
    vectors (the plan never encodes)."""
    from memrepro.artifacts.per_seed import TrainingContext

    return TrainingContext(benchmark, None, {}, encoder.identity, Path(models_dir), device,
                           vector_dim=vector_dim(encoder) if uses_vectors else 1)


def needed_splits(splits: Sequence[Any], skip: Iterable[str] = ()) -> list[Any]:
    """The splits a run resolves models for: every split not taken from another run (``skip``), and the last
    one always (its model stays loaded after the pass, as after an uninterrupted one)."""
    skip = set(skip)
    return [s for i, s in enumerate(splits) if s.name not in skip or i == len(splits) - 1]
