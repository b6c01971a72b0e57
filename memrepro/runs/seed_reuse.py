"""Seed-subset reuse: a run over several split seeds takes the splits that complete runs of the *same* config over
fewer seeds already computed, and retrieves only the rest.

Why: the full-pool cross-encoder costs about 5 s per LoCoMo question on a laptop CPU, about 6–7 hours for the five
seeds. Runs of one or two seeds each (``dataset.seeds=[11]``) fit in a sitting, on any machine; the five-seed run
then composes them instead of computing everything again.

What "the same config" means is decided by the run id, not by comparing configs here: a candidate's id is the id
this run's config would have with ``dataset.seeds`` set to a subset of its seeds (in their order), so every other
key, the data's sha256, the encoder's identity and the algorithm versions all match by construction. A candidate is
reused only when its folder verifies against its manifest and its rows are exactly the benchmark's queries of those
splits, in order; otherwise it is named in a warning and its splits are retrieved here.

Reused are the rows (top ids, gold ranks, traces) and that run's retrieval seconds, so the amortized latency still
sums retrieval time only. Their metrics are computed again here from the stored gold ranks
(``FrozenRanking.from_gold_ranks``: every metric depends only on where the gold items sit). Batch-1 latency is
measured afresh by the composing run, as after a resume. The run record says which runs were reused (``warnings``;
``timings.reused_queries``).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from memrepro.runs.kept import KeptRuns
from memrepro.runs.folder import is_complete, read_queries, read_record, run_problem
from memrepro.types import Benchmark

log = logging.getLogger("memrepro")

# 2**n - 2 candidate subsets are hashed; beyond this many seeds only single-seed runs are looked for
MAX_SEEDS_FOR_SUBSETS = 8


@dataclass
class ReusedSplits:
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # split name -> its rows, in order
    retrieve_s: float = 0.0  # the reused runs' retrieval seconds (their amortized latency's numerator)
    sources: list[str] = field(default_factory=list)  # one line per reused run

    @property
    def n_queries(self) -> int:
        return sum(len(rows) for rows in self.rows.values())

    def notes(self) -> list[str]:
        return [f"reused from a complete run of the same config: {source}" for source in self.sources]


def candidate_subsets(seeds: Sequence[int]) -> list[tuple[int, ...]]:
    """Proper non-empty subsets of ``seeds`` in their order, largest first (fewest runs to compose)."""
    seeds = tuple(seeds)
    sizes = range(len(seeds) - 1, 0, -1) if len(seeds) <= MAX_SEEDS_FOR_SUBSETS else [1]
    return [subset for size in sizes for subset in itertools.combinations(seeds, size)]


def find_reusable(folder: Path, seeds: Sequence[int], run_id_for: Callable[[list[int]], str],
                  benchmark: Benchmark, kept: KeptRuns | None = None) -> ReusedSplits:
    """The splits of ``benchmark`` that complete sibling runs (same parent folder, ids from ``run_id_for``) hold;
    disjoint runs, largest first; a sibling absent here but kept (``memrepro.runs.kept``) is restored first.
    Nothing when there are fewer than two seeds."""
    reused = ReusedSplits()
    if len(seeds) < 2:
        return reused
    split_of_seed = {split.seed: split for split in benchmark.splits}
    covered: set[int] = set()
    for subset in candidate_subsets(seeds):
        if covered.intersection(subset):
            continue
        candidate = folder.parent / run_id_for(list(subset))
        if kept is not None:  # absent or damaged here: its kept copy, when there is one (a damaged one is named)
            kept.restore_or_warn(candidate, "not reused, its splits are retrieved here")
        if not is_complete(candidate):
            continue
        rows = _verified_rows(candidate, [split_of_seed[seed] for seed in subset], benchmark)
        if rows is None:
            continue
        record = read_record(candidate)
        for split_name, split_rows in rows.items():
            reused.rows[split_name] = split_rows
        reused.retrieve_s += float(record.timings.get("retrieve_s", 0.0))
        reused.sources.append(f"run {candidate.name} (dataset.seeds={list(subset)}, {record.counts.n_total} "
                              f"queries)")
        covered.update(subset)
    for line in reused.notes():
        log.info("%s", line)
    return reused


def _verified_rows(candidate: Path, splits: list, benchmark: Benchmark) -> dict[str, list[dict[str, Any]]] | None:
    """The candidate's rows by split, or None (with a warning naming it) when it does not verify or its rows are
    not exactly the benchmark's queries of those splits."""
    problem = run_problem(candidate)
    if problem:
        log.warning("%s; not reused, its splits are retrieved here", problem)
        return None
    by_split: dict[str, list[dict[str, Any]]] = {split.name: [] for split in splits}
    for row in read_queries(candidate):
        if row.get("split") not in by_split:
            log.warning("%s/queries.jsonl: a row of split %r, not one of %s; not reused", candidate,
                        row.get("split"), sorted(by_split))
            return None
        by_split[row["split"]].append(row)
    for split in splits:
        queries = list(benchmark.split_queries(split))
        found = [(row.get("query_id"), sorted(row.get("gold_ranks") or {}), row.get("excluded"))
                 for row in by_split[split.name]]
        expected = [(query.id, sorted(set(query.gold)), query.excluded) for query in queries]
        if found != expected:
            log.warning("%s/queries.jsonl: split %s's rows are not the benchmark's %d queries (ids, gold, "
                        "exclusions) in order; not reused", candidate, split.name, len(expected))
            return None
    return by_split
