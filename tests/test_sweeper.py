"""``hydra/sweeper=memrepro`` (hydra_plugins/memrepro_sweeper): a job's config composed once per group choice and
then given its values equals Hydra's full composition of that job, key by key, hydra section included."""

from __future__ import annotations

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import OmegaConf

import memrepro.config  # noqa: F401 - registers the schemas
from hydra_plugins.memrepro_sweeper import ComposeOnceLoader
from memrepro.paths import CONFIG_DIR

JOBS = {
    "values only (an RF-Mem alpha x tau grid)": [
        ["dataset=personabench", "encoder=minilm", "retriever=rfmem_personabench", f"retriever.recollection.alpha={a}",
         f"retriever.gate.tau={t}", "latency.batch1_queries=0"] for a in (0.1, 0.5) for t in (0.15, 0.3)],
    "group choices and values mixed": [
        ["dataset=personabench", f"retriever={r}", f"retriever.recollection.alpha={a}"]
        for r in ("rfmem_personabench_table2_r5", "recollection_personabench_table2_r10") for a in (0.2, 0.9)],
    "an experiment preset, an added key, a list and a null": [
        ["+experiment=rfmem_table2_r5", "retriever.recollection.alpha=0.4", "+retriever.note=x"],
        ["dataset=locomo", "retriever=familiarity", "retriever.k=null", "dataset.seeds=[7,11]"],
        ["dataset=locomo", "retriever=familiarity", "retriever.k=3", "dataset.seeds=[23]"]],
}


@pytest.fixture(scope="module")
def loader():
    from memrepro.experiments import register_presets

    register_presets()  # as a command line that picks +experiment=<name> does
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def _master(loader):
    return loader.load_configuration(config_name="config", overrides=["hydra.job.chdir=false"],
                                     run_mode=RunMode.MULTIRUN)


def _assert_hydra_composes(loader, master, job, ours) -> None:
    """``ours`` equals Hydra's own full composition of ``job``, key by key (hydra section included, but the cwd)."""
    ours = OmegaConf.to_container(ours, resolve=False)
    hydra = OmegaConf.to_container(loader.load_sweep_config(master, job), resolve=False)
    ours["hydra"]["runtime"].pop("cwd"), hydra["hydra"]["runtime"].pop("cwd")
    assert ours == hydra, job


@pytest.mark.parametrize("kind", list(JOBS))
def test_each_job_equals_a_full_composition(loader, kind: str) -> None:
    master, fast = _master(loader), ComposeOnceLoader(loader)
    for job in JOBS[kind]:
        _assert_hydra_composes(loader, master, job, fast.load_sweep_config(master, job))
    if kind.startswith("values only"):
        assert len(fast._composed) == 1  # one composition for the whole grid


def test_a_bad_override_fails_as_hydra_fails(loader) -> None:
    master, fast = _master(loader), ComposeOnceLoader(loader)
    job = ["retriever=rfmem_personabench", "retriever.recollection.alphaa=0.3"]
    with pytest.raises(ConfigCompositionException) as hydra:
        loader.load_sweep_config(master, job)
    with pytest.raises(ConfigCompositionException) as ours:
        fast.load_sweep_config(master, job)
    assert str(ours.value) == str(hydra.value)


def test_a_launch_takes_the_config_its_batch_validation_built(loader) -> None:
    master, fast = _master(loader), ComposeOnceLoader(loader)
    jobs = JOBS["group choices and values mixed"]
    with fast.validation():
        validated = [fast.load_sweep_config(master, job) for job in jobs]
    for job, built in zip(jobs, validated):
        launched = fast.load_sweep_config(master, job)
        assert launched is built  # not composed again
        _assert_hydra_composes(loader, master, job, launched)
    assert not fast._validated  # each handed over once
    again = fast.load_sweep_config(master, jobs[0])
    assert again is not validated[0]  # a second launch of the same job composes a fresh config
    assert OmegaConf.to_container(again, resolve=False)["retriever"] == \
        OmegaConf.to_container(validated[0], resolve=False)["retriever"]


@pytest.mark.integration
def test_a_sweep_is_checked_whole_before_its_first_job_runs(tmp_path, fixtures_dir) -> None:
    """``retriever.k=3,-1,4``: the bad middle point stops the sweep before k=3 is computed, in one line."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MEMREPRO_DATA_DIR": str(fixtures_dir), "MEMREPRO_RESULTS_DIR": str(tmp_path / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp_path / "cache"), "MEMREPRO_LOG_DIR": str(tmp_path / "logs"),
           "TQDM_DISABLE": "1"}
    out = subprocess.run([sys.executable, "-m", "memrepro", "run", "-m", "dataset=locomo",
                          "dataset.file=locomo/locomo10_two_conversations.json", "encoder=fake",
                          "retriever=familiarity", "retriever.k=3,-1,4", "latency.batch1_queries=0",
                          "runtime.progress=false", "runtime.device=cpu"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith("memrepro: error: config retriever.k=-1 is not allowed")
    assert not (tmp_path / "results").exists() or not [p for p in (tmp_path / "results").rglob("*") if p.is_file()]
    assert not (tmp_path / "cache").exists()  # nothing was even encoded
