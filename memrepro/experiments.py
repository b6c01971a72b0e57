"""The declared experiment list (``conf/experiments.yaml``): parse it, and run what the tables still need.

Each entry becomes one ``python -m memrepro run`` (``-m`` for sweeps) or ``train`` command line, run as a child
process so a failure is reported per entry and the next one still runs. Nothing is skipped here by guessing:
the runner skips a configuration whose results folder is complete, and trained models are found by recipe hash
(``train`` skips finished seeds; a run trains what is missing on demand), so a
second pass costs one dataset load and model load per entry.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from memrepro.errors import MemreproError
from memrepro.paths import CONFIG_DIR

DEFAULT_LIST = CONFIG_DIR / "experiments.yaml"
KINDS = ("run", "train")


class ExperimentListError(MemreproError):
    """The experiment list is malformed (names the file, the entry and the field)."""


@dataclass(frozen=True)
class Experiment:
    name: str
    overrides: tuple[str, ...]
    kind: str = "run"
    sweep: bool = False
    optional: bool = False
    needs_model: str | None = None
    feeds: tuple[str, ...] = ()
    cost: str = ""

    def commands(self, common: Sequence[str]) -> list[list[str]]:
        """The child command lines; ``common`` overrides first, the entry's own win on the same key.

        Hydra composes a multirun's base config before it expands the sweep, so a choice list for a config group
        (``retriever=a,b``) together with a key inside that group (``retriever.alpha=…``) fails validation
        against the group's default. Such an entry becomes one sweep per choice.
        """
        own = list(self.overrides)
        own_keys = {_key(o) for o in own}
        merged = [o for o in common if _key(o) not in own_keys] + own if self.kind == "run" else own
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


def load_experiments(path: str | Path = DEFAULT_LIST) -> tuple[list[str], list[Experiment]]:
    """``(common overrides, experiments)`` from the list file, validated field by field."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
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
        values: dict[str, Any] = {**entry, "overrides": tuple(overrides), "feeds": tuple(entry.get("feeds") or ())}
        experiments.append(Experiment(**values))
    return list(common), experiments


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
