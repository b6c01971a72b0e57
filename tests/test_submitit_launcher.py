"""Sweeps through Hydra's submitit launcher (``hydra/launcher=submitit_local``): every point runs as its own
submitit job (a separate process), a re-launch skips the complete runs and a deleted run is recomputed alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrepro.runs.folder import COMPLETE

pytestmark = pytest.mark.integration  # every test here runs the CLI in a subprocess

# one dev + one test conversation per seed; two sweep points -> two distinct run folders
SWEEP = ("-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
         "dataset=locomo", "dataset.file=locomo/locomo10_two_conversations.json",
         "retriever=familiarity", "retriever.k=1,3", "encoder=fake",
         "latency.batch1_queries=0", "runtime.progress=false")


def launch(tmp: Path, data_dir: Path, label: str) -> tuple[subprocess.CompletedProcess, Path]:
    """One sweep launch; each gets its own log dir so its submitit folders and job logs can be told apart."""
    log_dir = tmp / "logs" / label
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_RESULTS_DIR": str(tmp / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp / "cache"), "MEMREPRO_LOG_DIR": str(log_dir), "TQDM_DISABLE": "1"}
    out = subprocess.run([sys.executable, "-m", "memrepro", "run", *SWEEP], capture_output=True, text=True,
                         env=env, cwd=tmp, timeout=300)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-4000:])
    return out, log_dir


def job_outputs(log_dir: Path) -> list[str]:
    """The stdout of every submitit job of the launch (proof that the submitit launcher ran the points)."""
    sweeps = [p.parent for p in log_dir.glob("multirun/*/*/.submitit")]  # hydra.sweep.dir from conf/config.yaml
    assert len(sweeps) == 1, sweeps
    outs = sorted(sweeps[0].glob(".submitit/*/*_0_log.out"))
    assert len(outs) == 2, outs
    return [p.read_text() for p in outs]


def run_folders(tmp: Path) -> dict[str, Path]:
    return {p.parent.name: p.parent for p in (tmp / "results" / "runs").rglob(COMPLETE)}


def snapshot(folders: dict[str, Path]) -> dict[str, tuple[bytes, int]]:
    return {name: ((f / "metrics.json").read_bytes(), (f / "metrics.json").stat().st_mtime_ns)
            for name, f in folders.items()}


def test_submitit_local_sweep_runs_skips_and_resumes(tmp_path: Path, fixtures_dir: Path) -> None:
    _, logs = launch(tmp_path, fixtures_dir, "first")
    outputs = job_outputs(logs)
    assert all("Job completed successfully" in o and "\ndone: " in o for o in outputs), outputs
    [summary] = logs.glob("multirun/*/*/sweep.csv")  # the points' outcomes came back from their processes
    assert summary.read_text().count("\n") == 3
    folders = run_folders(tmp_path)
    assert len(folders) == 2 and all(f.parts[-4:-1] == ("locomo", "familiarity", "fake-bow-64d")
                                     for f in folders.values())
    ks = sorted(json.loads((f / "metrics.json").read_text())["retriever"]["k"] for f in folders.values())
    assert ks == [1, 3]
    before = snapshot(folders)

    # re-launching the finished sweep: both jobs skip, nothing is rewritten, no new run folder appears
    _, logs = launch(tmp_path, fixtures_dir, "again")
    outputs = job_outputs(logs)
    assert all("skipped (already complete)" in o for o in outputs), outputs
    assert run_folders(tmp_path) == folders and snapshot(folders) == before
    assert not [p for p in (tmp_path / "results" / "runs").rglob("*") if ".tmp-" in p.name]

    # resume: a lost run is recomputed, the other one is skipped and left untouched
    lost, kept = sorted(folders)
    summary = json.loads(before[lost][0])["summary"]
    for path in sorted(folders[lost].iterdir()):
        path.unlink()
    folders[lost].rmdir()
    _, logs = launch(tmp_path, fixtures_dir, "resume")
    outputs = job_outputs(logs)
    assert sorted("skipped (already complete)" in o for o in outputs) == [False, True], outputs
    # printed relative to the folder the jobs run in (the launch's working directory)
    assert sum(f"done: {folders[lost].relative_to(tmp_path)}" in o for o in outputs) == 1
    assert run_folders(tmp_path) == folders
    after = snapshot(folders)
    assert after[kept] == before[kept]
    assert json.loads(after[lost][0])["summary"] == summary
