"""Results, kept runs, models and logs resolve from the project folder (``$MEMREPRO_HOME``, else the checkout),
never from the current folder: the console script called from another folder finds the checkout's kept run and
restores it, writing nothing where it was called from; outside any checkout every command first says in one line
where it will write and how to point it elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memrepro.paths import FOLDERS, folder_path, outside_notice, project_root
from memrepro.runs.folder import COMPLETE

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "memrepro"  # the console script pyproject installs
TWO = "locomo/locomo10_two_conversations.json"  # one dev + one test conversation per seed
FAST = ("dataset=locomo", f"dataset.file={TWO}", "retriever=dense", "encoder=fake", "latency.batch1_queries=0",
        "runtime.progress=false", "runtime.device=cpu")
NOTICE = "memrepro: not inside a memrepro checkout and $MEMREPRO_HOME is unset"


def _code(at: Path, as_checkout: bool) -> Path:
    """This checkout's code, copied to ``at``: a checkout (package, conf/, hydra_plugins/ side by side) or, not as a
    checkout, the package alone with its configs inside it, as a wheel installs it."""
    at.mkdir(parents=True)
    for name in ("memrepro", "hydra_plugins", *(("conf",) if as_checkout else ())):
        shutil.copytree(REPO / name, at / name, symlinks=as_checkout, ignore=shutil.ignore_patterns("__pycache__"))
    return at


def _env(code: Path, data_dir: Path, cache: Path, **folders: str) -> dict[str, str]:
    """No folder variable set (the test's own project folder neither) but the ones given; ``code`` imported."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEMREPRO_")}
    return {**env, "PYTHONPATH": str(code), "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_CACHE_DIR": str(cache),
            "MEMREPRO_AUTO_DOWNLOAD": "0", "TQDM_DISABLE": "1", **folders}


def _call(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    out = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _tree(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*"))


def test_the_project_folder_is_memrepro_home_else_the_checkout(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for variable, _ in FOLDERS.values():
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MEMREPRO_HOME", str(tmp_path / "home"))
    assert project_root() == (tmp_path / "home", "$MEMREPRO_HOME")
    assert folder_path("results_dir") == tmp_path / "home" / "results"
    assert folder_path("kept_dir") == tmp_path / "home" / "results" / "kept"
    monkeypatch.setenv("MEMREPRO_MODELS_DIR", "elsewhere")  # a variable of its own wins, read as a typed path
    assert folder_path("models_dir") == Path("elsewhere")
    monkeypatch.delenv("MEMREPRO_HOME")
    assert project_root() == (REPO, "checkout")  # this package's checkout, whatever the current folder
    assert folder_path("log_dir") == REPO / "outputs" and outside_notice() is None
    assert set(FOLDERS) == {"data_dir", "results_dir", "kept_dir", "models_dir", "log_dir", "cache_dir"}


@pytest.mark.integration
def test_the_console_script_from_another_folder_restores_the_checkouts_kept_run(tmp_path: Path,
                                                                              fixtures_dir: Path) -> None:
    if not SCRIPT.is_file():
        pytest.skip(f"no console script at {SCRIPT} (the project is not installed in this environment)")
    checkout = _code(tmp_path / "checkout", as_checkout=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _env(checkout, fixtures_dir, tmp_path / "cache")
    python = [sys.executable, "-m", "memrepro"]
    _call([*python, "run", *FAST], cwd=checkout, env=env)  # computed in the checkout, then kept there
    (folder,) = [marker.parent for marker in (checkout / "results" / "runs").rglob(COMPLETE)]
    _call([*python, "keep", str(folder)], cwd=checkout, env=env)
    shutil.rmtree(checkout / "results" / "runs")

    out = _call([str(SCRIPT), "run", *FAST], cwd=elsewhere, env=env)
    assert f"restored run {folder.name} from its kept copy {checkout / 'results' / 'kept'}" in out.stdout
    assert "wrote " not in out.stdout and NOTICE not in out.stderr  # restored, not computed
    assert (folder / COMPLETE).is_file()  # back in the checkout's results folder
    assert _tree(elsewhere) == []  # nothing where it was called from: no results/, no outputs/
    assert list((checkout / "outputs").rglob("run.log"))  # its log in the checkout's outputs/


@pytest.mark.integration
def test_outside_any_checkout_it_says_first_where_it_writes(tmp_path: Path, fixtures_dir: Path) -> None:
    installed = _code(tmp_path / "site", as_checkout=False)
    work = tmp_path / "work"
    work.mkdir()
    env = _env(installed, fixtures_dir, tmp_path / "cache")
    out = _call([sys.executable, "-m", "memrepro", "run", *FAST, "--dry-run"], cwd=work, env=env)
    first = out.stderr.splitlines()[0]
    assert first.startswith(NOTICE) and f"go under {work};" in first and "set MEMREPRO_HOME=<folder>" in first
    assert f"would be computed into {Path('results', 'runs', 'locomo', 'dense')}" in out.stdout
    assert _tree(work) == []  # a dry run writes nothing, here neither
    homed = _call([sys.executable, "-m", "memrepro", "run", *FAST, "--dry-run"], cwd=work,
                  env={**env, "MEMREPRO_HOME": str(tmp_path / "project")})
    assert NOTICE not in homed.stderr and str(tmp_path / "project" / "results" / "runs") in homed.stdout
    assert NOTICE not in _call([sys.executable, "-m", "memrepro", "run", "--help"], cwd=work, env=env).stderr


@pytest.mark.integration
@pytest.mark.real_data
def test_the_repositorys_kept_run_is_restored_from_another_folder(tmp_path: Path, real_data_dir: Path) -> None:
    """The issue a user met: `memrepro run` of LoCoMo dense mpnet from outside the checkout recomputed it."""
    kept = REPO / "results" / "kept" / "locomo" / "dense" / "all-mpnet-base-v2"
    if not SCRIPT.is_file() or not kept.is_dir():
        pytest.skip("no console script, or no kept LoCoMo dense mpnet run in this checkout")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _env(REPO, real_data_dir, tmp_path / "cache", MEMREPRO_RESULTS_DIR=str(tmp_path / "results"),
               MEMREPRO_LOG_DIR=str(tmp_path / "logs"))  # the checkout's kept runs, written to this test's folders
    out = _call([str(SCRIPT), "run", "dataset=locomo", "retriever=dense", "encoder=mpnet"], cwd=elsewhere, env=env)
    assert "restored run " in out.stdout and f"from its kept copy {kept}" in out.stdout
    assert list((tmp_path / "results" / "runs" / "locomo" / "dense" / "all-mpnet-base-v2").glob(f"*/{COMPLETE}"))
    assert _tree(elsewhere) == []
