"""The declared experiment list (``conf/experiments.yaml``): parse it, and run what the tables still need.

Each entry is one condition, declared once: its name, its command line (overrides), and, for the conditions a
paper table compares, the table cell(s) it fills (``paper:`` the table, the reference number's key, the row). From
that one entry come its command (``python -m memrepro experiments``), its preset (``+experiment=<name>`` for a
single run; :func:`register_presets`), the name its runs record (``condition``) and the table row that shows its
run (``memrepro/tables/conditions.py`` finds the run whose settings equal the entry's composed config).

Each entry becomes one ``python -m memrepro run`` (``-m`` for sweeps) or ``train`` command line, run as a child
process so a failure is reported per entry and the next one still runs. Nothing is skipped here by guessing:
the runner skips a configuration whose results folder is complete, and trained models are found by recipe hash
(``train`` skips finished seeds; a run trains what is missing on demand), so a
second pass costs one dataset load and model load per entry.
"""

from __future__ import annotations

import copy
import itertools
import subprocess
import sys
import time
from functools import lru_cache
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from memrepro.errors import MemreproError
from memrepro.limits import MAX_LABEL
from memrepro.paths import CONFIG_DIR

DEFAULT_LIST = CONFIG_DIR / "experiments.yaml"
KINDS = ("run", "train")
# libyaml's safe loader where PyYAML has it: the list is read at every start (its presets), 30 ms faster in C
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
PRESET_GROUP = "experiment"  # `+experiment=<name>`: a single-run entry as a Hydra preset
CONDITION_KEY = "condition"  # the run config key that records which entry a run was launched as


class ExperimentListError(MemreproError):
    """The experiment list is malformed (names the file, the entry and the field)."""


@dataclass(frozen=True)
class PaperCell:
    """Where a condition's run stands in a paper table.

    ``reference``: the dotted key of the number it is compared with (``memrepro/reference``: the paper's numbers, or
    the official code's for a calibration table); in a table with the paper's fixed layout, the paper row it fills.
    ``column``: which of that row's runs it is, where a row has several (RF-Mem: ``k5`` / ``k10``, ``longmemeval_s``).
    ``row``: the condition whose row this run fills instead (a subset of its split seeds; of a row's runs the one
    over the most seeds is shown); unset, its own row. ``label``: the row's name when the table does not describe it
    from the run. ``missing``: what the row says while no run of it exists; unset, the row is left out until then.
    """

    table: str
    reference: str | None = None
    column: str | None = None
    row: str | None = None
    label: str | None = None
    missing: str | None = None


@dataclass(frozen=True)
class Experiment:
    name: str
    overrides: tuple[str, ...]
    kind: str = "run"
    sweep: bool = False
    optional: bool = False
    needs_model: str | None = None
    feeds: tuple[str, ...] = ()  # every table or figure that reads its runs (its paper tables included)
    cost: str = ""
    paper: tuple[PaperCell, ...] = ()

    def cells(self, table: str) -> list[PaperCell]:
        return [cell for cell in self.paper if cell.table == table]

    def points(self) -> list[list[str]]:
        """The override lists of the runs this entry makes: one, or one per point of a sweep's grid."""
        if not self.sweep:
            return [list(self.overrides)]
        choices = []
        for override in _parser().parse_overrides(list(self.overrides)):
            key = override.get_key_element()
            values = list(override.sweep_string_iterator()) if override.is_sweep_override() else \
                [override.get_value_element_as_str()]
            choices.append([f"{key}={value}" for value in values])
        return [list(point) for point in itertools.product(*choices)]

    def commands(self, common: Sequence[str]) -> list[list[str]]:
        """The child command lines; ``common`` overrides first, the entry's own win on the same key.

        Hydra composes a multirun's base config before it expands the sweep, so a choice list for a config group
        (``retriever=a,b``) together with a key inside that group (``retriever.alpha=…``) fails validation
        against the group's default. Such an entry becomes one sweep per choice.
        """
        merged = with_common(common, self.overrides) if self.kind == "run" else list(self.overrides)
        if self.kind == "run" and not self.sweep:
            merged.append(f"{CONDITION_KEY}={self.name}")  # recorded by the run; no ranking depends on it
        head = [sys.executable, "-m", "memrepro", self.kind, *(["-m"] if self.sweep else [])]
        for i, override in enumerate(merged):
            key, _, value = override.partition("=")
            if "." in key or "," not in value or not any(_key(o).startswith(key + ".") for o in merged):
                continue
            return [head + merged[:i] + [f"{key}={choice}"] + merged[i + 1:] for choice in value.split(",")]
        return [head + merged]


@dataclass
class Outcome:
    name: str
    status: str  # ran | dry-run | skipped-optional | skipped-missing-model | failed
    seconds: float = 0.0
    detail: str = ""
    output: list[str] = field(default_factory=list)


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def with_common(common: Sequence[str], own: Sequence[str]) -> list[str]:
    """A run's overrides: the list's ``common`` ones first, except where the entry sets the same key (its own win)."""
    own_keys = {_key(o) for o in own}
    return [o for o in common if _key(o) not in own_keys] + list(own)


def load_experiments(path: str | Path = DEFAULT_LIST) -> tuple[list[str], list[Experiment]]:
    """``(common overrides, experiments)`` from the list file, validated field by field."""
    path = Path(path)
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise ExperimentListError(f"{path}: cannot read the experiment list: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("experiments"), list):
        raise ExperimentListError(f"{path}: expected a mapping with an 'experiments' list")
    common = doc.get("common") or []
    if not isinstance(common, list) or not all(isinstance(o, str) for o in common):
        raise ExperimentListError(f"{path}: 'common' must be a list of override strings")
    experiments: list[Experiment] = []
    seen: set[str] = set()
    allowed = set(Experiment.__dataclass_fields__)
    for i, entry in enumerate(doc["experiments"]):
        where = f"{path}: experiment #{i}"
        if not isinstance(entry, dict):
            raise ExperimentListError(f"{where}: expected a mapping, got {type(entry).__name__}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ExperimentListError(f"{where}: field 'name' is missing or not a string")
        where = f"{path}: experiment {name!r}"
        unknown = sorted(set(entry) - allowed)
        if unknown:
            raise ExperimentListError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(allowed)}")
        if name in seen:
            raise ExperimentListError(f"{where}: field 'name' repeats an earlier entry")
        seen.add(name)
        overrides = entry.get("overrides")
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise ExperimentListError(f"{where}: field 'overrides' must be a list of strings")
        kind = entry.get("kind", "run")
        if kind not in KINDS:
            raise ExperimentListError(f"{where}: field 'kind' is {kind!r}; expected one of {KINDS}")
        paper = _paper_cells(entry.get("paper"), where)
        feeds = tuple(dict.fromkeys([*(entry.get("feeds") or ()), *(cell.table for cell in paper)]))
        values: dict[str, Any] = {**entry, "overrides": tuple(overrides), "feeds": feeds, "paper": paper}
        experiments.append(Experiment(**values))
    by_name = {e.name: e for e in experiments}
    placed: dict[tuple[str, str | None, str], str] = {}  # a fixed-layout cell -> the entry that fills it
    for experiment in experiments:
        for cell in experiment.paper:
            if cell.row is not None and not (cell.row in by_name and by_name[cell.row].cells(cell.table)):
                raise ExperimentListError(f"{path}: experiment {experiment.name!r}: paper row {cell.row!r} is not an "
                                          f"entry with a cell in table {cell.table!r}; name one that is")
            if cell.column is not None:
                if experiment.sweep:
                    raise ExperimentListError(f"{path}: experiment {experiment.name!r}: a sweep cannot fill the "
                                              f"cell {cell.reference} / {cell.column} (one run does); declare one "
                                              "entry per run")
                other = placed.setdefault((cell.table, cell.reference, cell.column), experiment.name)
                if other != experiment.name:
                    raise ExperimentListError(f"{path}: experiment {experiment.name!r}: cell {cell.reference} / "
                                              f"{cell.column} of {cell.table} is already filled by {other!r}")
    return list(common), experiments


def _paper_cells(value: Any, where: str) -> tuple[PaperCell, ...]:
    """An entry's ``paper:`` (one cell or a list of cells), each a mapping of :class:`PaperCell`'s fields."""
    if value is None:
        return ()
    cells = value if isinstance(value, list) else [value]
    allowed = set(PaperCell.__dataclass_fields__)
    parsed = []
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict) or not isinstance(cell.get("table"), str):
            raise ExperimentListError(f"{where}: paper cell #{i} must be a mapping with a 'table' name")
        unknown = sorted(set(cell) - allowed)
        if unknown:
            raise ExperimentListError(f"{where}: paper cell #{i}: unknown field(s) {unknown}; allowed: {sorted(allowed)}")
        wrong = sorted(k for k, v in cell.items() if v is not None and not isinstance(v, str))
        if wrong:
            raise ExperimentListError(f"{where}: paper cell #{i}: field(s) {wrong} must be text")
        if len(cell.get("label") or "") > MAX_LABEL:  # a row label fits on a screen; the recipe goes in a legend
            raise ExperimentListError(f"{where}: paper cell #{i}: label {cell['label']!r} has {len(cell['label'])} "
                                      f"characters; shorten it to at most {MAX_LABEL}")
        parsed.append(PaperCell(**cell))
    return tuple(parsed)


def preset_node(experiment: Experiment) -> dict[str, Any]:
    """A single-run entry as a global Hydra config: its config-group choices as ``override`` defaults, its value
    overrides as nested values, and its name under ``condition``. Composes to the entry's command line."""
    defaults: list[Any] = ["_self_"]
    node: dict[str, Any] = {CONDITION_KEY: experiment.name}
    for override in _parser().parse_overrides(list(experiment.overrides)):
        key = override.get_key_element().lstrip("+~")
        if override.is_sweep_override() or override.is_delete():
            raise ExperimentListError(f"experiment {experiment.name!r}: {override.input_line!r} cannot be a preset "
                                      "value (a sweep or a deletion)")
        if picks_a_config(override):
            defaults.append({f"override /{key}": override.value()})
            continue
        *parents, leaf = key.split(".")
        target = node
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = override.value()
    return {"defaults": defaults, **node}


@lru_cache(maxsize=1)
def _parser() -> Any:
    """Hydra's override parser, built once (building it costs about a millisecond per entry otherwise)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def picks_a_config(override: Any) -> bool:
    """Hydra's rule: an override that names a config group and sets no mapping picks one of the group's configs
    (``retriever=cascade``); any other sets a value in the composed config (``retriever.k=5``)."""
    return not isinstance(override.value(), dict) and (CONFIG_DIR / override.key_or_group).is_dir()


def composed_config(overrides: Sequence[str]) -> Any:
    """The config ``python -m memrepro run <overrides>`` composes. Hydra composes once per set of config-group
    choices (about 0.1 s each); value overrides are then applied by Hydra's own code, as the compose-once sweeper
    applies them (``hydra_plugins/memrepro_sweeper``; tested equal to a full composition on every point a paper
    table reads). A copy: callers may change it."""
    from memrepro.hydra_internals import apply_overrides_to_config

    parsed = _parser().parse_overrides(list(overrides))
    values = [o for o in parsed if not picks_a_config(o)]
    if any(o.package is not None or o.is_sweep_override() for o in values):
        return copy.deepcopy(_compose(tuple(overrides)))
    config = copy.deepcopy(_compose(tuple(o.input_line for o in parsed if picks_a_config(o))))
    apply_overrides_to_config(values, config)
    return config


@lru_cache(maxsize=None)
def _compose(overrides: tuple[str, ...]) -> Any:
    from hydra import compose, initialize_config_dir

    import memrepro.config  # noqa: F401  (registers the schemas)

    if asks_for_presets(overrides):
        register_presets()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose("config", overrides=list(overrides))


def asks_for_presets(argv: Sequence[str]) -> bool:
    """Whether a command line picks a preset (``+experiment=<name>``) or asks Hydra to complete one: only then are
    the presets registered (:func:`register_presets`), since reading the list costs more than composing a run."""
    keys = {arg.lstrip("+~").split("=", 1)[0].split("@", 1)[0] for arg in argv}
    return PRESET_GROUP in keys or bool(keys & {"-sc", "--shell-completion"})


def register_presets(path: str | Path = DEFAULT_LIST) -> tuple[str, ...]:
    """Every single-run entry of the list as ``+experiment=<name>`` (Hydra's ConfigStore, group ``experiment``);
    returns the names. A list that cannot be read registers nothing, with one warning line: every command that
    does not read the list still works, and ``experiments`` / ``tables`` refuse it with the entry and field named."""
    from hydra.core.config_store import ConfigStore

    try:
        _, experiments = load_experiments(path)
    except ExperimentListError as exc:
        print(f"memrepro: warning: {exc}; no +experiment=<name> preset is available until it is fixed",
              file=sys.stderr)
        return ()
    store = ConfigStore.instance()
    names = []
    for experiment in experiments:
        if experiment.kind == "run" and not experiment.sweep:
            store.store(group=PRESET_GROUP, name=experiment.name, node=preset_node(experiment), package="_global_")
            names.append(experiment.name)
    return tuple(names)


def _model_available(name: str) -> bool:
    from memrepro.errors import ModelNotFoundError
    from memrepro.models.resolve import resolve_model

    try:
        resolve_model(name)
        return True
    except ModelNotFoundError:
        return False


def run_experiments(experiments: Sequence[Experiment], common: Sequence[str], *, include_optional: bool = False,
                    dry_run: bool = False, env: dict[str, str] | None = None,
                    model_available: Callable[[str], bool] = _model_available,
                    echo: Callable[[str], None] = print) -> list[Outcome]:
    """Run each entry in order (child processes), streaming their output; returns one outcome per entry."""
    outcomes: list[Outcome] = []
    for experiment in experiments:
        if experiment.optional and not include_optional:
            outcomes.append(Outcome(experiment.name, "skipped-optional", detail=f"optional ({experiment.cost})"))
            echo(f"[{experiment.name}] optional, not run ({experiment.cost}); --include-optional runs it")
            continue
        if experiment.needs_model and not model_available(experiment.needs_model):
            outcomes.append(Outcome(experiment.name, "skipped-missing-model",
                                    detail=f"{experiment.needs_model} is not available offline"))
            echo(f"[{experiment.name}] skipped: model {experiment.needs_model} cannot be resolved (offline, no local "
                 "copy); set its path or go online")
            continue
        try:
            commands = experiment.commands(common)
        except ExperimentListError as exc:
            outcomes.append(Outcome(experiment.name, "failed", detail=str(exc)))
            echo(f"[{experiment.name}] failed: {exc}")
            continue
        if dry_run:
            for command in commands:
                echo(f"[{experiment.name}] {' '.join(command[1:])}")
            outcomes.append(Outcome(experiment.name, "dry-run"))
            continue
        start = time.perf_counter()
        lines: list[str] = []
        failures = []
        for command in commands:
            echo(f"[{experiment.name}] {' '.join(command[1:])}")
            with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=env) as child:
                assert child.stdout is not None
                for line in child.stdout:
                    lines.append(line.rstrip("\n"))
                    echo(f"  {line.rstrip()}")
            if child.returncode != 0:
                failures.append(f"exit code {child.returncode}: {' '.join(command[4:])}")
        seconds = time.perf_counter() - start
        if failures:
            outcomes.append(Outcome(experiment.name, "failed", seconds, "; ".join(failures), lines))
            echo(f"[{experiment.name}] failed after {seconds:.0f} s ({'; '.join(failures)})")
            continue
        skipped = sum("skipped (already complete)" in line for line in lines)
        done = sum(line.startswith("done: ") for line in lines)
        outcomes.append(Outcome(experiment.name, "ran", seconds, f"{done} computed, {skipped} already complete",
                                lines))
        echo(f"[{experiment.name}] finished in {seconds:.0f} s: {done} computed, {skipped} already complete")
    return outcomes
