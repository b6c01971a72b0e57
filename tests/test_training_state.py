"""A training state or checkpoint is never unpickled before memrepro has verified it, and never as code: a file in
``models/`` whose pickle would run a command is refused on its header (or, with a forged header, by
``weights_only=True``), named in one line, and training restarts; a checkpoint whose training log records no
digest is refused."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from memrepro.artifacts.per_seed import CheckpointMismatchError, PerSeedArtifact
from memrepro.models.cross_encoder import TRAINING_INFO
from memrepro.training.state import MAGIC, PARTIAL, load_state, save_state


class _RunsACommand:
    """What a hostile pickle holds: unpickling it calls ``os.system``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _hostile_torch_file(marker: Path) -> bytes:
    buffer = io.BytesIO()
    torch.save({"identity": "x", "done": 3, "payload": _RunsACommand(marker)}, buffer, pickle_module=pickle)
    return buffer.getvalue()


def test_a_state_round_trips_with_the_optimiser_schedule_and_rng(tmp_path: Path) -> None:
    network = torch.nn.Linear(3, 2)
    optimiser = torch.optim.AdamW(network.parameters(), lr=1e-3)
    network(torch.ones(1, 3)).sum().backward()
    optimiser.step()
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: 1.0)
    identity = {"recipe": {"lr": 1e-4, "head_lr": None}, "train_query_ids": ["q1"]}
    state = {"identity": identity, "model": network.state_dict(), "optimiser": optimiser.state_dict(),
             "schedule": schedule.state_dict(), "torch_rng": torch.get_rng_state(), "done": 3, "losses": [0.5]}
    save_state(tmp_path / f"seed7{PARTIAL}", state)
    loaded = load_state(tmp_path / f"seed7{PARTIAL}", identity)
    assert loaded is not None and loaded["done"] == 3 and torch.equal(loaded["torch_rng"], state["torch_rng"])
    assert torch.equal(loaded["model"]["weight"], network.state_dict()["weight"])


def test_a_pickle_placed_as_a_training_state_is_never_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    marker, partial = tmp_path / "ran", tmp_path / f"seed23{PARTIAL}"
    partial.write_bytes(_hostile_torch_file(marker))
    assert load_state(partial, "x") is None and not marker.exists()
    out = capsys.readouterr().out
    assert f"ignoring {partial}: damaged training state" in out and "not a memrepro training state" in out


def test_a_pickle_behind_a_forged_header_is_still_never_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    marker, partial = tmp_path / "ran", tmp_path / f"seed23{PARTIAL}"
    blob = _hostile_torch_file(marker)
    partial.write_bytes(MAGIC + hashlib.sha256(blob).hexdigest().encode() + b"\n" + blob)
    assert load_state(partial, "x") is None and not marker.exists()
    assert f"ignoring {partial}: damaged training state" in capsys.readouterr().out


def test_a_state_in_the_format_without_a_header_is_refused_unread(tmp_path: Path) -> None:
    """A state saved as a pickled ``{"sha256", "state"}`` dict is not read: reading it means unpickling it."""
    partial = tmp_path / f"seed7{PARTIAL}"
    inner = io.BytesIO()
    torch.save({"identity": "x", "done": 1}, inner)
    torch.save({"sha256": hashlib.sha256(inner.getvalue()).hexdigest(), "state": inner.getvalue()}, partial)
    assert load_state(partial, "x") is None


class _Model(PerSeedArtifact):
    kind = "test"

    def recipe_identity(self):
        return {"recipe": 1}

    def identity(self):  # no training context needed: the data part of the identity is not read here
        return {"kind": self.kind, "recipe": self.recipe_identity()}

    def train(self, split, out_dir):
        raise AssertionError("not trained here")

    def load(self, folder):
        return folder

    def load_published(self, name):
        raise AssertionError

    def retrained_label(self):
        return "test"


def test_a_checkpoint_whose_log_records_no_digest_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "seed7"
    folder.mkdir()
    (folder / "model.pt").write_bytes(_hostile_torch_file(tmp_path / "ran"))
    (folder / TRAINING_INFO).write_text(json.dumps({"identity": None}))
    model = _Model(path=str(folder))
    model.context = object()  # bound: its checkpoints are ours to verify
    with pytest.raises(CheckpointMismatchError, match=f"{folder / TRAINING_INFO}: no weights_sha256"):
        model._verify(folder)
    assert not (tmp_path / "ran").exists()
