"""`make bench` runs: every bench entry point once, on tiny inputs, in a subprocess (they rot unseen otherwise:
bench_metrics and `bench scale --locomo` once failed on a renamed loader argument). Speeds are never asserted;
what is asserted is what each bench checks itself before printing a number (identical rankings, equal metrics)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]


def bench(args: list[str], tmp: Path, data_dir: Path | str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_CACHE_DIR": str(tmp / "cache"),
           "MEMREPRO_RESULTS_DIR": str(tmp / "results"), "MEMREPRO_ALLOW_UNVERIFIED": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_bench_metrics_on_the_fixture(tmp_path: Path, fixtures_dir: Path) -> None:
    out = bench(["scripts/bench_metrics.py", "--encoder", "fake", "--repeats", "1"], tmp_path, fixtures_dir)
    assert "max |Δ| vs reference = 0.0e+00" in out.stdout  # the NumPy metrics equal ir-measures on every row
    assert "| metrics phase (run timing) |" in out.stdout
    # the LoCoMo no-regression point of `bench scale` reads the vectors the run above cached
    out = bench(["-m", "memrepro", "bench", "scale", "--sizes", "1000", "--queries", "10", "--dim", "32", "--repeats",
                 "1", "--no-memory", "--locomo", "--encoder", "fake"], tmp_path, fixtures_dir)
    assert "LoCoMo pools" in out.stdout and "; identical" in out.stdout


def test_bench_scale_small_synthetic(tmp_path: Path, fixtures_dir: Path) -> None:
    report = tmp_path / "scale.json"
    bench(["-m", "memrepro", "bench", "scale", "--sizes", "1500", "--queries", "20", "--dim", "32", "--repeats", "1",
           "--no-memory", "--json", str(report)], tmp_path, fixtures_dir)
    (row,) = json.loads(report.read_text())["rows"]
    assert set(row["ms_per_query"]) == {"memrepro", "faiss", "numpy"}
    assert {m: a["identical_where_no_near_tie"] for m, a in row["agreement"].items()} == {"faiss": 1.0, "numpy": 1.0}


def test_bench_search_synthetic_pools(tmp_path: Path) -> None:
    out = bench(["scripts/bench_search.py", "--repeats", "1", "--dim", "32", "--data-dir", str(tmp_path / "none")],
                tmp_path, tmp_path / "none")
    assert "memrepro batched (torch)" in out.stdout


def test_bench_rfmem_engines_agree(tmp_path: Path) -> None:
    out = bench(["scripts/bench_rfmem.py", "--scenario", "personabench", "--faithful-queries", "5", "--repeat", "1",
                 "--dim", "32"], tmp_path, tmp_path)
    rows = [line for line in out.stdout.splitlines() if line.startswith("personabench ")]
    assert len(rows) == 2 and all(line.split()[-2:] == ["100.0%", "100.0%"] for line in rows), out.stdout


def test_bench_rerank_on_the_fixture(tmp_path: Path, fixtures_dir: Path) -> None:
    out = bench(["scripts/bench_rerank.py", "--queries", "3", "--rounds", "1", "--pool", "20",
                 "--encoder", "all-MiniLM-L6-v2", "--data-dir", str(fixtures_dir)], tmp_path, fixtures_dir)
    rows = [line for line in out.stdout.splitlines() if line.startswith(("| batch-1 |", "| amortized |"))]
    assert len(rows) == 2, out.stdout


@pytest.mark.parametrize("sweeper", ["memrepro", "basic"])
def test_bench_sweep_on_the_fixture(sweeper: str, tmp_path: Path, fixtures_dir: Path) -> None:
    out = bench(["scripts/bench_sweep.py", "--sweeper", sweeper, "dataset=locomo", "encoder=fake",
                 "dataset.file=locomo/locomo10_two_conversations.json", "retriever=familiarity", "retriever.k=1,3"],
                tmp_path, fixtures_dir)
    assert out.stdout.startswith(f"2 points, wall") and f"sweeper {sweeper}" in out.stdout, out.stdout
    assert "| retrieval (batched) |" in out.stdout
    # the summary at the end of the sweep, timed (memrepro's sweeper writes it; Hydra's basic one does not)
    assert ("| later calls (40 points) |" in out.stdout) == (sweeper == "memrepro"), out.stdout


@pytest.mark.real_model
@pytest.mark.slow
def test_probe_v1_teacher_golden_and_on_the_fixture(tmp_path: Path, fixtures_dir: Path) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    from probe_v1_teacher import teacher_stats

    import numpy as np

    gold = np.zeros(100, dtype=bool)
    gold[[3, 90]] = True
    scores = -np.arange(100, dtype=float)  # the pool's own order
    assert teacher_stats(scores, gold) == (0.25, 1.0, 1.0)  # first gold 4th; one in the top 16, one in the bottom 64
    scores[3] = -1000.0  # the teacher ranks gold 3 last: the first gold is now 90 (89 others above it)
    assert teacher_stats(scores, gold) == (1 / 90, 0.0, 1.0)
    assert teacher_stats(-np.arange(50, dtype=float), gold[:50]) == (0.25, 1.0, 1.0)  # 50: top and bottom overlap
    assert teacher_stats(-np.arange(100, dtype=float), gold, top_k=3, bottom_k=5) == (0.25, 0.0, 0.0)

    from sentence_transformers import CrossEncoder

    from memrepro.models.resolve import resolve_model

    teacher = tmp_path / "ce" / "seed7"
    CrossEncoder(resolve_model("all-MiniLM-L6-v2").path, num_labels=1).save(str(teacher))
    out_file = tmp_path / "probe.jsonl"
    out = bench(["scripts/probe_v1_teacher.py", "--seed", "7", "--questions", "4", "--teacher-model",
                 str(tmp_path / "ce" / "seed{seed}"), "--out", str(out_file),
                 "dataset.file=locomo/locomo10_two_conversations.json", "encoder=fake", "runtime.device=cpu"],
                tmp_path, fixtures_dir)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert json.loads(out_file.read_text()) == result
    assert 1 <= result["questions"] <= 4 and result["seed"] == 7
    for teacher_name in ("dense", "cross_encoder"):
        assert 0 < result[f"{teacher_name}_mrr_pool"] <= 1 and 0 <= result[f"{teacher_name}_gold_in_top16"] <= 1
