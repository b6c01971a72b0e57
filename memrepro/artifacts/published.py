"""What the published checkpoints were trained on, as far as their authors' documents say: which conversations a
model saw, so a run that scores it on them is named (the protocol check's ``split-leakage``, docs/checks.md).

A value is the conversations (episode ids) the checkpoint's training read; ``assumed`` says the documents do not
state it and the protocol assumes it (docs/protocols.md#published-checkpoints-and-leakage).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainedOn:
    episodes: tuple[str, ...]
    note: str
    assumed: bool = False


# LoCoMo split seed 23's dev conversations: the split the official ConvMemory code trains on
LOCOMO_SEED23_DEV = ("conv-42", "conv-44", "conv-47", "conv-48", "conv-49")

PUBLISHED_TRAINED_ON: dict[str, TrainedOn] = {
    "Purdy0228/ConvMemory-LoCoMo-MPNet": TrainedOn(LOCOMO_SEED23_DEV, "LoCoMo split seed 23's dev conversations"),
    "Purdy0228/ConvMemory-v2-Evidence-Reranker": TrainedOn(
        LOCOMO_SEED23_DEV, "undocumented; assumed to be seed 23's dev conversations, as for the v1 checkpoint",
        assumed=True),
}


def trained_on(name: str | None) -> TrainedOn | None:
    """What the published checkpoint ``name`` saw (None: not a checkpoint memrepro knows)."""
    return PUBLISHED_TRAINED_ON.get(name or "")
