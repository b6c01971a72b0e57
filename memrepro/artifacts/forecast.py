"""What finding or training one model takes, as one line of the training plan (``memrepro.training.plan``): the
units a stage reads (dev questions, records) times the per-unit seconds each model kind declares (measured)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any


def duration(seconds: float) -> str:
    """``about 4 min``, ``about 1 h 46 min``: whole minutes (at least one), hours past the hour."""
    minutes = max(1, round(seconds / 60))
    if minutes < 60:
        return f"about {minutes} min"
    return f"about {minutes // 60} h {minutes % 60:02d} min"


def cpu_threads() -> int:
    """The CPU threads torch computes with: its own count once it is loaded (``runtime.torch_threads`` sets it),
    else the CPUs this process may use (what a plan printed before anything is computed names, without loading
    torch)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return max(1, torch.get_num_threads())
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def where(device: str) -> str:
    """The hardware a forecast is for: torch's CPU threads (and a note when an accelerator will do the work)."""
    threads = cpu_threads()
    text = f"{threads} CPU thread{'s' if threads > 1 else ''}"
    return text + (f" (less on {device})" if device != "cpu" else "")


@dataclass(frozen=True)
class PlanStep:
    """One model (or its record building) for one split: what is done, on how many units, for how long."""

    kind: str  # the model kind: convmemory_v1, cross_encoder
    split: Any  # memrepro.types.Split
    stage: str  # "train" | "records"
    action: str  # what the line says is done, e.g. "train on" or "build records from convmemory_v1's rankings of"
    units: int = 0
    unit: str = ""
    seconds: float = 0.0  # the forecast (0 when done)
    location: str = ""  # the model folder, cache file, or where a given model comes from
    done: bool = False  # present (a model found by recipe hash, verified; or cached records): nothing to do

    @property
    def label(self) -> str:
        return f"seed {self.split.seed}" if self.split.seed is not None else self.split.name

    def forecast(self) -> str:
        """``1,039 records, about 13 min``: the units and the forecast, as on-demand training announces them."""
        return f"{self.units:,} {self.unit}, {duration(self.seconds)}"

    def line(self) -> str:
        if self.done:
            return f"  {self.label}: {self.kind}, {self.action} ({self.location})"
        return (f"  {self.label}: {self.kind}, {self.action} {self.forecast()}"
                + (f" -> {self.location}" if self.location else ""))
