"""Sweeps that cost their retrieval: the points of one run context (a sweep in one process) share the vectors and
the index, ``latency.batch1_once`` times batch-1 on the first point only, and neither changes a ranking or a
metric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro import runner
from memrepro.context import RunContext

CONF = Path(__file__).resolve().parents[1] / "conf"
RUN = ("dataset=locomo", "dataset.file=locomo/locomo10_two_conversations.json", "encoder=fake",
       "retriever=familiarity", "runtime.progress=false", "runtime.device=cpu", "latency.warmup=0")


def _cfg(*extra: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=[*RUN, *extra])


def _rows(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "latency_ms"} for row in rows]


def test_sweep_points_share_the_index_and_time_batch1_once(fixture_paths: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    original = runner.encode_and_index

    def counting(*args, **kwargs):
        built.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(runner, "encode_and_index", counting)
    sweep = RunContext()
    first = runner.run(_cfg("retriever.k=3", "latency.batch1_queries=3", "latency.batch1_once=true"), context=sweep)
    second = runner.run(_cfg("retriever.k=5", "latency.batch1_queries=3", "latency.batch1_once=true"), context=sweep)
    assert len(built) == 1  # the second point reused the vectors and the index
    assert first.metrics["latency"]["batch1"]["n"] == 3
    assert second.metrics["latency"]["batch1"]["n"] == 0
    assert second.metrics["latency"]["batch1"]["measured_on"] == first.metrics["run_id"]
    assert second.metrics["timings"]["index_reused"] == 1.0 and second.encoded == {"query": 0, "document": 0}

    # the same point computed alone (a fresh context, as in a new process): identical rankings and metrics
    alone = runner.run(_cfg("retriever.k=5", "overwrite=true"))
    assert len(built) == 2
    assert _rows(alone.folder) == _rows(second.folder)
    assert alone.metrics["summary"] == second.metrics["summary"]
