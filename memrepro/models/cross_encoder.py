"""Cross-encoders: sentence-transformers ``CrossEncoder``, raw logits, fp32, batched, same name resolution as encoders.

The papers' weights (``cross-encoder/ms-marco-MiniLM-L-6-v2``, ``mixedbread-ai/mxbai-rerank-large-v1``) load from
the Hub or a local folder. Offline none exist, so ``memrepro train`` builds one from a bi-encoder backbone; a
model built that way is labelled with its base in every result.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from memrepro.context import RunContext
from memrepro.models.encoder import resolve_device
from memrepro.models.resolve import ResolvedModel, model_weights_identity, resolve_model

TRAINING_INFO = "memrepro_training.json"  # written by memrepro train next to a fine-tuned checkpoint


class CrossEncoderScorer:
    """Scores (left, right) text pairs. ``activation="logit"`` ranks on raw logits (a float32 sigmoid saturates to
    exactly 1.0 above ~17 and creates ties); ``"library_default"`` uses sentence-transformers' default. ``context``:
    the run's (weights hashed once by a sweep's points)."""

    def __init__(self, model: str, path: str | None = None, max_length: int | None = None, batch_size: int = 32,
                 activation: Literal["logit", "library_default"] = "logit", device: str = "auto",
                 allow_untrained_head: bool = False, context: RunContext | None = None) -> None:
        context = context if context is not None else RunContext()
        self.resolved: ResolvedModel = resolve_model(model, path, context=context)
        self.device = resolve_device(device)
        self.max_length, self.batch_size, self.activation = max_length, batch_size, activation
        self.allow_untrained_head = allow_untrained_head
        self._model = None
        self.load_seconds = 0.0
        self.training = _training_info(self.resolved.path)
        self.identity = {"kind": "cross-encoder", "model": self.resolved.name,
                         "weights": model_weights_identity(self.resolved.path, context.digests),
                         "max_length": max_length, "activation": activation}
        base = self.training.get("base_model") if self.training else None
        self.label = (f"{Path(self.resolved.path).name} (fine-tuned by memrepro from {base})" if base
                      else self.resolved.label)

    @property
    def model(self):
        if self._model is None:
            from sentence_transformers import CrossEncoder

            from memrepro.models.sanity import check_weights

            start = time.perf_counter()
            model = CrossEncoder(self.resolved.path, num_labels=1, max_length=self.max_length, device=self.device)
            check_weights(model.model.state_dict(), self.resolved.path,  # e.g. a diverged training's checkpoint
                          "a model with NaN or infinite weights scores nothing: retrain or replace it")
            self._model = model
            self.load_seconds = time.perf_counter() - start
        return self._model

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        kwargs = {}
        if self.activation == "logit":
            import torch

            kwargs["activation_fn"] = torch.nn.Identity()
        scores = self.model.predict(list(pairs), batch_size=min(self.batch_size, len(pairs)),
                                    show_progress_bar=False, convert_to_numpy=True, **kwargs)
        return np.asarray(scores, dtype=np.float32).reshape(-1)


def _training_info(path: str) -> dict | None:
    info = Path(path) / TRAINING_INFO
    return json.loads(info.read_text()) if info.is_file() else None
