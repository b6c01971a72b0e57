"""``scripts/gpu_check.sh``'s CPU fallback path runs and prints its table (the CUDA path has not run yet)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # every test here runs the CLI in a subprocess

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.real_model
def test_gpu_check_cpu_fallback_prints_the_table(tmp_path: Path) -> None:
    env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh"), "--cpu-fallback"], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "no CUDA here: CPU fallback" in out.stdout and "| check | CPU | GPU | note |" in out.stdout
    for check in ("(a) LoCoMo dense", "(b) cross-encoder", "(c) exact top-10", "(d) mpnet encode"):
        assert check in out.stdout
    assert "identical top-10 1.000" in out.stdout
