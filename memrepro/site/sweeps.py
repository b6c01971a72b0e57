"""Sweeps found among the runs: runs of one dataset, retriever and encoder that share every setting but a few.

Run folders do not record the multirun that made them, so a sweep is read from the settings themselves (as a run
id hashes them): two runs are neighbours over the set of settings they differ in. For each such set of at most
:data:`MAX_SWEPT` settings, the runs that agree on everything else form a sweep when there are at least
:data:`MIN_POINTS` of them and each of those settings takes two values or more. The largest sweeps are kept
first; a sweep that adds fewer than two points to those already kept is not shown again. Runs of identical
settings (the same point computed twice, or with another engine) count once, by
:attr:`memrepro.tables.runs.Run.preference`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Sequence

from memrepro.runs.identity import NON_MEASURING_RETRIEVER_KEYS
from memrepro.tables.naming import differing, flat_settings, short_paths, value_text
from memrepro.tables.runs import Run, is_number, preferred

MAX_SWEPT = 4
MIN_POINTS = 3
GRID_FILL = 0.75  # a sweep of PARTIAL_FROM combinations or more holds at least this share of them; a smaller one all
PARTIAL_FROM = 8
RARE = 0.5  # a swept value met less than this share of its expected count is not part of the grid


@dataclass(frozen=True)
class Sweep:
    dataset: str
    retriever: str
    encoder: str
    swept: tuple[str, ...]  # dotted paths, in first-seen order
    runs: tuple[Run, ...]  # one per point
    dimensions: tuple[tuple[str, ...], ...] = ()  # the swept paths, those that change together in one

    @property
    def names(self) -> dict[str, str]:
        """Each swept path by its short name (``retriever.gate.tau`` -> ``tau``)."""
        return short_paths(self.swept)

    def values(self, run: Run) -> dict[str, Any]:
        flat = flat_settings(run.settings)
        return {path: flat.get(path) for path in self.swept}

    @property
    def slug(self) -> str:
        digest = hashlib.sha256(" ".join(sorted(r.folder.name for r in self.runs)).encode()).hexdigest()[:8]
        names = "-".join(self.names[p] for p in self.swept)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in names)
        return f"{self.dataset}-{self.retriever}-{safe}-{digest}"

    @property
    def title(self) -> str:
        return f"{self.retriever} on {self.dataset} ({self.encoder}): " + " × ".join(
            self.dimension_name(d) for d in self.dimensions)

    def dimension_name(self, dimension: Sequence[str]) -> str:
        return ", ".join(self.names[p] for p in dimension)

    def fixed(self) -> dict[str, Any]:
        """The settings every point shares (by dotted path)."""
        flat = measured(self.runs[0])
        return {path: value for path, value in flat.items() if path not in self.swept}

    def numeric(self, path: str) -> bool:
        return all(is_number(self.values(run)[path]) for run in self.runs)


def measured(run: Run) -> dict[str, Any]:
    """A run's settings by dotted path without those that change no ranking (the engine): what a point is."""
    return {path: value for path, value in flat_settings(run.settings).items()
            if not (path.startswith("retriever.") and path.rsplit(".", 1)[-1] in NON_MEASURING_RETRIEVER_KEYS)}


def _frozen(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def find_sweeps(runs: Sequence[Run], max_swept: int = MAX_SWEPT, min_points: int = MIN_POINTS) -> list[Sweep]:
    groups: dict[tuple[str, str, str], list[Run]] = defaultdict(list)
    for run in runs:
        groups[(run.dataset, run.retriever_name, run.encoder_label)].append(run)
    found: list[Sweep] = []
    for (dataset, retriever, encoder), members in sorted(groups.items()):
        by_settings: dict[str, list[Run]] = defaultdict(list)
        for run in members:
            by_settings[_frozen(measured(run))].append(run)
        points = [preferred(same) for same in by_settings.values()]
        if len(points) < min_points:
            continue
        flat = [measured(run) for run in points]
        paths = differing(flat)
        frozen = [tuple(_frozen(f.get(p)) for p in paths) for f in flat]
        # the candidate swept sets: what two points differ in, when it is a few settings
        candidates = set()
        for a, b in combinations(range(len(points)), 2):
            differ = frozenset(i for i in range(len(paths)) if frozen[a][i] != frozen[b][i])
            if 0 < len(differ) <= max_swept:
                candidates.add(differ)
        grids: list[tuple[frozenset[int], frozenset[int]]] = []  # (swept path indexes, point indexes)
        for swept in candidates:
            rest = [i for i in range(len(paths)) if i not in swept]
            classes: dict[tuple[str, ...], list[int]] = defaultdict(list)
            for index, values in enumerate(frozen):
                classes[tuple(values[i] for i in rest)].append(index)
            for members_of_class in classes.values():
                grid = _grid(members_of_class, sorted(swept), frozen, min_points)
                if grid:
                    grids.append((swept, frozenset(grid)))
        grids.sort(key=lambda g: (-len(g[1]), len(g[0]), sorted(g[0])))
        kept: list[frozenset[int]] = []
        for swept, grid in grids:
            if len(grid - frozenset().union(*kept)) < 2:  # inside a larger sweep, but for a point or none
                continue
            kept.append(grid)
            chosen = tuple(paths[i] for i in sorted(swept))
            ordered = sorted(grid, key=lambda i: tuple(order_key(flat[i].get(p)) for p in chosen))
            dimensions = tuple(tuple(paths[i] for i in sorted(d)) for d in _dimensions(list(grid), sorted(swept),
                                                                                       frozen))
            found.append(Sweep(dataset, retriever, encoder, chosen, tuple(points[i] for i in ordered),
                               tuple(sorted(dimensions, key=lambda d: chosen.index(d[0])))))
    return found


def _grid(points: list[int], swept: list[int], frozen: list[tuple[str, ...]], min_points: int) -> list[int] | None:
    """The points that form a sweep over ``swept`` (a nearly full grid), or None.

    Settings that change together (a preset switch moving ``k`` and ``fanout`` at once) are one dimension. A value
    met far less often than its dimension's others (a point another command added) is set aside, and the rest
    must be the whole grid (a large one: :data:`GRID_FILL` of it), every dimension with two values or more."""
    while len(points) >= min_points:
        dimensions = _dimensions(points, swept, frozen)
        combos = [Counter(tuple(frozen[p][i] for i in dim) for p in points) for dim in dimensions]
        if any(len(c) < 2 for c in combos):
            return None
        rare = {p for dim, counts in zip(dimensions, combos) for p in points
                if counts[tuple(frozen[p][i] for i in dim)] < RARE * len(points) / len(counts)}
        if rare:
            points = [p for p in points if p not in rare]
            continue
        size = math.prod(len(c) for c in combos)
        full = len(points) == size or (size >= PARTIAL_FROM and len(points) >= GRID_FILL * size)
        return points if full else None
    return None


def _dimensions(points: list[int], swept: list[int], frozen: list[tuple[str, ...]]) -> list[list[int]]:
    """``swept`` partitioned into settings whose values determine each other over ``points``."""
    distinct = {i: len({frozen[p][i] for p in points}) for i in swept}
    parent = {i: i for i in swept}

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for a, b in combinations(swept, 2):
        if len({(frozen[p][a], frozen[p][b]) for p in points}) == distinct[a] == distinct[b]:
            parent[root(b)] = root(a)
    out: dict[int, list[int]] = defaultdict(list)
    for i in swept:
        out[root(i)].append(i)
    return list(out.values())


def order_key(value: Any) -> tuple:
    """Sort key: numbers by value, before anything else by its text."""
    if is_number(value) and not math.isnan(value):
        return (0, float(value), "")
    return (1, 0.0, value_text(value))
