"""No diverged model ever looks ready: every trainer stops at the first non-finite loss, and writes its checkpoint
only after every weight is finite and the model scores a few dev records with finite scores (a cheap check that
the saved model computes numbers at all; its quality is what the run measures)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping

import numpy as np

from memrepro.errors import EXIT_BAD_INPUT, MemreproError

if TYPE_CHECKING:
    import torch

SANITY_RECORDS = 4  # dev records a trained model must score with finite scores before it is saved


class DivergedModelError(MemreproError):
    """Training whose loss or weights became non-finite (the recipe diverges: a bad input), or a checkpoint that
    holds non-finite weights."""

    exit_code = EXIT_BAD_INPUT


def check_loss(loss: float, what: str, step: int, total: int, fix: str) -> None:
    """``what`` (the model, its folder and its recipe) stops at ``step`` when its loss is not finite; ``fix``
    says what to change (:func:`memrepro.training.recipes.divergence_fix`)."""
    if not math.isfinite(loss):
        raise DivergedModelError(f"{what} diverged at step {step} of {total} (loss {loss}); {fix}")


def nonfinite_tensors(state: Mapping[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors of a state dict that hold a NaN or an infinity."""
    import torch

    return [name for name, tensor in state.items()
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]


def check_weights(state: Mapping[str, torch.Tensor], what: str, fix: str) -> None:
    bad = nonfinite_tensors(state)
    if bad:
        raise DivergedModelError(f"{what}: {len(bad)} of {len(state)} weight tensors are not finite (first: "
                                 f"{bad[0]}); {fix}")


def check_scores(scores: np.ndarray, what: str, records: int, fix: str) -> None:
    """The sanity score: a trained model's scores of a few dev records must all be finite."""
    bad = int((~np.isfinite(np.asarray(scores, dtype=np.float64))).sum())
    if bad:
        raise DivergedModelError(f"{what}: {bad} of {np.size(scores)} scores of {records} dev records are "
                                 f"not finite; {fix}")
