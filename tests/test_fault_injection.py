"""Fault injection through the real CLI (subprocesses, fake encoder): kill -9 / SIGTERM / SIGINT at each phase
(encode, a shard write, retrieve, commit), damaged cache shards, torn checkpoints, a read-only results directory.
Each rerun must finish with rankings byte-identical to an uninterrupted run (``run.trec`` and every row's ``top``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrepro.runs.folder import COMPLETE

pytestmark = pytest.mark.integration  # every test here runs the CLI in a subprocess

WRAPPER = Path(__file__).with_name("fault_wrapper.py")
REPO = Path(__file__).resolve().parents[1]
RUN = ("run", "dataset=locomo", "dataset.file=locomo/locomo10_two_conversations.json", "encoder=fake",
       "retriever=familiarity", "retriever.k=5", "latency.batch1_queries=0", "runtime.batch_size=1",
       "runtime.checkpoint_every_s=0", "runtime.progress=false", "runtime.device=cpu")


def _env(tmp: Path, data_dir: Path) -> dict[str, str]:
    return {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_RESULTS_DIR": str(tmp / "results"),
            "MEMREPRO_CACHE_DIR": str(tmp / "cache"), "MEMREPRO_LOG_DIR": str(tmp / "logs"), "TQDM_DISABLE": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def memrepro(tmp: Path, data_dir: Path, *extra: str, fault: tuple[str, str, int] | None = None
             ) -> subprocess.CompletedProcess:
    head = [sys.executable, str(WRAPPER), fault[0], fault[1], str(fault[2]), "--"] if fault else \
        [sys.executable, "-m", "memrepro"]
    return subprocess.run([*head, *RUN, *extra], capture_output=True, text=True, env=_env(tmp, data_dir), cwd=tmp,
                          timeout=300)


def _run_folder(tmp: Path) -> Path:
    runs = [p.parent for p in (tmp / "results").rglob(COMPLETE) if not any(
        part.startswith(".") for part in p.relative_to(tmp / "results").parts)]
    assert len(runs) == 1, runs
    return runs[0]


def _rankings(folder: Path) -> tuple[bytes, list]:
    rows = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    return (folder / "run.trec").read_bytes(), [(r["split"], r["query_id"], r["top"]) for r in rows]


def _leftovers(tmp: Path) -> list[str]:
    """Temporary folders, checkpoints and half-written files left in the results tree."""
    root = tmp / "results"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name.startswith(".")
                  and not p.name.endswith(".lock")) if root.exists() else []


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> tuple[bytes, list]:
    tmp = tmp_path_factory.mktemp("uninterrupted")
    out = memrepro(tmp, fixtures_dir)
    assert out.returncode == 0, out.stderr
    return _rankings(_run_folder(tmp))


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("memrepro:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


SLOW = pytest.mark.slow  # each case is two or three CLI processes (~15 s here); one per phase stays in `not slow`


@pytest.mark.parametrize("point,sig,after,code", [
    pytest.param("encode", "KILL", 1, -9, marks=SLOW),
    pytest.param("shard", "KILL", 2, -9, marks=SLOW),
    ("retrieve", "KILL", 3, -9),
    ("retrieve", "TERM", 3, 143),
    pytest.param("retrieve", "INT", 3, 130, marks=SLOW),
    pytest.param("encode", "TERM", 2, 143, marks=SLOW),
    pytest.param("commit-before", "KILL", 1, -9, marks=SLOW),
])
def test_interrupted_run_reruns_to_identical_rankings(point: str, sig: str, after: int, code: int, tmp_path: Path,
                                                      fixtures_dir: Path, reference) -> None:
    stopped = memrepro(tmp_path, fixtures_dir, fault=(point, sig, after))
    assert stopped.returncode == code, stopped.stderr[-2000:]
    if code > 0:
        assert "rerun the same command to resume" in _one_line(stopped.stderr)
    assert not [p for p in (tmp_path / "results").rglob(COMPLETE)
                if not any(s.startswith(".") for s in p.relative_to(tmp_path / "results").parts)]
    if point == "retrieve":
        assert list((tmp_path / "results").rglob("*.partial.jsonl")), "the finished batches were saved"
    rerun = memrepro(tmp_path, fixtures_dir)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _rankings(_run_folder(tmp_path)) == reference
    assert _leftovers(tmp_path) == []
    if point == "retrieve":
        metrics = json.loads((_run_folder(tmp_path) / "metrics.json").read_text())
        assert metrics["timings"]["resumed_queries"] >= 2


def test_kill_between_the_two_renames_of_an_overwrite(tmp_path: Path, fixtures_dir: Path, reference) -> None:
    assert memrepro(tmp_path, fixtures_dir).returncode == 0
    stopped = memrepro(tmp_path, fixtures_dir, "overwrite=true", fault=("commit", "KILL", 1))
    assert stopped.returncode == -9
    hidden = _leftovers(tmp_path)
    assert any(".old-" in h for h in hidden) and any(".tmp-" in h for h in hidden)  # both with COMPLETE inside

    from memrepro.tables.runs import complete_runs

    assert complete_runs(tmp_path / "results") == []  # temporary names are never listed as runs
    rerun = memrepro(tmp_path, fixtures_dir)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _rankings(_run_folder(tmp_path)) == reference
    assert _leftovers(tmp_path) == []  # cleaned by the next run


@SLOW
def test_torn_checkpoint_after_two_interruptions(tmp_path: Path, fixtures_dir: Path, reference) -> None:
    assert memrepro(tmp_path, fixtures_dir, fault=("retrieve", "KILL", 2)).returncode == -9
    checkpoint = next((tmp_path / "results").rglob("*.partial.jsonl"))
    with open(checkpoint, "ab") as handle:
        handle.write(b'0' * 64 + b'\t{"retrieve_s": 0.1, "queries": [{"split"')  # a write torn by the kill
    assert memrepro(tmp_path, fixtures_dir, fault=("retrieve", "KILL", 2)).returncode == -9
    with open(checkpoint, "ab") as handle:
        handle.write(b'{"torn')
    rerun = memrepro(tmp_path, fixtures_dir)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _rankings(_run_folder(tmp_path)) == reference
    metrics = json.loads((_run_folder(tmp_path) / "metrics.json").read_text())
    assert metrics["timings"]["resumed_queries"] == 4  # both interrupted runs' complete records were kept


def test_damaged_cache_shard_is_reencoded(tmp_path: Path, fixtures_dir: Path, reference) -> None:
    assert memrepro(tmp_path, fixtures_dir).returncode == 0
    shard = max((tmp_path / "cache").rglob("*.npy"), key=lambda p: p.stat().st_size)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = b"\x7f" * 64
    shard.write_bytes(bytes(data))
    rerun = memrepro(tmp_path, fixtures_dir, "overwrite=true")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert str(shard.with_suffix("")) in rerun.stdout + rerun.stderr  # named, with its path
    assert _rankings(_run_folder(tmp_path)) == reference
    metrics = json.loads((_run_folder(tmp_path) / "metrics.json").read_text())
    assert metrics["cache_quarantined"] and metrics["encoded"]["document"] + metrics["encoded"]["query"] > 0


@pytest.mark.parametrize("damage", ["empty metrics.json", pytest.param("truncated metrics.json", marks=SLOW),
                                    pytest.param("corrupt queries.jsonl line", marks=SLOW)])
def test_damaged_results_are_recomputed(damage: str, tmp_path: Path, fixtures_dir: Path, reference) -> None:
    assert memrepro(tmp_path, fixtures_dir).returncode == 0
    folder = _run_folder(tmp_path)
    if damage == "empty metrics.json":
        (folder / "metrics.json").write_text("")
    elif damage == "truncated metrics.json":
        (folder / "metrics.json").write_text((folder / "metrics.json").read_text()[:200])
    else:
        lines = (folder / "queries.jsonl").read_text().splitlines()
        lines[3] = lines[3][:40]
        (folder / "queries.jsonl").write_text("\n".join(lines) + "\n")
    rerun = memrepro(tmp_path, fixtures_dir)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    name = "queries.jsonl" if "queries" in damage else "metrics.json"
    assert f"{folder / name}" in rerun.stdout + rerun.stderr and "recomputed" in rerun.stdout + rerun.stderr
    assert _rankings(_run_folder(tmp_path)) == reference


def test_read_only_results_directory(tmp_path: Path, fixtures_dir: Path, reference) -> None:
    if os.geteuid() == 0:  # root writes anywhere: the read-only file system's error is injected instead
        stopped = memrepro(tmp_path, fixtures_dir, fault=("results", "EROFS", 1))
    else:
        (tmp_path / "results" / "runs").mkdir(parents=True)
        os.chmod(tmp_path / "results" / "runs", 0o555)
        stopped = memrepro(tmp_path, fixtures_dir)
        os.chmod(tmp_path / "results" / "runs", 0o755)
    assert stopped.returncode == 1
    line = _one_line(stopped.stderr)
    assert "run failed: cannot use" in line and str(tmp_path / "results") in line
    assert not list((tmp_path / "results").rglob(COMPLETE))
    rerun = memrepro(tmp_path, fixtures_dir)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _rankings(_run_folder(tmp_path)) == reference


@pytest.mark.parametrize("point,where", [("npy", "cache"), ("fsync", "results")])
def test_a_full_disk_names_the_file_and_leaves_nothing_half_written(tmp_path: Path, fixtures_dir: Path, reference,
                                                                    point: str, where: str) -> None:
    stopped = memrepro(tmp_path, fixtures_dir, fault=(point, "ENOSPC", 1))
    assert stopped.returncode == 1
    line = _one_line(stopped.stderr)
    assert f"run failed: cannot use {tmp_path / where}" in line and "No space left on device" in line
    assert "unknown path" not in line
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.name.endswith(".tmp")]  # no .npy.tmp survives
    # the retrieval checkpoint stays (the rerun resumes from it); no temporary folder or file does
    assert [p for p in _leftovers(tmp_path) if not p.endswith(".partial.jsonl")] == []
    assert not list((tmp_path / "results").rglob(COMPLETE))
    rerun = memrepro(tmp_path, fixtures_dir)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _rankings(_run_folder(tmp_path)) == reference
