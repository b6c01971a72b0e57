"""The training plan (memrepro.training.plan): printed once before anything trains, with a line per model and
stage and the total; ``run --dry-run`` / ``train --plan`` print it and train or write nothing; a cross-encoder's
training records are cached beside its model folder (a resume does not rebuild them, a damaged cache is rebuilt);
a kept run's restore line names what recomputing it costs and how."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import memrepro.config  # noqa: F401  (registers the schemas)
import memrepro.training.cross_encoder as trainer
from memrepro import runner
from memrepro.runs.kept import KeptRuns
from memrepro.retrievers.dense import DenseRetriever
from memrepro.training.cross_encoder import TrainedCrossEncoders
from memrepro.artifacts.per_seed import TrainingContext
from memrepro.training.plan import duration
from tests.test_convmemory_v1 import context  # noqa: F401 (fixture: a tiny benchmark, fake encoder, models dir)

CONF = Path(__file__).resolve().parents[1] / "conf"
TWO = "locomo/locomo10_two_conversations.json"
FIXTURE_RUN = ("dataset=locomo", f"dataset.file={TWO}", "encoder=fake", "latency.batch1_queries=1",
               "latency.warmup=0", "runtime.progress=false", "runtime.device=cpu")
TINY_V1 = ("retriever=convmemory_v1", "retriever.model.recipe.limit_queries=3")


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture()
def paths(fixture_paths: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMREPRO_MODELS_DIR", str(fixture_paths / "models"))
    return fixture_paths


@pytest.fixture()
def offline_base(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cross-encoder's base model is only named here (nothing in these tests loads it)."""
    monkeypatch.setattr(TrainedCrossEncoders, "base", lambda self, verify=False: ("unused", "test-base"))


def test_the_plan_is_printed_once_before_training_with_a_line_per_model_and_the_total(
        paths: Path, capsys: pytest.CaptureFixture) -> None:
    runner.run(_cfg(*FIXTURE_RUN, *TINY_V1, "dataset.seeds=[7,11]"))
    out = capsys.readouterr().out
    folders = sorted((paths / "models" / "convmemory_v1").glob("*/seed*"))
    assert [f.name for f in folders] == ["seed11", "seed7"]
    seed7, seed11 = folders[1], folders[0]
    header = out.index("memrepro: plan on ")
    assert f"  seed 7: convmemory_v1, train on 3 questions, about 1 min -> {seed7}\n" in out
    assert f"  seed 11: convmemory_v1, train on 3 questions, about 1 min -> {seed11}\n" in out
    assert "  total: 2 models to train, about 1 min; 0 ready\n" in out
    assert header < out.index("training convmemory_v1 for split seed7") < out.index("training convmemory_v1 for "
                                                                                    "split seed11")
    assert out.count("memrepro: plan on ") == 1 and out.count("3 questions, about") == 2  # no forecast twice

    again = runner.run(_cfg(*FIXTURE_RUN, *TINY_V1, "dataset.seeds=[7,11]", "overwrite=true"))
    assert not again.skipped and "plan on" not in capsys.readouterr().out  # nothing to train: no plan printed
    text = runner.dry_run(_cfg(*FIXTURE_RUN, *TINY_V1, "dataset.seeds=[7,11]", "overwrite=true"))
    assert f"  seed 7: convmemory_v1, ready ({seed7})" in text and "  total: 0 models to train; 2 ready" in text


def test_the_cascade_plan_lists_v1_then_record_building_then_the_cross_encoder(paths: Path,
                                                                              offline_base: None) -> None:
    text = runner.dry_run(_cfg(*FIXTURE_RUN, "dataset.seeds=[7]", "retriever=cascade",
                               "first_stage.model.recipe.limit_queries=3", "cross_encoder.recipe.limit_queries=4",
                               "runtime.torch_threads=2"))
    lines = text.splitlines()
    assert lines[0] == ("memrepro: plan on 2 CPU threads (forecasts from per-unit rates measured on a shared 2-core "
                        "CPU):")
    assert re.fullmatch(r"  seed 7: convmemory_v1, train on 3 questions, about 1 min -> .*/seed7", lines[1])
    assert re.fullmatch(r"  seed 7: cross_encoder, build records from convmemory_v1's rankings of 4 questions, about "
                        r"1 min -> .*/seed7\.records\.json", lines[2])
    assert re.fullmatch(r"  seed 7: cross_encoder, train on 4 records, about 1 min -> .*/seed7", lines[3])
    assert lines[4] == "  total: 2 models to train and 1 record set to build, about 1 min; 0 ready"
    assert lines[5].startswith("dry run: run ") and "would be computed" in lines[5]
    assert not (paths / "models").exists() and not (paths / "results").exists()


def test_forecasts_match_what_training_took_on_locomo(real_data_dir: Path, paths: Path, offline_base: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 7 (1,039 dev questions) on the 2-core CPU: v1 trains in 2-3 min idle whatever the threads (seeds 11-47:
    0.12-0.16 s a question), the records took
    about 2 min (136 s beside a test run; seed 11's 842 took 62 s idle), the cross-encoder ~13 min on 2 threads and
    1,338-1,839 s on one."""
    monkeypatch.setenv("MEMREPRO_DATA_DIR", str(real_data_dir))
    for threads, cross_encoder in ((1, range(22, 31)), (2, range(10, 17))):
        text = runner.dry_run(_cfg("dataset=locomo", "dataset.seeds=[7]", "encoder=fake", "encoder.dim=768",
                                   "retriever=cascade", "runtime.device=cpu", f"runtime.torch_threads={threads}"))
        minutes = [int(m) for m in re.findall(r"1,039 \w+, about (\d+) min", text)]
        assert len(minutes) == 3, text
        assert 2 <= minutes[0] <= 3 and 1 <= minutes[1] <= 3 and minutes[2] in cross_encoder, text


def _cli(*args: str, tmp: Path, data_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_RESULTS_DIR": str(tmp / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp / "cache"), "MEMREPRO_LOG_DIR": str(tmp / "logs"),
           "MEMREPRO_MODELS_DIR": str(tmp / "models"), "MEMREPRO_KEPT_DIR": str(tmp / "kept")}
    env.pop("MEMREPRO_PLAN_ONLY", None)
    return subprocess.run([sys.executable, "-m", "memrepro", *args], capture_output=True, text=True, env=env,
                          cwd=tmp, timeout=300)


@pytest.mark.integration
def test_dry_run_and_train_plan_train_nothing_and_write_no_run_folder(tmp_path: Path, fixtures_dir: Path) -> None:
    common = (f"dataset.file={TWO}", "encoder=fake", "runtime.device=cpu")
    dry = _cli("run", "--dry-run", *common, "dataset.seeds=[7]", *TINY_V1, tmp=tmp_path, data_dir=fixtures_dir)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "  seed 7: convmemory_v1, train on 3 questions, about 1 min -> " in dry.stdout
    assert "  total: 1 model to train, about 1 min; 0 ready" in dry.stdout
    assert re.search(r"dry run: run [0-9a-f]{16} would be computed into ", dry.stdout)
    assert "training convmemory_v1" not in dry.stdout
    plan = _cli("train", *common, "model=convmemory_v1", "retriever.model.recipe.limit_queries=3", "seeds=[7,11]",
                "--plan", tmp=tmp_path, data_dir=fixtures_dir)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "  seed 7: convmemory_v1, train on 3 questions" in plan.stdout
    assert "  seed 11: convmemory_v1, train on 3 questions" in plan.stdout
    assert "  total: 2 models to train, about 1 min; 0 ready" in plan.stdout
    assert "training convmemory_v1" not in plan.stdout and "models under" not in plan.stdout
    sweep = _cli("run", "-m", "--dry-run", *common, "dataset.seeds=[7],[11]", *TINY_V1, tmp=tmp_path,
                 data_dir=fixtures_dir)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert sweep.stdout.count(" would be computed into ") == 2
    # nothing at all: no run or model folder, and no Hydra output folder (.hydra/, run.log, multirun.yaml) either
    assert sorted(tmp_path.rglob("*")) == []


class Stop(Exception):
    """Where a fake trainer ends (a kill, or the end of what a test needs)."""


@pytest.fixture()
def record_builds(monkeypatch: pytest.MonkeyPatch, offline_base: None) -> dict:
    """Counts record-stage passes and keeps the records each training call was handed; training itself stops."""
    seen: dict = {"rankings": 0, "records": []}
    original = TrainedCrossEncoders.stage_rankings

    def counting(self, split):
        seen["rankings"] += 1
        return original(self, split)

    def stopped_training(records, *args, **kwargs):
        seen["records"].append(list(records))
        raise Stop

    monkeypatch.setattr(TrainedCrossEncoders, "stage_rankings", counting)
    monkeypatch.setattr(trainer, "train", stopped_training)
    return seen


def _cross_encoder(context: TrainingContext) -> TrainedCrossEncoders:
    ce = TrainedCrossEncoders(recipe={"limit_queries": 4}, record_stage=DenseRetriever(mode="full"))
    ce.bind(context)
    return ce


def test_a_resumed_training_reads_its_records_instead_of_rebuilding_them(context: TrainingContext,
                                                                         record_builds: dict) -> None:
    split = context.benchmark.splits[0]
    with pytest.raises(Stop):  # killed while training: the records were built and kept
        _cross_encoder(context)(split)
    assert record_builds["rankings"] == 1 and len(record_builds["records"][0]) == 4
    resumed = _cross_encoder(context)  # a new process
    steps = resumed.plan_steps(split)
    assert [(s.stage, s.done) for s in steps] == [("records", True), ("train", False)]
    assert steps[0].line() == f"  seed 7: cross_encoder, records built ({resumed.records_cache(split)})"
    with pytest.raises(Stop):
        resumed(split)
    assert record_builds["rankings"] == 1  # not ranked again
    assert record_builds["records"][1] == record_builds["records"][0]


def test_a_damaged_record_cache_is_named_and_rebuilt(context: TrainingContext, record_builds: dict,
                                                     capsys: pytest.CaptureFixture) -> None:
    split = context.benchmark.splits[0]
    with pytest.raises(Stop):
        _cross_encoder(context)(split)
    cache = _cross_encoder(context).records_cache(split)
    data = bytearray(cache.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the records
    cache.write_bytes(bytes(data))
    capsys.readouterr()
    again = _cross_encoder(context)
    assert not again.plan_steps(split)[0].done  # the plan does not count it as built either
    with pytest.raises(Stop):
        again(split)
    out = capsys.readouterr().out
    assert f"ignoring {cache}: damaged training-record cache" in out and "rebuilding it" in out
    assert record_builds["rankings"] == 2 and record_builds["records"][1] == record_builds["records"][0]
    assert again.plan_steps(split)[0].done  # rebuilt whole


def test_a_restored_kept_run_says_so_in_one_line_with_the_cost_of_recomputing_it(
        paths: Path, caplog: pytest.LogCaptureFixture) -> None:
    first = runner.run(_cfg(*FIXTURE_RUN, *TINY_V1, "dataset.seeds=[7]"))
    copy = KeptRuns(paths / "results", paths / "kept").keep(first.folder)
    shutil.rmtree(paths / "results" / "runs")
    shutil.rmtree(paths / "models")  # a fresh clone: the kept run, no models
    timings = json.loads((copy / "metrics.json").read_text())["timings"]
    recorded = duration(sum(v for k, v in timings.items() if k.endswith("_s")))
    assert "would be restored from its kept copy" in runner.dry_run(_cfg(*FIXTURE_RUN, *TINY_V1, "dataset.seeds=[7]"))
    with caplog.at_level("INFO", logger="memrepro"):
        again = runner.run(_cfg(*FIXTURE_RUN, *TINY_V1, "dataset.seeds=[7]"))
    assert again.restored and again.skipped and not (paths / "models").exists()  # nothing trained
    said = [r.getMessage() for r in caplog.records if "restored" in r.getMessage() or "skipped" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(f"restored run {first.folder.name} from its kept copy {copy}: ")
    assert (f"recomputing it takes about 1 min ({recorded} of encoding, retrieval and scoring as recorded, plus 1 "
            f"model to train, about 1 min on ") in said[0]
    assert said[0].endswith("set overwrite=true to recompute it; its run.trec is written on first use (eval of it, "
                            "or keep --restore <run folder>)")


def test_the_recorded_cost_says_how_many_vectors_came_from_the_embedding_cache() -> None:
    """A run computed on a warm cache records seconds of encoding; the cost of recomputing it says which vectors
    its time leaves out instead of presenting the seconds as the whole cost."""
    warm = SimpleNamespace(timings={"encode_documents_s": 0.5, "retrieve_s": 59.5, "resumed_queries": 0},
                           cache_hits={"query": 498, "document": 23744})
    assert runner.recorded_phases(warm) == (60.0, f"{duration(60.0)} of encoding, retrieval and scoring as "
                                            "recorded, with 24,242 vectors read from the embedding cache (encoding "
                                            "them is not counted)")
    cold = SimpleNamespace(timings={"encode_documents_s": 60.0}, cache_hits={"query": 0, "document": 0})
    assert runner.recorded_phases(cold) == (60.0, f"{duration(60.0)} of encoding, retrieval and scoring as recorded")
