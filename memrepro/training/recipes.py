"""Training recipes: one dataclass each, used as the Hydra schema (``retriever.model.recipe.*``,
``cross_encoder.recipe.*``) and by the trainers, so there is one set of defaults. No heavy imports here: the
config module loads this at composition time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from memrepro.validate import check_recipe


@dataclass
class V1Recipe:
    """ConvMemory v1's official recipe (``experiments/reproduce_locomo.py``), with the offline teacher choice."""

    teacher: str = "dense"  # dense (raw cosine of the candidates: offline substitute) | cross_encoder
    teacher_model: Optional[str] = None  # cross_encoder teacher: a model name or folder, {seed} allowed
    pairwise_weight: float = 1.0  # 0: gold-only
    gold_weight: float = 0.35
    first_rank_weight: float = 0.05
    first_rank_target: str = "best_gold"  # best_gold | teacher (the official script's default)
    pairwise_top_k: int = 16
    pairwise_bottom_k: int = 64
    teacher_temperature: float = 0.1
    lr: float = 2.0e-4
    weight_decay: float = 1.0e-4
    epochs: int = 1
    init_seed: Optional[int] = None  # torch seed before the model is built; None: the split seed
    limit_queries: Optional[int] = None  # smoke runs / fixtures

    def __post_init__(self) -> None:
        check_recipe(self, type(self).__name__)  # the ranges the config is checked with (validate.RECIPE_RULES)
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

    lr: float = 2.0e-5
    weight_decay: float = 0.01
    epochs: int = 1
    batch_records: int = 8
    max_length: int = 256
    protected: int = 10
    limit_queries: Optional[int] = None  # smoke runs / fixtures
    head_lr: Optional[float] = None  # the fresh classification head's lr (None: lr); a bi-encoder backbone's head
    #                                  starts random and at 2e-5 barely moves in ~130 steps
    # a model for the full pool must rank 500 candidates, not 10: each record adds this many non-gold turns drawn
    # (per split seed and question) from the record stage's ranks protected+1..negative_pool, and every gold turn
    # there (so a question with no gold in the top 10 still trains); 0: v2's top-10 lists
    hard_negatives: int = 0
    negative_pool: int = 500
    pair_format: str = "v2"  # v2: QUERY_TIME/MEMORY_TIME pairs (the cascade's input) | plain: (query, text), the full pool's

    # knobs added after checkpoints were trained: hashed only when set, so earlier recipes keep their hash
    ADDED_LATER = {"head_lr": None, "hard_negatives": 0, "negative_pool": 500, "pair_format": "v2"}

    def __post_init__(self) -> None:
        check_recipe(self, type(self).__name__)
        if self.hard_negatives and self.negative_pool <= self.protected:
            raise ValueError(f"{type(self).__name__}: negative_pool ({self.negative_pool}) must exceed protected "
                             f"({self.protected}) for hard negatives to exist")

    def hashed(self) -> dict:
        """The recipe as its identity hashes it."""
        from dataclasses import asdict

        return {k: v for k, v in asdict(self).items() if k not in self.ADDED_LATER or v != self.ADDED_LATER[k]}
