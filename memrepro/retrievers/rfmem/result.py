"""What both Recollection engines return, and the finish they share: the optional dense re-rank and the cut to K.

``recollection.py`` (faithful) and ``compiled.py`` (numba) search differently but end the same way, so a result
of either engine is built here: the same trace keys, the same stop-reason names, the same re-rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from memrepro.retrievers.rfmem.params import RecollectionParams

NORM_EPS = 1e-12  # the official code's v / (‖v‖ + 1e-12), in both engines
# Why a search ended; the compiled kernels report the index into this tuple.
STOP_REASONS = ("rounds_exhausted", "k_reached", "empty_round")
ROUNDS_EXHAUSTED, K_REACHED, EMPTY_ROUND = STOP_REASONS


@dataclass(frozen=True)
class RecollectionResult:
    """One query's Recollection output: pool positions and carried scores in insertion order, plus a trace."""

    positions: list[int]
    scores: list[float]
    trace: dict = field(default_factory=dict)


def round_trace(items_per_round: Sequence[int], candidates_per_round: Sequence[int],
                dead_branches_per_round: Sequence[int], stop_reason: str) -> dict:
    """The per-query trace every engine records (extra keys, e.g. DBSCAN noise, are added by the engine)."""
    if stop_reason not in STOP_REASONS:
        raise ValueError(f"unknown stop reason {stop_reason!r}")
    return {"rounds": len(items_per_round), "items_per_round": list(items_per_round),
            "candidates_per_round": list(candidates_per_round),
            "dead_branches_per_round": list(dead_branches_per_round), "stop_reason": stop_reason}


def finish(positions: Sequence[int], scores: Sequence[float], q0: np.ndarray, pool: np.ndarray,
           params: RecollectionParams, trace: dict) -> RecollectionResult:
    """Everything emitted, in insertion order → the result: under ``final_rerank="dense"`` or full exploration
    (D.9) re-sorted by cosine to ``q0`` (ties by position; the scores become those cosines), then cut to K."""
    positions = [int(p) for p in positions]
    scores = [float(s) for s in scores]
    if params.full_exploration:
        trace["collected"] = len(positions)
    if (params.final_rerank == "dense" or params.full_exploration) and positions:
        ids = np.asarray(positions, dtype=np.int64)
        cosines = pool[ids] @ q0
        order = np.lexsort((ids, -cosines.astype(np.float64)))
        positions = [positions[i] for i in order]
        scores = [float(cosines[i]) for i in order]
    return RecollectionResult(positions[: params.k], scores[: params.k], trace)
