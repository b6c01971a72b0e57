"""The environment a command starts in: with ``$HOME`` unset the cache goes to the account's home directory, and
with no home at all the run stops in one line saying which variable to set (exit 2), never a resolver traceback."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import memrepro.config  # noqa: F401  (registers the schemas and the cache resolver)
from memrepro.cli.failures import reported
from memrepro.paths import CONFIG_DIR


def _cache_dir() -> str:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=["runtime.device=cpu"]).paths.cache_dir


def test_home_unset_is_the_accounts_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("MEMREPRO_CACHE_DIR", raising=False)
    assert _cache_dir() == str(Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "memrepro")
    monkeypatch.setenv("MEMREPRO_CACHE_DIR", "/somewhere/cache")
    assert _cache_dir() == "/somewhere/cache"


def test_no_home_at_all_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("MEMREPRO_CACHE_DIR", raising=False)
    # what a user without an account entry sees: "~" expands to nothing (pathlib then raises RuntimeError)
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)
    with pytest.raises(SystemExit) as stopped, reported():
        _cache_dir()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stopped.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("memrepro: error: no home directory") and "MEMREPRO_CACHE_DIR" in lines[0]
    assert "InterpolationResolutionError" not in lines[0]
