"""A small report site for the report's tests: real runs of the runner on the LoCoMo fixture with the seeded fake
encoder (dense, bm25, a three-point familiarity sweep), one of them kept and read from its kept copy, a damaged run
and a damaged kept copy (both must be left out, named), a declared comparison and a reproduction matrix."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

TWO = "dataset.file=locomo/locomo10_two_conversations.json"
FAST = ("encoder=fake", "latency.batch1_queries=0", "runtime.device=cpu", "runtime.progress=false", TWO)
SWEEP_K = (1, 3, 5)

MATRIX = """table,row,column,ours,paper,|Δ|,tolerance,verdict
fixture_table,encoder A / Method one,R@5 Basic,0.5000,0.5000,0.0000,"OK ≤ 0.0001, OKish ≤ 0.01",OK
fixture_table,encoder A / Method one,R@5 Overall,0.4950,0.5000,0.0050,"OK ≤ 0.0001, OKish ≤ 0.01",OKish
fixture_table,encoder A / Method one,R@10 Basic,0.3000,0.5000,0.2000,"OK ≤ 0.0001, OKish ≤ 0.01",FAIL
fixture_table,encoder A / Method one,R@10 Overall,0.6000,0.7000,0.1000,,not comparable: another encoder stands in
fixture_table,encoder B / Method one,R@5 Basic,,0.5100,,,missing: no offline weights
fixture_table,encoder B / Method one,R@5 Overall,,0.5200,,,missing: no offline weights
fixture_table,encoder B / Method one,R@10 Basic,0.6100 ‡,0.6000 ‡,0.0100 ‡,,not comparable: another encoder stands in ‡
fixture_table,encoder B / Method one,R@10 Overall,,0.7100,,,missing: no offline weights
second_table,a row,MRR,0.3254,0.3254,0.0000,"OK ≤ 0.0001, OKish ≤ 0.01",OK
"""
EXPERIMENTS = f"""common: [runtime.progress=false]
experiments:
  - name: fx_dense
    overrides: [dataset=locomo, retriever=dense, {', '.join(FAST)}]
  - name: fx_bm25
    overrides: [dataset=locomo, retriever=bm25, {', '.join(FAST)}]
"""
COMPARISONS = """comparisons:
  - name: fixture_bm25_vs_dense
    title: "Fixture: BM25 vs dense"
    baseline: fx_dense
    other: fx_bm25
"""


@dataclass
class Fixture:
    root: Path
    results: Path
    kept: Path
    site: Path
    dense: Path  # run folders
    bm25: Path
    sweep: list[Path]
    kept_copy: Path  # the sweep's first point, read from its kept copy only
    damaged: Path  # a run whose queries.jsonl was edited
    damaged_kept: Path  # a kept copy whose metrics.json was edited
    experiments: Path
    comparisons: Path
    warnings: list[str]


@contextmanager
def environment(**values: str) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def make_runs(root: Path, data_dir: Path) -> Fixture:
    """The runs, the kept copies, the matrix and the declaration files under ``root`` (no site yet)."""
    from memrepro import runner
    from memrepro.api import compose
    from memrepro.runs.kept import KeptRuns

    results, kept = root / "results", root / "kept"
    with environment(MEMREPRO_DATA_DIR=str(data_dir), MEMREPRO_CACHE_DIR=str(root / "cache"),
                     MEMREPRO_RESULTS_DIR=str(results), MEMREPRO_KEPT_DIR=str(kept)):
        dense = runner.run(compose("locomo", "fake", "dense", FAST)).folder
        bm25 = runner.run(compose("locomo", "fake", "bm25", FAST)).folder
        sweep = [runner.run(compose("locomo", "fake", "familiarity", [*FAST, f"retriever.k={k}"])).folder
                 for k in SWEEP_K]
    keeper = KeptRuns(results, kept)
    kept_copy = keeper.keep(sweep[0])
    shutil.rmtree(sweep[0])  # read from the kept copy only
    damaged = dense.parent / ("d" * 16)
    shutil.copytree(dense, damaged)
    lines = (damaged / "queries.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (damaged / "queries.jsonl").write_text("".join(lines[:-1]) + "{not json\n", encoding="utf-8")
    damaged_kept = keeper.keep(sweep[1]).parent / ("e" * 16)
    shutil.copytree(keeper.copy_of(sweep[1]), damaged_kept)
    metrics = damaged_kept / "metrics.json"
    metrics.write_text(metrics.read_text(encoding="utf-8").replace('"n_total"', ' "n_total"', 1), encoding="utf-8")
    tables = results / "tables"
    tables.mkdir(parents=True)
    (tables / "reproduction_matrix.csv").write_text(MATRIX, encoding="utf-8")
    (tables / "fixture_table.md").write_text("# Fixture Table 2: recall by category\n", encoding="utf-8")
    (root / "experiments.yaml").write_text(EXPERIMENTS, encoding="utf-8")
    (root / "comparisons.yaml").write_text(COMPARISONS, encoding="utf-8")
    return Fixture(root, results, kept, root / "site", dense, bm25, sweep, kept_copy, damaged, damaged_kept,
                   root / "experiments.yaml", root / "comparisons.yaml", [])


def build_site(fixture: Fixture, data_dir: Path, workers: int = 0) -> Fixture:
    from memrepro.site.build import Options, build

    with environment(MEMREPRO_DATA_DIR=str(data_dir)):
        build(Options(fixture.results, fixture.kept, fixture.site, workers=workers, resamples=500,
                      comparisons=fixture.comparisons, experiments=fixture.experiments), fixture.warnings.append)
    return fixture
