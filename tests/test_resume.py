"""Resumable retrieval: a run stopped mid-way resumes from its checkpoint and writes what an uninterrupted run writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro import runner
from memrepro.errors import MemreproError
from memrepro.evaluation.freeze import FrozenRanking
from memrepro.runs.resume import RetrievalCheckpoint
from memrepro.retrievers.rfmem.retriever import RFMemRetriever

CONF = Path(__file__).resolve().parents[1] / "conf"
RUN = ("dataset=locomo", "dataset.file=locomo/locomo10_two_conversations.json", "encoder=fake",
       "retriever=rfmem", "retriever.recollection.k=3", "latency.batch1_queries=0", "runtime.batch_size=2",
       "runtime.progress=false", "runtime.device=cpu")


def _cfg(*extra: str, every_s: float = 0):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=[*RUN, f"runtime.checkpoint_every_s={every_s}", *extra])


def _rows(folder: Path) -> list[dict]:
    """Every stored field except the clocks (trace timings such as gate_ms differ between any two runs)."""
    rows = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    for row in rows:
        row["trace"] = {k: v for k, v in row["trace"].items() if not k.endswith("_ms")}
    return rows


@pytest.fixture()
def paths(fixture_paths: Path) -> Path:
    return fixture_paths


@pytest.mark.parametrize("every_s", [0, 3600])  # 3600: nothing written until the exception flushes the pending batches
def test_a_stopped_run_resumes_and_matches_an_uninterrupted_one(every_s: float, paths: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    stop_at = [4]
    original = RFMemRetriever.retrieve

    def stops_on_the_fourth_batch(self, queries, vectors, index):
        calls.append(len(queries))
        if len(calls) == stop_at[0]:
            raise RuntimeError("stopped")  # any exception, Ctrl-C too; a kill is the torn-line test below
        return original(self, queries, vectors, index)

    monkeypatch.setattr(RFMemRetriever, "retrieve", stops_on_the_fourth_batch)
    with pytest.raises(RuntimeError, match="stopped"):
        runner.run(_cfg(every_s=every_s))
    checkpoints = list((paths / "results").rglob("*.partial.jsonl"))
    assert len(checkpoints) == 1 and not list((paths / "results").rglob("COMPLETE"))
    assert len(RetrievalCheckpoint(checkpoints[0]).load().rankings) == 6  # three batches of two

    calls.clear()
    stop_at[0] = -1
    resumed = runner.run(_cfg())
    assert resumed.metrics["timings"]["resumed_queries"] == 6
    assert sum(calls) == resumed.metrics["counts"]["n_total"] - 6  # nothing retrieved twice
    assert not checkpoints[0].exists()  # gone once the run is complete

    monkeypatch.setenv("MEMREPRO_RESULTS_DIR", str(paths / "clean"))
    clean = runner.run(_cfg())
    assert clean.metrics["timings"]["resumed_queries"] == 0
    assert _rows(resumed.folder) == _rows(clean.folder)  # rankings, traces, metrics: the same
    assert resumed.metrics["summary"] == clean.metrics["summary"]
    assert {path: stats["n"] for path, stats in resumed.metrics["routing"].items()} == {
        path: stats["n"] for path, stats in clean.metrics["routing"].items()}


def test_overwrite_discards_the_checkpoint(paths: Path) -> None:
    done = runner.run(_cfg())
    stale = RetrievalCheckpoint.for_run(done.folder)
    stale.add("7", [FrozenRanking("not-a-query", ("x",), (1.0,))], [None], 1.0)
    stale.flush()
    again = runner.run(_cfg("overwrite=true"))
    assert again.metrics["timings"]["resumed_queries"] == 0 and not stale.path.exists()


def test_checkpoint_round_trip_torn_last_line_and_corrupt_line(tmp_path: Path) -> None:
    checkpoint = RetrievalCheckpoint(tmp_path / ".run.partial.jsonl", every_s=3600)
    ranking = FrozenRanking("q1", ("m2", "m1"), (0.1 + 0.2, 1 / 3))
    checkpoint.add("7", [ranking], [{"path": "recollection", "probe_mean": 0.25}], 0.5)
    assert not checkpoint.path.exists()  # buffered until every_s has passed
    checkpoint.flush()
    restored = checkpoint.load()
    assert restored.rankings[("7", "q1")] == ranking  # floats round-trip exactly
    assert restored.traces[("7", "q1")] == {"path": "recollection", "probe_mean": 0.25}
    assert restored.retrieve_s == 0.5

    with open(checkpoint.path, "a") as handle:
        handle.write('{"retrieve_s": 1.0, "queries": [{"split": "7", "query_id": "q2", "memory_i')  # killed mid-write
    assert set(checkpoint.load().rankings) == {("7", "q1")}
    assert checkpoint.path.read_bytes().endswith(b"\n")  # the torn tail is gone from the file too


def _ranking(i: int) -> FrozenRanking:
    return FrozenRanking(f"q{i}", (f"m{i}", "m0"), (0.5 + i / 7, 0.25))


def test_torn_line_then_a_second_interruption_keeps_every_complete_record(tmp_path: Path) -> None:
    """The issue's case: a torn last line, then another run appends and is killed again; the third start resumed
    nothing before (line N 'is not a checkpoint record ... delete the file')."""
    path = tmp_path / ".run.partial.jsonl"
    first = RetrievalCheckpoint(path, every_s=0)
    first.add("7", [_ranking(1)], [None], 0.1)
    with open(path, "ab") as handle:
        handle.write(b'0123\t{"retrieve_s": 1.0, "queries": [{"spl')  # killed mid-write, no newline
    second = RetrievalCheckpoint(path, every_s=0)  # the second start appends without loading first
    second.add("7", [_ranking(2)], [None], 0.1)
    with open(path, "ab") as handle:
        handle.write(b'{"torn again')
    third = RetrievalCheckpoint(path, every_s=0).load()
    assert set(third.rankings) == {("7", "q1"), ("7", "q2")}


def test_a_bad_record_mid_file_loses_only_itself(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / ".run.partial.jsonl"
    checkpoint = RetrievalCheckpoint(path, every_s=0)
    for i in range(1, 4):
        checkpoint.add("7", [_ranking(i)], [None], 0.1)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"scores":[0.', b'"scores":[9.')  # still valid JSON: a silently wrong score
    path.write_bytes(b"\n".join([b"not json", *lines]))
    with caplog.at_level("WARNING", logger="memrepro"):
        restored = RetrievalCheckpoint(path).load()
    assert set(restored.rankings) == {("7", "q1"), ("7", "q3")}  # q2's record failed its digest: retrieved again
    assert restored.rankings[("7", "q1")] == _ranking(1)
    assert str(path) in caplog.text and "line 1" in caplog.text and "line 3" in caplog.text
    assert set(RetrievalCheckpoint(path).load().rankings) == {("7", "q1"), ("7", "q3")}  # rewritten clean
    assert b"not json" not in path.read_bytes()


def test_a_second_launch_of_a_run_in_progress_is_refused(tmp_path: Path) -> None:
    first, second = (RetrievalCheckpoint(tmp_path / ".abc.partial.jsonl") for _ in range(2))
    with first.locked():
        with pytest.raises(MemreproError, match=r"\.abc\.lock: another process is computing this run"):
            with second.locked():
                pass
    with second.locked():  # released when the first finished
        assert (tmp_path / ".abc.lock").exists()
    assert not (tmp_path / ".abc.lock").exists()


def test_a_run_stopped_after_retrieval_resumes_with_the_last_splits_model(paths: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from memrepro.runs.folder import RunWriter

    def fails(self) -> None:
        raise OSError("disk full")

    commit = RunWriter.commit
    monkeypatch.setattr(RunWriter, "commit", fails)
    with pytest.raises(OSError, match="disk full"):
        runner.run(_cfg())  # every query retrieved and checkpointed, nothing written
    monkeypatch.setattr(RunWriter, "commit", commit)
    selected: list[str] = []  # a per-split retriever (cascade, fullpool_trained) needs its model for batch-1 timing
    monkeypatch.setattr(RFMemRetriever, "for_split", lambda self, split: selected.append(split.name), raising=False)
    resumed = runner.run(_cfg("latency.batch1_queries=2", "latency.warmup=0"))
    assert resumed.metrics["timings"]["resumed_queries"] == resumed.metrics["counts"]["n_total"]
    assert selected == ["seed47"] and resumed.metrics["latency"]["batch1"]["n"] == 2
