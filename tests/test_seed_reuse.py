"""Seed-subset reuse (memrepro.runs.seed_reuse): a multi-seed run composes complete runs of the same config over fewer
seeds, retrieves only the rest, and writes what one uninterrupted run over all its seeds writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro import runner
from memrepro.runs.seed_reuse import candidate_subsets

CONF = Path(__file__).resolve().parents[1] / "conf"
RUN = ("dataset=locomo", "dataset.file=locomo/locomo10_two_conversations.json", "encoder=fake", "retriever=dense",
       "latency.batch1_queries=2", "latency.warmup=0", "runtime.batch_size=2", "runtime.progress=false",
       "runtime.device=cpu")


def run_locomo(*extra: str):
    """One in-process run on the two-conversation LoCoMo fixture (fake encoder, dense), with ``extra`` overrides."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return runner.run(compose(config_name="config", overrides=[*RUN, *extra]))


def _rows(folder: Path) -> list[dict]:
    """Every stored field except the clocks (latency_ms is this run's batch-1 sample, timed afresh)."""
    rows = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("latency_ms")
    return rows


def test_candidate_subsets_are_proper_ordered_and_largest_first() -> None:
    assert candidate_subsets([7, 11, 23]) == [(7, 11), (7, 23), (11, 23), (7,), (11,), (23,)]
    assert candidate_subsets([7]) == []
    assert candidate_subsets(list(range(9))) == [(s,) for s in range(9)]  # past MAX_SEEDS_FOR_SUBSETS: singles


def test_a_multi_seed_run_composes_complete_seed_runs(fixture_paths: Path, retrieved: list[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seven = run_locomo("dataset.seeds=[7]")
    eleven = run_locomo("dataset.seeds=[11]")
    retrieved.clear()
    composed = run_locomo("dataset.seeds=[7,11,23]")
    n = composed.metrics["counts"]["n_total"]
    reused = seven.metrics["counts"]["n_total"] + eleven.metrics["counts"]["n_total"]
    assert composed.metrics["timings"]["reused_queries"] == reused and 0 < reused < n
    assert len(retrieved) == (n - reused) + 2  # split seed23's queries, then the two batch-1 calls
    notes = [w for w in composed.metrics["warnings"] if "reused from a complete run" in w]
    assert len(notes) == 2 and seven.folder.name in notes[0] and eleven.folder.name in notes[1]

    monkeypatch.setenv("MEMREPRO_RESULTS_DIR", str(fixture_paths / "clean"))
    clean = run_locomo("dataset.seeds=[7,11,23]")
    assert clean.folder.name == composed.folder.name  # the same run id: tables and compare find it as usual
    assert "reused_queries" not in clean.metrics["timings"]
    assert _rows(composed.folder) == _rows(clean.folder)
    assert composed.metrics["summary"] == clean.metrics["summary"]
    assert composed.metrics["counts"] == clean.metrics["counts"]
    amortized = composed.metrics["latency"]["batched_amortized_ms_per_query"]
    parts = [seven, eleven]
    own_s = composed.metrics["timings"]["retrieve_s"] - sum(p.metrics["timings"]["retrieve_s"] for p in parts)
    assert own_s >= 0 and amortized == pytest.approx(1000.0 * composed.metrics["timings"]["retrieve_s"] / n)


def test_the_largest_complete_subset_is_taken_once(fixture_paths: Path, retrieved: list[str]) -> None:
    run_locomo("dataset.seeds=[7]")
    pair = run_locomo("dataset.seeds=[7,11]")  # itself composed from [7]
    assert pair.metrics["timings"]["reused_queries"] > 0
    composed = run_locomo("dataset.seeds=[7,11,23]")
    notes = [w for w in composed.metrics["warnings"] if "reused from a complete run" in w]
    assert len(notes) == 1 and pair.folder.name in notes[0]  # [7,11], not [7] and [11]


def test_a_damaged_or_different_seed_run_is_not_reused(fixture_paths: Path, retrieved: list[str],
                                                       caplog: pytest.LogCaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seven = run_locomo("dataset.seeds=[7]")
    run_locomo("dataset.seeds=[11]", "metrics.extra=[hit@3]")  # another config: another id, never a candidate
    rows = (seven.folder / "queries.jsonl").read_text().splitlines()
    first = json.loads(rows[0])
    first["metrics"]["mrr"] = 1.0 - first["metrics"]["mrr"]  # a silently different number
    (seven.folder / "queries.jsonl").write_text("\n".join([json.dumps(first), *rows[1:]]) + "\n")
    retrieved.clear()
    with caplog.at_level("WARNING", logger="memrepro"):
        composed = run_locomo("dataset.seeds=[7,11]")
    assert "reused_queries" not in composed.metrics["timings"]
    assert len(retrieved) == composed.metrics["counts"]["n_total"] + 2  # everything retrieved here
    assert str(seven.folder / "queries.jsonl") in caplog.text and "not reused" in caplog.text

    monkeypatch.setenv("MEMREPRO_RESULTS_DIR", str(fixture_paths / "clean"))
    assert _rows(composed.folder) == _rows(run_locomo("dataset.seeds=[7,11]").folder)


def test_overwrite_recomputes_every_split(fixture_paths: Path, retrieved: list[str]) -> None:
    run_locomo("dataset.seeds=[7]")
    retrieved.clear()
    again = run_locomo("dataset.seeds=[7,11]", "overwrite=true")
    assert "reused_queries" not in again.metrics["timings"]
    assert len(retrieved) == again.metrics["counts"]["n_total"] + 2


def test_rows_that_are_not_the_benchmarks_queries_are_not_reused(fixture_paths: Path, retrieved: list[str],
                                                                 caplog: pytest.LogCaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the manifest (a folder whose manifest was rewritten to match edited rows): the rows must still be the
    benchmark's queries of that split, with their gold ids and exclusions, in order."""
    import memrepro.runs.seed_reuse as seed_reuse

    seven = run_locomo("dataset.seeds=[7]")
    rows = [json.loads(line) for line in (seven.folder / "queries.jsonl").read_text().splitlines()]
    rows[0]["gold_ranks"] = {"D99:1": 1}
    (seven.folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(seed_reuse, "run_problem", lambda folder: None)
    with caplog.at_level("WARNING", logger="memrepro"):
        composed = run_locomo("dataset.seeds=[7,11]")
    assert "reused_queries" not in composed.metrics["timings"]
    assert "split seed7's rows are not the benchmark's" in caplog.text and str(seven.folder) in caplog.text
