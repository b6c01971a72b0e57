"""docs/extending.md "Adding a retriever": the example retriever (one module + one YAML, nothing registered) runs
through the real runner and CLI, and the page shows exactly the checked-in files."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from memrepro import runner
from memrepro.api import compose
from memrepro.runs.identity import algorithm_versions

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "extending"
MODULE = EXAMPLE / "recency_dense.py"
PRESET = EXAMPLE / "conf" / "retriever" / "recency_dense.yaml"
FAST = ["dataset.file=locomo/locomo10_two_conversations.json", "latency.batch1_queries=0", "runtime.progress=false",
        "runtime.device=cpu"]


def _section() -> str:
    text = (REPO / "docs" / "extending.md").read_text(encoding="utf-8")
    return text.split("## Adding a retriever", 1)[1].split("\n## ", 1)[0]


def test_readme_shows_the_checked_in_example() -> None:
    blocks = dict((lang, body) for lang, body in re.findall(r"```(\w+)\n(.*?)```", _section(), re.S))
    assert blocks["python"] == MODULE.read_text(encoding="utf-8")
    assert blocks["yaml"] == PRESET.read_text(encoding="utf-8")
    assert len(MODULE.read_text().splitlines()) + len(PRESET.read_text().splitlines()) <= 35


def _tops(folder: Path) -> list:
    return [row["top"] for row in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())]


def test_the_example_runs_through_the_runner(tmp_path: Path, fixtures_dir: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))  # the CLI imports it from the working directory
    monkeypatch.setenv("MEMREPRO_DATA_DIR", str(fixtures_dir))
    monkeypatch.setenv("MEMREPRO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MEMREPRO_RESULTS_DIR", str(tmp_path / "results"))
    search_path = f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]"

    cfg = compose("locomo", "fake", "recency_dense", [search_path, *FAST])
    assert algorithm_versions(cfg.retriever) == {"recency_dense.RecencyDense": 1}  # a fix to it splits run ids
    outcome = runner.run(cfg)
    assert outcome.record.provenance.algorithm_versions == {"recency_dense.RecencyDense": 1}
    assert outcome.folder.parts[-4:-1] == ("locomo", "recency_dense", "fake-bow-64d")
    assert outcome.record.retriever == {"name": "recency_dense", "weight": 0.1}
    assert outcome.record.summary.n == outcome.record.counts.n_scored > 0

    # behaviour, not YAML: without the bonus it ranks exactly as dense; with it, later memories move up
    plain = runner.run(compose("locomo", "fake", "recency_dense", [search_path, *FAST, "retriever.weight=0"]))
    dense = runner.run(compose("locomo", "fake", "dense", FAST))
    assert _tops(plain.folder) == _tops(dense.folder) != _tops(outcome.folder)


@pytest.mark.integration
def test_the_readme_command_runs_from_the_example_folder(tmp_path: Path, fixtures_dir: Path) -> None:
    line = next(line for line in _section().splitlines() if line.startswith("python -m memrepro run dataset="))
    args = shlex.split(line)[4:]  # after `python -m memrepro run`, as a shell passes them
    args = [("encoder=fake" if a.startswith("encoder=") else a) for a in args]  # no model download in tests
    env = {"MEMREPRO_DATA_DIR": str(fixtures_dir), "MEMREPRO_RESULTS_DIR": str(tmp_path / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp_path / "cache"), "MEMREPRO_LOG_DIR": str(tmp_path / "logs")}
    out = subprocess.run([sys.executable, "-m", "memrepro", "run", *args, *FAST], capture_output=True, text=True,
                         cwd=EXAMPLE, env={**os.environ, **env}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert list((tmp_path / "results" / "runs" / "locomo" / "recency_dense").rglob("COMPLETE"))
