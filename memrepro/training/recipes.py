"""Training recipes: one dataclass each, used as the Hydra schema (``retriever.model.recipe.*``,
``cross_encoder.recipe.*``) and by the trainers, so there is one set of defaults. Each field with a range declares
it here (``param``, as every schema does): the config check, a recipe built in Python and docs/parameters.md read
that one declaration. No heavy imports here: the config module loads this at composition time."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from memrepro.models.convmemory_v1_shape import V1_DEFAULT_SHAPE
from memrepro.parameters import (Rule, check_params, integer_at_least, number_above, number_in, number_in_open_closed,
                                 one_of, param)

# An AdamW step size: the recipes here train at 2e-5 to 1e-3, and far above that the weights go to NaN.
LEARNING_RATE: Rule = number_in_open_closed(0.0, 1.0, "a learning rate in (0, 1]")
NON_NEGATIVE: Rule = number_above(0.0, inclusive=True)


@dataclass
class V1Recipe:
    """ConvMemory v1's official recipe (``experiments/reproduce_locomo.py``), with the offline teacher choice."""

    # dense (raw cosine of the candidates: offline substitute) | cross_encoder
    teacher: str = param("dense", one_of("dense", "cross_encoder"))
    teacher_model: Optional[str] = None  # cross_encoder teacher: a model name or folder, {seed} allowed
    pairwise_weight: float = param(1.0, NON_NEGATIVE)  # 0: gold-only
    gold_weight: float = param(0.35, NON_NEGATIVE)
    first_rank_weight: float = param(0.05, NON_NEGATIVE)
    # best_gold | teacher (the official script's default)
    first_rank_target: str = param("best_gold", one_of("best_gold", "teacher"))
    pairwise_top_k: int = param(16, integer_at_least(1))
    pairwise_bottom_k: int = param(64, integer_at_least(1))
    teacher_temperature: float = param(0.1, number_above(0.0))
    lr: float = param(2.0e-4, LEARNING_RATE)
    weight_decay: float = param(1.0e-4, NON_NEGATIVE)
    epochs: int = param(1, integer_at_least(1))
    # torch seed before the model is built; None: the split seed
    init_seed: Optional[int] = param(None, integer_at_least(0))
    limit_queries: Optional[int] = param(None, integer_at_least(1))  # smoke runs / fixtures

    def __post_init__(self) -> None:
        check_params(self, type(self).__name__)  # the declared ranges, as the config is checked
        if self.teacher == "cross_encoder" and not self.teacher_model:
            raise ValueError("v1 recipe: teacher=cross_encoder needs teacher_model (a model name or folder)")

    @property
    def label(self) -> str:
        teacher = "dense-cosine teacher" if self.teacher == "dense" else f"CE teacher {self.teacher_model}"
        return ("gold-only" if self.pairwise_weight == 0 else teacher) + (
            f", {self.epochs} epochs" if self.epochs != 1 else "")


@dataclass
class CrossEncoderRecipe:
    """ConvMemory v2's published recipe (``examples/train_evidence_reranker.py``). No arm here: a cascade's
    cross-encoder trains with the cascade's own arm (the corruption it is evaluated with)."""

    lr: float = param(2.0e-5, LEARNING_RATE)
    weight_decay: float = param(0.01, NON_NEGATIVE)
    epochs: int = param(1, integer_at_least(1))
    batch_records: int = param(8, integer_at_least(1))
    max_length: int = param(256, integer_at_least(8))
    protected: int = param(10, integer_at_least(1))
    limit_queries: Optional[int] = param(None, integer_at_least(1))  # smoke runs / fixtures
    # the fresh classification head's lr (None: lr); a bi-encoder backbone's head starts random and at 2e-5 barely moves
    # in ~130 steps
    head_lr: Optional[float] = param(None, LEARNING_RATE)
    # a model for the full pool must rank 500 candidates, not 10: each record adds this many non-gold turns drawn
    # (per split seed and question) from the record stage's ranks protected+1..negative_pool, and every gold turn
    # there (so a question with no gold in the top 10 still trains); 0: v2's top-10 lists
    hard_negatives: int = param(0, integer_at_least(0))
    negative_pool: int = param(500, integer_at_least(1))
    # v2: QUERY_TIME/MEMORY_TIME pairs (the cascade's input) | plain: (query, text), the full pool's
    pair_format: str = param("v2", one_of("v2", "plain"))

    # knobs added after checkpoints were trained: hashed only when set, so earlier recipes keep their hash
    ADDED_LATER = {"head_lr": None, "hard_negatives": 0, "negative_pool": 500, "pair_format": "v2"}

    def __post_init__(self) -> None:
        check_params(self, type(self).__name__)
        if self.hard_negatives and self.negative_pool <= self.protected:
            raise ValueError(f"{type(self).__name__}: negative_pool ({self.negative_pool}) must exceed protected "
                             f"({self.protected}) for hard negatives to exist")

    def hashed(self) -> dict:
        """The recipe as its identity hashes it."""
        from dataclasses import asdict

        return {k: v for k, v in asdict(self).items() if k not in self.ADDED_LATER or v != self.ADDED_LATER[k]}


def divergence_fix(recipe: Any) -> str:
    """What a diverged training says to do: the recipe's numeric settings (learning rates, loss weights,
    temperature) that differ from their defaults are named with their values, as the likely cause; with none,
    the learning rate is what to lower."""
    changed = [f"{spec.name}={getattr(recipe, spec.name):g} (default {spec.default:g})"
               for spec in dataclasses.fields(recipe) if isinstance(spec.default, float)
               and isinstance(getattr(recipe, spec.name), (int, float)) and getattr(recipe, spec.name) != spec.default]
    if not changed:
        return "nothing was saved; lower the recipe's lr and train again"
    return (f"nothing was saved; the recipe sets {', '.join(changed)}: bring {'it' if len(changed) == 1 else 'them'} "
            f"back toward the default, then train again")


@dataclass
class V1ModelsConfig:
    """ConvMemory v1's models, one per split seed (``retriever.model.*``): found, published or trained with
    ``recipe``, and the shape they are built with."""

    _target_: str = "memrepro.training.convmemory_v1.V1Models"
    recipe: V1Recipe = field(default_factory=V1Recipe)
    path: Optional[str] = None  # explicit checkpoint folder or template with {seed}
    published: Optional[str] = None  # e.g. Purdy0228/ConvMemory-LoCoMo-MPNet (online; one model for all seeds)
    train_on_demand: bool = True
    pool: int = param(V1_DEFAULT_SHAPE.pool, integer_at_least(1))
    raw_weight: float = param(V1_DEFAULT_SHAPE.raw_weight, number_in(0.0, 1.0))
    router_block_size: int = param(V1_DEFAULT_SHAPE.router_block_size, integer_at_least(0))  # 0: no block router
    lexical_features: bool = V1_DEFAULT_SHAPE.lexical_features
