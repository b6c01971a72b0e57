"""An installed wheel carries the Hydra configs: ``run`` / ``eval`` / ``train`` find them inside the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from memrepro.paths import CONFIG_DIR, PACKAGE_DIR

REPO = Path(__file__).resolve().parents[1]


def test_configs_are_read_from_inside_the_package() -> None:
    assert CONFIG_DIR.parent == PACKAGE_DIR and (CONFIG_DIR / "config.yaml").is_file()


@pytest.mark.integration
def test_wheel_contains_every_config(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: setuptools writes build/ and *.egg-info beside the sources it builds
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "memrepro", "conf", "hydra_plugins"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name, **({"symlinks": True, "ignore": shutil.ignore_patterns("__pycache__")}
                                           if copy is shutil.copytree else {}))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                          "-q", "-w", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("memrepro-*.whl")
    packed = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("memrepro/conf/")}
    expected = {f"memrepro/conf/{p.relative_to(REPO / 'conf').as_posix()}" for p in (REPO / "conf").rglob("*.yaml")}
    assert expected and expected <= packed
    # the sweeper conf/config.yaml selects (Hydra instantiates sweepers only from the hydra_plugins package)
    assert "hydra_plugins/memrepro_sweeper/__init__.py" in zipfile.ZipFile(wheel).namelist()
