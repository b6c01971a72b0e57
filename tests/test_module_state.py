"""No module of memrepro keeps state that decides behaviour across calls: what the runs of a command or a sweep share
lives in their :class:`memrepro.context.RunContext`, handed down, so whether a sweep point re-times batch-1 latency
or re-verifies a shard never depends on what ran before in the process. Walked from the source (AST): a module-level
dict, set or list that anything mutates, a ``global`` rebinding, and a memoized function that is not listed below
with the reason its cache cannot change a result."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "memrepro"

CONTAINER_CALLS = {"dict", "set", "list", "defaultdict", "OrderedDict", "deque", "Counter", "bytearray"}
MUTATORS = {"add", "append", "appendleft", "clear", "discard", "extend", "extendleft", "insert", "pop", "popitem",
            "popleft", "remove", "reverse", "setdefault", "sort", "update", "__setitem__", "__delitem__"}

# The one registry: an extension point whose additions never change what an existing name computes
# (register_metric refuses a name already defined).
REGISTRIES = {("memrepro.evaluation.metrics", "CUSTOM")}

# Memoized functions, each pure over inputs that do not change while a process runs (package files, types, the
# installed libraries), or a process fact; why each is safe to remember.
MEMOIZED = {
    ("memrepro.checks", "_catalogue_pins"): "the packaged data catalogue's pins",
    ("memrepro.evaluation.metrics", "_gold_combinations"): "pure function of a tuple of tuples",
    ("memrepro.experiments", "_parser"): "Hydra's override parser: a stateless object, built once",
    ("memrepro.experiments", "_compose"): "Hydra's composition of the packaged conf/ for given overrides (callers "
                                          "get a copy)",
    ("memrepro.models.convmemory_v1", "lexical_signature"): "pure function of a string",
    ("memrepro.options", "_yaml"): "a packaged conf/ file, parsed",
    ("memrepro.parameters", "field_hints"): "pure function of a class",
    ("memrepro.parameters", "declared_rules"): "pure function of a class",
    ("memrepro.provenance", "_git_commit"): "the code a process runs is what it imported",
    ("memrepro.provenance", "_package_versions"): "the libraries a process imported",
    ("memrepro.reference", "reference_numbers"): "packaged data",
    ("memrepro.reference", "calibration_numbers"): "packaged data",
    ("memrepro.reference", "paper_settings"): "packaged data",
    ("memrepro.retrievers.rfmem.compiled", "warm_up"): "numba compiles its kernels once per process by itself; "
                                                      "this only skips the tiny warm-up call afterwards",
    ("memrepro.retrievers.rfmem.kmeans_replay", "uniform_stream"): "pure function of (seed, count); read-only",
    ("memrepro.retrievers.rfmem.kmeans_replay", "first_centre"): "pure function of (seed, n)",
    ("memrepro.retrievers.rfmem.kmeans_replay", "first_centres"): "pure function of (seed, n); read-only array",
    ("memrepro.retrievers.rfmem.kmeans_replay", "sklearn_cumsum_is_float32"): "a fact of the installed "
                                                                               "scikit-learn",
    ("memrepro.site.build", "_environment"): "Jinja2 environment over the packaged templates",
    ("memrepro.tables.conditions", "_composed"): "Hydra's composition of the packaged conf/ for an entry",
    ("memrepro.tables.convmemory", "cross_encoder_presets"): "the packaged conf/cross_encoder presets",
    ("memrepro.tables.presets", "preset"): "Hydra's composition of a packaged preset",
    ("memrepro.validate", "_declares_checks"): "pure function of a class",
}


@dataclass(frozen=True)
class Found:
    module: str
    name: str
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what} of {self.module}.{self.name}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_container(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.Set, ast.List, ast.DictComp, ast.SetComp, ast.ListComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in CONTAINER_CALLS
    return False


def module_containers(tree: ast.Module) -> set[str]:
    """Names a module binds, at its top level, to a dict, set or list."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and _is_container(node.value):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _is_container(node.value):
            names.add(node.target.id)
    return names


def _aliases(tree: ast.Module, package: str) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """``({local name: (module, name)}, {local name: module})`` of a module's imports from memrepro."""
    names: dict[str, tuple[str, str]] = {}
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            if base.startswith("memrepro"):
                for alias in node.names:
                    names[alias.asname or alias.name] = (base, alias.name)
                    modules[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("memrepro") and alias.asname:
                    modules[alias.asname] = alias.name
    return names, modules


def _target(node: ast.expr, here: str, names: dict, modules: dict) -> tuple[str, str] | None:
    """The (module, name) an expression names: a bare name (this module's, or imported) or ``module.name``."""
    if isinstance(node, ast.Name):
        return names.get(node.id, (here, node.id))
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
        return modules[node.value.id], node.attr
    return None


def mutations(path: Path, source: str | None = None) -> list[tuple[tuple[str, str], str, int]]:
    """``((module, name), what, line)`` of everything in ``path`` (or ``source``, as that file) that mutates a name
    in place or rebinds a global."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
    names, modules = _aliases(tree, package)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found += [((here, name), "global rebinding", node.lineno) for name in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS):
            target = _target(node.func.value, here, names, modules)
            if target:
                found.append((target, f".{node.func.attr}()", node.lineno))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for item in targets:
                if isinstance(item, ast.Subscript):
                    target = _target(item.value, here, names, modules)
                    if target:
                        found.append((target, "item assignment", node.lineno))
                elif isinstance(node, ast.AugAssign):
                    target = _target(item, here, names, modules)
                    if target:
                        found.append((target, "augmented assignment", node.lineno))
    return found


def module_state() -> list[Found]:
    sources = sorted(PACKAGE.rglob("*.py"))
    containers = {(module_name(p), n) for p in sources for n in module_containers(ast.parse(p.read_text()))}
    out = []
    for path in sources:
        for target, what, line in mutations(path):
            if (target in containers and target not in REGISTRIES) or what == "global rebinding":
                out.append(Found(*target, f"{path.relative_to(PACKAGE.parent)}:{line}", what))
    return out


def memoized() -> set[tuple[str, str]]:
    """``(module, function)`` of every function memoized with ``functools.cache`` / ``lru_cache``."""
    def is_memo(node: ast.expr) -> bool:
        node = node.func if isinstance(node, ast.Call) else node
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        return name in {"cache", "lru_cache"}

    out = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(is_memo, node.decorator_list)):
                out.add((module_name(path), node.name))
            elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and is_memo(node.value.func)
                  and isinstance(node.value.func, ast.Call)):  # name = functools.lru_cache(...)(function)
                out |= {(module_name(path), t.id) for t in node.targets if isinstance(t, ast.Name)}
    return out


def test_no_module_level_container_is_mutated() -> None:
    found = module_state()
    assert not found, ("module-level state (move it into memrepro.context.RunContext, or an object its caller "
                       "owns):\n" + "\n".join(map(str, found)))


def test_every_memoized_function_is_listed_with_its_reason() -> None:
    assert memoized() == set(MEMOIZED), "a memoized function must be pure over unchanging inputs: list it and why"


def test_the_walk_finds_each_kind_of_mutation() -> None:
    source = ("import memrepro.models.cache as cache_module\n"
              "from memrepro.runner import HELD\n"
              "SEEN: set[str] = set()\n"
              "BY_KEY = {}\n"
              "FLAG = None\n"
              "def f(key):\n"
              "    global FLAG\n"
              "    SEEN.add(key)\n"
              "    BY_KEY[key] = 1\n"
              "    HELD.append(key)\n"
              "    cache_module.VERIFIED.clear()\n")
    found = {(target, what) for target, what, _ in mutations(PACKAGE / "_walk_probe.py", source)}
    assert found == {(("memrepro._walk_probe", "FLAG"), "global rebinding"),
                     (("memrepro._walk_probe", "SEEN"), ".add()"),
                     (("memrepro._walk_probe", "BY_KEY"), "item assignment"),
                     (("memrepro.runner", "HELD"), ".append()"),
                     (("memrepro.models.cache", "VERIFIED"), ".clear()")}
    assert module_containers(ast.parse(source)) == {"SEEN", "BY_KEY"}
