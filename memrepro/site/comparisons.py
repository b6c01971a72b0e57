"""Two runs side by side, query by query: wins, losses and ties, the paired bootstrap CI, and the queries whose gold
rank moved most.

Runs are paired as ``python -m memrepro compare`` pairs them (:func:`memrepro.compare.check_comparable`: the same
benchmark, data and scored units, else one line naming the difference) and tested with the same seeded paired
bootstrap (:func:`memrepro.evaluation.significance.paired_bootstrap`, 10,000 resamples, seed 13), so the numbers
equal ``compare``'s. The declared paper comparisons (``conf/comparisons.yaml``) name two conditions of the
experiment list; each side is its condition's run.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from memrepro.compare import check_comparable
from memrepro.errors import MemreproError, one_line
from memrepro.evaluation.significance import PairedResult, paired_bootstrap
from memrepro.paths import CONFIG_DIR
from memrepro.site.misses import Buckets, best_gold_rank, depth
from memrepro.tables.runs import Run, preferred

DECLARED = CONFIG_DIR / "comparisons.yaml"
RESAMPLES, SEED = 10_000, 13  # compare's defaults
MOVES_SHOWN = 15  # queries listed per direction


class ComparisonListError(MemreproError):
    """The comparison list is malformed (file, entry and field named)."""


@dataclass(frozen=True)
class Declared:
    name: str
    title: str
    baseline: str  # condition names (conf/experiments.yaml)
    other: str


def declared(path: Path = DECLARED) -> list[Declared]:
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ComparisonListError(f"{path}: unreadable ({type(exc).__name__}); fix the file") from None
    out = []
    for i, entry in enumerate(document.get("comparisons") or []):
        fields = {"name", "title", "baseline", "other"}
        if not isinstance(entry, dict) or set(entry) != fields or not all(isinstance(v, str) for v in entry.values()):
            raise ComparisonListError(f"{path}: comparison #{i}: needs exactly the text fields {sorted(fields)}")
        out.append(Declared(**entry))
    return out


def declared_pairs(runs: Sequence[Run], say, comparisons: Path = DECLARED, experiments: Path | None = None,
                   names: Sequence[str] | None = None) -> list[tuple[Declared, Run, Run]]:
    """Each declared comparison whose two conditions both have a run here (the others said in one line each)."""
    from memrepro.experiments import DEFAULT_LIST, load_experiments
    from memrepro.tables.conditions import condition_runs

    common, listed = load_experiments(experiments or DEFAULT_LIST)
    by_name = {e.name: e for e in listed}
    out = []
    for entry in declared(comparisons):
        if names is not None and entry.name not in names:
            continue
        sides = []
        for condition in (entry.baseline, entry.other):
            if condition not in by_name:
                raise ComparisonListError(f"{comparisons}: comparison {entry.name!r}: unknown condition "
                                          f"{condition!r} (not in the experiment list {experiments or DEFAULT_LIST})")
            sides.append(preferred(condition_runs(by_name[condition], runs, common)))
        if None in sides:
            absent = [c for c, run in zip((entry.baseline, entry.other), sides) if run is None]
            say(f"comparison {entry.name}: no run of {', '.join(absent)} here (python -m memrepro run "
                f"+experiment={absent[0]} computes it); its page is left out")
            continue
        out.append((entry, sides[0], sides[1]))
    return out


@dataclass(frozen=True)
class Group:
    """One metric over one group of units: the paired test and the per-query wins, losses and ties."""

    metric: str
    group: str  # "all" or a category's name
    n: int
    baseline: float
    other: float
    test: PairedResult | None  # None: not tested (see Pairing.tested)
    wins: int
    losses: int
    ties: int


@dataclass
class Pairing:
    """What a comparison page shows (plain data: it crosses from the worker process that computes it)."""

    base: str  # run keys
    other: str
    metrics: list[str]
    groups: list[Group] = field(default_factory=list)
    bucket_labels: list[str] = field(default_factory=list)
    transitions: dict[tuple[str, str], int] = field(default_factory=dict)  # (base bucket, other bucket) -> units
    moved: dict[str, int] = field(default_factory=dict)  # improved / worsened / unchanged best gold rank
    improved: list[dict[str, Any]] = field(default_factory=list)  # the units that moved most, each way
    worsened: list[dict[str, Any]] = field(default_factory=list)


def pair(base: Run, other: Run, metrics: Sequence[str] | None = None, by_category: int | None = None,
         resamples: int = RESAMPLES, seed: int = SEED) -> Pairing:
    """Compare ``other`` with ``base`` over their scored units (refused, one line, when they differ:
    :class:`memrepro.compare.CompareError`). Every metric is tested over all units and per category (the first
    ``by_category`` metrics only, when given: a bootstrap over LoCoMo's 4,955 units takes about a second)."""
    metrics = list(metrics or base.record.primary or base.record.metric_names)
    by_category = len(metrics) if by_category is None else by_category
    check_comparable(base, other, metrics)
    rows_a = _by_unit(base.rows)
    rows_b = _by_unit(other.rows)
    names = {code: c.name or code for code, c in base.record.summary.categories.items()}
    units = sorted(rows_a)
    groups = [("all", units)]
    for code, name in names.items():
        members = [u for u in units if str(rows_a[u]["category"]) == code]
        if members:
            groups.append((name, members))
    out = Pairing(base.folder.name, other.folder.name, metrics)
    for position, metric in enumerate(metrics):
        for group, members in groups:
            if group != "all" and position >= by_category:
                continue
            a = {u: rows_a[u]["metrics"][metric] for u in members}
            b = {u: rows_b[u]["metrics"][metric] for u in members}
            differences = Counter((b[u] > a[u]) - (b[u] < a[u]) for u in members)
            out.groups.append(Group(metric, group, len(members), sum(a.values()) / len(a), sum(b.values()) / len(b),
                                    paired_bootstrap(b, a, resamples=resamples, seed=seed),
                                    differences[1], differences[-1], differences[0]))
    buckets = Buckets(max(depth(base.rows), depth(other.rows)))
    out.bucket_labels = buckets.labels
    beyond = buckets.deepest + 1  # "not retrieved" counts as just past every returned rank
    transitions: Counter = Counter()
    moves = []
    for unit in units:
        ra, rb = best_gold_rank(rows_a[unit]), best_gold_rank(rows_b[unit])
        transitions[(buckets.labels[buckets.of(ra)], buckets.labels[buckets.of(rb)])] += 1
        # by the ratio of the ranks: 12 -> 1 moves more than 233 -> 202
        gain = math.log2((ra if ra is not None else beyond) / (rb if rb is not None else beyond))
        moves.append((gain, unit, ra, rb))
    out.transitions = dict(transitions)
    out.moved = {"improved": sum(m[0] > 0 for m in moves), "worsened": sum(m[0] < 0 for m in moves),
                 "unchanged": sum(m[0] == 0 for m in moves)}
    for improved in (True, False):
        sign = 1 if improved else -1
        listed = sorted((m for m in moves if sign * m[0] > 0), key=lambda m: (-sign * m[0], m[1]))[:MOVES_SHOWN]
        shown = [_move(rows_a[unit], rows_b[unit], ra, rb, names) for _, unit, ra, rb in listed]
        setattr(out, "improved" if improved else "worsened", shown)
    return out


def _move(row: dict[str, Any], other_row: dict[str, Any], base_rank: int | None, other_rank: int | None,
          names: dict[str, str]) -> dict[str, Any]:
    """One unit whose gold moved: what its row on the page needs."""
    return {"query": row["query_id"], "split": row["split"], "episode": row["episode_id"],
            "category": names.get(str(row["category"]), str(row["category"])), "gold": list(dict.fromkeys(row["gold"])),
            "base_rank": base_rank, "other_rank": other_rank,
            "base_top": [m for m, _ in row["top"][:1]], "other_top": [m for m, _ in other_row["top"][:1]]}


def declared_results(folders: Sequence[tuple[str, bool]], resamples: int = RESAMPLES, comparisons: Path = DECLARED,
                     experiments: Path | None = None, names: Sequence[str] | None = None
                     ) -> tuple[list[tuple[Declared, str, str, Pairing | str]], list[str]]:
    """The declared comparisons (those in ``names``, when given) over the runs at ``folders`` (``(folder, kept)``):
    ``(entry, base key, other key, its pairing or why it was refused)``, and one line per comparison left out.
    Runs in a worker process."""
    from memrepro.site.sources import KeptRun

    runs = [KeptRun(Path(folder)) if kept else Run(Path(folder)) for folder, kept in folders]
    lines: list[str] = []
    out = []
    for entry, base, other in declared_pairs(runs, lines.append, comparisons, experiments, names):
        try:
            out.append((entry, base.folder.name, other.folder.name, pair(base, other, resamples=resamples)))
        except MemreproError as exc:
            out.append((entry, base.folder.name, other.folder.name, one_line(exc)))
    return out, lines


def _by_unit(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{r['split']}::{r['query_id']}": r for r in rows if r["excluded"] is None}
