"""Hydra's private names are used in one module only, and have the shape that module relies on in the pinned
Hydra version (an upgrade that moves or reshapes one fails here, by name, not somewhere in a sweep)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import hydra

from memrepro import hydra_internals

ROOT = Path(__file__).resolve().parents[1]


def _imports_hydra_internals(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        lines += [node.lineno for name in names if name.startswith("hydra._internal")]
    return lines


def test_only_the_adapter_imports_hydras_private_modules():
    offenders = [f"{path.relative_to(ROOT)}:{line}"
                 for folder in ("memrepro", "hydra_plugins") for path in sorted((ROOT / folder).rglob("*.py"))
                 if path.name != "hydra_internals.py" for line in _imports_hydra_internals(path)]
    assert offenders == []
    assert _imports_hydra_internals(ROOT / "memrepro" / "hydra_internals.py")  # the check can see an import


def test_the_pinned_hydra_is_the_one_the_adapter_was_written_for():
    pin = re.search(r'"hydra-core==([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pin is not None and pin.group(1) == hydra_internals.HYDRA_VERSION == hydra.__version__


def test_each_private_name_has_the_shape_the_adapter_calls():
    from hydra._internal import utils
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname

    assert list(inspect.signature(utils.run_and_report).parameters) == ["func"]
    assert list(inspect.signature(ConfigLoaderImpl._apply_overrides_to_config).parameters) == ["overrides", "cfg"]
    assert set(inspect.signature(get_overrides_dirname).parameters) == {"overrides", "exclude_keys", "item_sep",
                                                                       "kv_sep"}
    for method in ("setup", "validate_batch_is_legal", "sweep"):
        assert callable(getattr(hydra_internals.basic_sweeper(), method))
    from hydra._internal.hydra import Hydra

    # mode_from_command_line replaces get_mode; _run_app takes its None as "the command line's mode"
    assert list(inspect.signature(Hydra.get_mode).parameters) == ["self", "config_name", "overrides"]
    assert "if mode is None:" in inspect.getsource(utils._run_app)


def test_the_mode_comes_from_the_command_line_unless_it_sets_hydra_mode(monkeypatch):
    from hydra._internal.hydra import Hydra

    asked = []
    monkeypatch.setattr(Hydra, "get_mode", lambda self, config_name, overrides: asked.append(overrides) or "RUN")
    hydra_internals.mode_from_command_line()
    assert Hydra.get_mode(None, "config", ["retriever.k=3"]) is None and asked == []  # no composition
    assert Hydra.get_mode(None, "config", ["hydra.mode=MULTIRUN"]) == "RUN" and asked == [["hydra.mode=MULTIRUN"]]


def test_locate_resolves_a_target_and_refuses_a_missing_one():
    from memrepro.retrievers.dense import DenseRetriever

    assert hydra_internals.locate("memrepro.retrievers.dense.DenseRetriever") is DenseRetriever
    for bad in ("memrepro.retrievers.dense.NoSuchThing", "no_such_package.Thing"):
        try:
            hydra_internals.locate(bad)
        except (ImportError, AttributeError, ValueError):
            continue
        raise AssertionError(f"{bad} resolved")


def test_target_refusal_asks_hydras_instantiation_policy():
    assert hydra_internals.target_refusal("memrepro.retrievers.dense.DenseRetriever") is None
    for blocked in ("os.remove", "os.system", "builtins.eval"):
        assert "blocklisted" in hydra_internals.target_refusal(blocked)
