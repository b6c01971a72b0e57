"""Where trained cross-encoders live, and how a cascade finds the one of its split seed."""

from __future__ import annotations

from pathlib import Path

from memrepro.models.cross_encoder import TRAINING_INFO, CrossEncoderScorer
from memrepro.types import Split


def checkpoint_complete(folder: Path) -> bool:
    return (folder / TRAINING_INFO).is_file()


class PerSeedCheckpoints:
    """``template`` names one folder per seed, e.g. ``models/cross_encoder/<hash>/seed{seed}``; the cascade asks for
    the split's scorer before retrieving that split, so each seed is scored by the model trained on its dev set."""

    def __init__(self, template: str, max_length: int | None = 256, batch_size: int = 32,
                 activation: str = "logit", device: str = "auto") -> None:
        self.template = template
        self.kwargs = {"max_length": max_length, "batch_size": batch_size, "activation": activation,
                       "device": device}
        self._loaded: dict[int | None, CrossEncoderScorer] = {}

    def __call__(self, split: Split) -> CrossEncoderScorer:
        if split.seed not in self._loaded:
            folder = Path(self.template.format(seed=split.seed, split=split.name))
            if not checkpoint_complete(folder):
                raise FileNotFoundError(f"no trained cross-encoder for split {split.name} at {folder} "
                                        f"(run `python -m memrepro train` first)")
            self._loaded[split.seed] = CrossEncoderScorer(str(folder), path=str(folder), **self.kwargs)
        return self._loaded[split.seed]
