"""A diverged training names the setting that made it diverge: the recipe's numbers set away from their defaults,
with their values (a loss weight of 1e308, not only the learning rate)."""

from __future__ import annotations

import pytest
from test_convmemory_v1 import context  # noqa: F401  (the tiny v1 training context, a fixture)

from memrepro.models.sanity import DivergedModelError
from memrepro.training.recipes import CrossEncoderRecipe, V1Recipe, divergence_fix


def test_a_v1_training_diverging_from_a_huge_loss_weight_names_that_weight(context) -> None:  # noqa: F811
    from memrepro.training.convmemory_v1 import V1Models
    from memrepro.training.state import partial_path

    split = context.benchmark.splits[0]
    models = V1Models(recipe={"gold_weight": 1e308})
    models.bind(context)
    with pytest.raises(DivergedModelError) as caught:
        models(split)
    message = str(caught.value)
    assert "diverged at step" in message or "not finite" in message
    assert "gold_weight=1e+308 (default 0.35)" in message and "lower the recipe's lr" not in message
    assert caught.value.exit_code == 2 and "\n" not in message
    assert not models.folder(split).exists() and not partial_path(models.folder(split)).exists()


def test_the_advice_names_every_number_set_away_from_its_default() -> None:
    assert divergence_fix(V1Recipe()) == "nothing was saved; lower the recipe's lr and train again"
    advice = divergence_fix(V1Recipe(lr=0.5, teacher_temperature=1e-9))
    assert "teacher_temperature=1e-09 (default 0.1)" in advice and "lr=0.5 (default 0.0002)" in advice
    assert "epochs" not in divergence_fix(CrossEncoderRecipe(epochs=3))
