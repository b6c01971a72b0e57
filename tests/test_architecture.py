"""The package's layers: code imports only from its own layer or below, no two top-level folders or modules import
each other, directly or round a loop, and no module imports itself round a loop of modules (inside a folder too).
Imports inside functions (and under ``TYPE_CHECKING``) count: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "memrepro"

# Lowest first. A unit is a top-level folder (a subpackage) or module of memrepro.
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer) for layer in (
    # the parameter vocabulary sits here: algorithm modules declare their parameters with it
    {"errors", "types", "limits", "paths", "provenance", "reference", "hydra_internals", "files", "logs", "context",
     "parameters"},
    {"datasets", "models", "evaluation", "search"},
    {"artifacts"},  # trained-model resolution, below the retrievers that hold it and the trainers that subclass it
    {"retrievers"},
    {"training"},
    {"config", "options"},  # the schema tree gathers the declarations of every layer below
    {"runner", "stages", "runs", "export", "report", "experiments", "checks", "validate"},
    {"tables"},
    {"cli", "__main__", "__init__", "api", "compare", "site", "sweep"},
))


def unit_of_file(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_units() -> set[str]:
    return {unit_of_file(path) for path in PACKAGE.rglob("*.py")}


def unit_of_module(dotted: str, units: set[str]) -> str | None:
    """The top-level unit a dotted name belongs to: None outside memrepro, ``__init__`` for a name the package
    itself defines (``from memrepro import Retriever``)."""
    parts = dotted.split(".")
    if parts[0] != "memrepro":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in units else "__init__"


def imported_names(source: str, package: str) -> set[tuple[int, str]]:
    """``(line, dotted name)`` of every import in ``source`` (code of a module of ``package``), at any depth,
    relative imports resolved; ``from a import b`` gives ``a.b`` (b may be a submodule)."""
    found: set[tuple[int, str]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {(node.lineno, alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found |= {(node.lineno, f"{base}.{alias.name}") for alias in node.names}
    return found


def import_edges() -> list[tuple[str, str, str]]:
    """``(importing unit, imported unit, "file:line")`` for every import between two top-level units."""
    units = top_level_units()
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = unit_of_file(path)
        package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
        for line, dotted in sorted(imported_names(path.read_text(encoding="utf-8"), package)):
            target = unit_of_module(dotted, units)
            if target is not None and target != source:
                edges.append((source, target, f"{path.relative_to(PACKAGE.parent)}:{line}"))
    return edges


def layer_of(unit: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if unit in layer), None)


def test_every_top_level_unit_has_a_layer() -> None:
    assert top_level_units() - set().union(*LAYERS) == set(), "place each new top-level folder or module in LAYERS"


def test_the_walk_sees_imports_at_every_depth() -> None:
    source = ("from memrepro import runner, Retriever\n"
              "from . import base\n"
              "def f():\n"
              "    if True:\n"
              "        from memrepro.training.plan import training_plan\n")
    names = {name for _, name in imported_names(source, "memrepro.retrievers")}
    assert names == {"memrepro.runner", "memrepro.Retriever", "memrepro.retrievers.base",
                     "memrepro.training.plan.training_plan"}
    units = top_level_units()
    assert [unit_of_module(name, units) for name in sorted(names)] == ["__init__", "retrievers", "runner",
                                                                        "training"]
    edges = {(a, b) for a, b, _ in import_edges()}
    assert ("training", "retrievers") in edges and ("runner", "training") in edges  # the real tree is walked


def test_no_import_goes_up_a_layer() -> None:
    """E.g. nothing in retrievers/, models/, datasets/, evaluation/, search.py or artifacts/ imports training/,
    cli/, runner.py or tables/."""
    upward = sorted(f"{where}: {source} (layer {layer_of(source)}) imports {target} (layer {layer_of(target)})"
                    for source, target, where in import_edges()
                    if layer_of(source) is not None and layer_of(target) is not None
                    and layer_of(target) > layer_of(source))
    assert upward == []


def test_no_cycle_between_top_level_units() -> None:
    graph: dict[str, set[str]] = {}
    for source, target, _ in import_edges():
        graph.setdefault(source, set()).add(target)
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        pytest.fail(f"import cycle: {' imports '.join(reversed(exc.args[1]))}")  # args list dependencies first


def module_edges() -> dict[str, dict[str, str]]:
    """``{module: {imported module: "file:line"}}`` between the modules of memrepro (``from a import b`` names the
    module ``a.b`` when it is one, else ``a``)."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    edges: dict[str, dict[str, str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for line, dotted in sorted(imported_names(path.read_text(encoding="utf-8"), package)):
            parts = dotted.split(".")
            target = next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in paths),
                          None)
            if target is not None and target != name and not name.startswith(f"{target}."):  # a package's own
                edges.setdefault(name, {}).setdefault(target, f"{path.relative_to(PACKAGE.parent)}:{line}")
    return edges


def test_no_cycle_between_modules() -> None:
    """E.g. config.py → validate.py → config.py through a late import: a module needs the modules it imports to be
    importable without it. (A module importing its own package's ``__init__`` is not a loop: Python runs the
    package first.)"""
    edges = module_edges()
    try:
        TopologicalSorter({name: set(targets) for name, targets in edges.items()}).prepare()
    except CycleError as exc:
        loop = list(reversed(exc.args[1]))
        pytest.fail("import cycle: " + " → ".join(f"{a} ({edges[a][b]})" for a, b in zip(loop, loop[1:]))
                    + f" → {loop[-1]}")


def test_the_module_walk_finds_a_late_import_cycle() -> None:
    edges = module_edges()
    assert "memrepro.parameters" in edges.get("memrepro.config", {})  # the real tree is walked
    graph = {name: set(targets) for name, targets in edges.items()}
    graph.setdefault("memrepro.parameters", set()).add("memrepro.config")  # as a late import would
    with pytest.raises(CycleError):
        TopologicalSorter(graph).prepare()


def test_the_runner_reads_as_its_stages() -> None:
    """The run's orchestration stays a sequence of named stages: no function of runner.py or stages.py runs over
    80 lines (a longer one is a stage that wants its own name)."""
    long = []
    for name in ("runner.py", "stages.py"):
        for node in ast.walk(ast.parse((PACKAGE / name).read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.append(f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert long == []
