"""Config files and the code they name are checked before anything loads: a YAML file with a ``!!python/...`` tag
(or broken syntax) and a ``_target_`` Hydra's instantiation policy refuses each end in one line naming the file
and line or the key, exit 2, nothing written and nothing run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro.errors import ConfigError
from memrepro.paths import CONFIG_DIR
from memrepro.validate import validate_run_config, validate_train_config

FAST = ("dataset=locomo", "dataset.file=locomo/locomo10_two_conversations.json", "encoder=fake",
        "latency.batch1_queries=0", "runtime.progress=false", "runtime.device=cpu")


def _memrepro(tmp: Path, data_dir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_RESULTS_DIR": str(tmp / "results"),
                   "MEMREPRO_CACHE_DIR": str(tmp / "cache"), "MEMREPRO_LOG_DIR": str(tmp / "logs"),
                   "TQDM_DISABLE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "memrepro", *args], capture_output=True, text=True,
                          env=environment, cwd=tmp, timeout=300)


def _one_line(out: subprocess.CompletedProcess, tmp: Path) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, (out.returncode, out.stderr[-2000:])
    assert lines[0].startswith("memrepro: error:") and "internal error" not in lines[0]
    assert not (tmp / "results").exists() and not (tmp / "cache").exists()
    return lines[0]


@pytest.mark.integration
def test_a_python_tag_in_a_config_file_is_one_line_naming_file_and_line(tmp_path: Path, fixtures_dir: Path) -> None:
    group = tmp_path / "conf" / "retriever"
    group.mkdir(parents=True)
    marker = tmp_path / "ran"
    (group / "evil.yaml").write_text(f"defaults:\n  - dense_schema\n  - _self_\n"
                                     f"name: !!python/object/apply:os.system [\"touch {marker}\"]\n")
    out = _memrepro(tmp_path, fixtures_dir, "run", "--config-dir", str(tmp_path / "conf"), *FAST, "retriever=evil")
    line = _one_line(out, tmp_path)
    assert f"{group / 'evil.yaml'}, line 4" in line and "!!python/object/apply:os.system is not allowed" in line
    assert not marker.exists()
    (group / "broken.yaml").write_text("defaults:\n  - dense_schema\n  - _self_\nname: [unclosed\n")
    broken = _memrepro(tmp_path, fixtures_dir, "run", "--config-dir", str(tmp_path / "conf"), *FAST,
                       "retriever=broken")
    assert f"{group / 'broken.yaml'}, line 5" in _one_line(broken, tmp_path)


@pytest.mark.integration
def test_a_blocklisted_target_from_a_config_file_is_one_line(tmp_path: Path, fixtures_dir: Path) -> None:
    group = tmp_path / "conf" / "retriever"
    group.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (group / "blocked.yaml").write_text(f"_target_: os.remove\npath: {victim}\n")
    out = _memrepro(tmp_path, fixtures_dir, "run", "--config-dir", str(tmp_path / "conf"), *FAST, "retriever=blocked")
    line = _one_line(out, tmp_path)
    assert "config retriever._target_='os.remove' is not allowed" in line and "blocklisted" in line
    assert victim.read_text() == "keep me\n"


def _composed(config: str, *overrides: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config, overrides=["runtime.device=cpu", *overrides])


@pytest.mark.parametrize("override,key", [
    ("retriever._target_=os.remove", "retriever._target_"),
    ("first_stage._target_=os.system", "first_stage._target_"),  # read by the cascade presets
])
def test_a_blocklisted_target_is_refused_by_the_config_check(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_run_config(_composed("config", override))
    assert caught.value.key == key and "blocklisted" in caught.value.allowed


def test_an_external_retriever_naming_a_blocklisted_target_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"retriever\.target='builtins\.eval'"):
        validate_run_config(_composed("config", "retriever=external", "retriever.target=builtins.eval"))


def test_train_checks_targets_too() -> None:
    with pytest.raises(ConfigError, match=r"retriever\._target_='shutil\.rmtree'"):
        validate_train_config(_composed("train", "retriever._target_=shutil.rmtree"))
