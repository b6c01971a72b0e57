"""The CLI end to end on the tiny LoCoMo fixture with the fake encoder: results layout, skip, overwrite, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrepro.evaluation.freeze import FrozenRanking
from memrepro.evaluation.metrics import compute_metrics
from memrepro.runs.folder import COMPLETE, read_queries
from memrepro.types import Query

pytestmark = pytest.mark.integration  # every test here runs the CLI in a subprocess


def memrepro(*args: str, tmp: Path, data_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_RESULTS_DIR": str(tmp / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp / "cache"), "MEMREPRO_LOG_DIR": str(tmp / "logs"), "TQDM_DISABLE": "1"}
    return subprocess.run([sys.executable, "-m", "memrepro", *args], capture_output=True, text=True, env=env,
                          cwd=tmp, timeout=300)


FAST = ("encoder=fake", "latency.batch1_queries=2", "latency.warmup=1")
TWO = "dataset.file=locomo/locomo10_two_conversations.json"  # one dev + one test conversation per seed


def only_run(tmp: Path) -> Path:
    runs = [p.parent for p in (tmp / "results").rglob(COMPLETE)]
    assert len(runs) == 1, runs
    return runs[0]


def test_help_lists_subcommands(tmp_path: Path, fixtures_dir: Path) -> None:
    out = memrepro("--help", tmp=tmp_path, data_dir=fixtures_dir)
    assert out.returncode == 0 and "run " in out.stdout and "data" in out.stdout
    bad = memrepro("frobnicate", tmp=tmp_path, data_dir=fixtures_dir)
    assert bad.returncode == 2 and "unknown command 'frobnicate'" in bad.stderr


def test_run_writes_complete_results_then_skips_then_overwrites(tmp_path: Path, fixtures_dir: Path) -> None:
    first = memrepro("run", "dataset=locomo", "retriever=dense", TWO, *FAST, tmp=tmp_path, data_dir=fixtures_dir)
    assert first.returncode == 0, first.stderr
    folder = only_run(tmp_path)
    assert folder.parts[-4:-1] == ("locomo", "dense", "fake-bow-64d")
    assert {p.name for p in folder.iterdir()} == {"config.yaml", "queries.jsonl", "run.trec", "metrics.json",
                                                  COMPLETE}
    metrics = json.loads((folder / "metrics.json").read_text())
    # conv-26 (4 queries) or conv-30 (4 queries) is the test conversation of each of the 5 seeds
    assert metrics["counts"]["n_total"] == 20 and metrics["summary"]["n"] == 20
    provenance = metrics["provenance"]
    for key in ("config_hash", "data_sha256", "git", "versions", "hardware", "tie_rule", "files"):
        assert provenance[key], key
    assert metrics["encoded"]["document"] == 12 and metrics["latency"]["batch1"]["n"] == 2
    assert metrics["counts"]["loader"]["dropped_empty_evidence"] == 1

    # every per-query metric is recomputable from the stored gold ranks without rerunning
    for row in read_queries(folder):
        query = Query(row["query_id"], "", row["episode_id"], tuple(row["gold"]), row["category"])
        rebuilt = FrozenRanking.from_gold_ranks(row["query_id"], row["gold_ranks"], row["n_returned"])
        assert compute_metrics({query.id: rebuilt}, [query], list(row["metrics"]))[query.id] == row["metrics"]
    trec = (folder / "run.trec").read_text().splitlines()
    assert trec and len(trec[0].split()) == 6

    second = memrepro("run", "dataset=locomo", "retriever=dense", TWO, *FAST, tmp=tmp_path, data_dir=fixtures_dir)
    assert second.returncode == 0 and "skipped" in second.stdout

    third = memrepro("run", "dataset=locomo", "retriever=dense", TWO, *FAST, "overwrite=true", tmp=tmp_path,
                     data_dir=fixtures_dir)
    assert third.returncode == 0, third.stderr
    redone = json.loads((only_run(tmp_path) / "metrics.json").read_text())
    assert redone["encoded"] == {"query": 0, "document": 0}  # re-scored from the embedding cache
    assert redone["summary"] == metrics["summary"]


def test_multirun_sweep(tmp_path: Path, fixtures_dir: Path) -> None:
    out = memrepro("run", "-m", "retriever=familiarity", "retriever.k=1,3", TWO, *FAST, tmp=tmp_path,
                   data_dir=fixtures_dir)
    assert out.returncode == 0, out.stderr
    assert len(list((tmp_path / "results").rglob(COMPLETE))) == 2
    # the points share one run context: the second reuses the first's vectors and index
    timings = [json.loads(path.read_text())["timings"] for path in (tmp_path / "results").rglob("metrics.json")]
    assert sorted(t.get("index_reused", 0.0) for t in timings) == [0.0, 1.0]
    # its first line, before any point loads anything: how many points, over what, and what they share
    assert out.stdout.splitlines()[0] == ("sweep: 2 points (retriever.k: 2); run one after another in this process: "
                                          "they share each dataset and encoder, loaded once, and their vectors and "
                                          "index, encoded and built once")
    # one summary table at the end (swept parameter x primary metrics), written beside the sweep's logs; each
    # point says one line, not its full table
    assert out.stdout.count("| k ") == 1 and out.stdout.count("| rows ") == 0
    summary = out.stdout[out.stdout.index("sweep summary (2 points)"):]
    assert [line.split("|")[1].strip() for line in summary.splitlines() if line.startswith("| ")][1:] == ["1", "3"]
    [sweep_dir] = [p.parent for p in (tmp_path / "logs").rglob("multirun.yaml")]
    assert (sweep_dir / "sweep.md").read_text().count("\n| ") == 3  # header, two points
    assert (sweep_dir / "sweep.csv").read_text().startswith("retriever.k,recall_list@10,")

    again = memrepro("run", "-m", "retriever=familiarity", "retriever.k=1,3", TWO, *FAST, tmp=tmp_path,
                     data_dir=fixtures_dir)
    assert again.returncode == 0 and again.stdout.count("skipped (complete)") == 2  # skipped points are rows too


def test_missing_data_is_one_clear_error(tmp_path: Path) -> None:
    out = memrepro("run", *FAST, tmp=tmp_path, data_dir=tmp_path / "nowhere")
    assert out.returncode == 2  # bad input
    assert "data file not found" in out.stderr and "MEMREPRO_DATA_DIR" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob(COMPLETE))


@pytest.mark.real_data
def test_fake_encoder_run_on_real_locomo(tmp_path: Path, real_data_dir: Path) -> None:
    out = memrepro("run", *FAST, tmp=tmp_path, data_dir=real_data_dir)
    assert out.returncode == 0, out.stderr
    metrics = json.loads((only_run(tmp_path) / "metrics.json").read_text())
    assert metrics["counts"]["n_total"] == 4955 and metrics["counts"]["n_scored"] == 4955
    assert [s["n"] for s in metrics["summary"]["splits"].values()] == [938, 1135, 937, 990, 955]


@pytest.mark.parametrize("dataset,overrides,n_total,n_scored", [
    ("longmemeval", ("dataset.variant=oracle", "dataset.source=longmemeval/longmemeval_tiny.json",
                     "retriever=familiarity", "retriever.k=50"), 4, 2),
    ("personabench", ("dataset.communities=[community_0]", "retriever=familiarity", "retriever.k=5"), 4, 3),
    ("personamem", ("retriever=familiarity", "retriever.k=10", "retriever.min_sim=0.3"), 2, 0),
])
def test_every_benchmark_runs_end_to_end_on_fixtures(dataset, overrides, n_total, n_scored, tmp_path: Path,
                                                     fixtures_dir: Path) -> None:
    out = memrepro("run", f"dataset={dataset}", *overrides, *FAST, "dataset.allow_unverified=true", tmp=tmp_path,
                   data_dir=fixtures_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    metrics = json.loads((only_run(tmp_path) / "metrics.json").read_text())
    assert (metrics["counts"]["n_total"], metrics["counts"]["n_scored"]) == (n_total, n_scored)
    assert metrics["returned"]["mean_items"] is not None
    if n_scored:
        assert set(metrics["summary"]["pooled"]) == set(metrics["metric_names"])
