"""``hydra/sweeper=memrepro`` (the default of ``python -m memrepro run -m``): Hydra's basic sweeper, with each
job's config composed once per set of config-group choices instead of twice per job, the config a batch's
validation built handed to its launch instead of being built again, and every job's config checked
(:func:`memrepro.validate.validate_command_config`) before the first job runs, so that a bad value in a sweep
stops it before anything is computed, not when its point comes. The jobs a launcher runs in this process share one
:class:`memrepro.context.RunContext` (the task is called with it: datasets and encoders loaded once, vectors and
index built once, files hashed once); a launcher that runs them elsewhere gives each process its own. At the end,
the sweep summary
(:mod:`memrepro.sweep`): one table of the swept parameters and the primary metrics, printed and written as
``sweep.md`` / ``sweep.csv`` in the sweep folder.

Why: Hydra composes every job's config from the YAML files, once to validate the batch and once to launch it
(about 0.3 s each here), while a point of an RF-Mem α × τ sweep retrieves in about 0.07 s; composition was most
of a sweep's wall time. Overrides that pick no config group (``retriever.recollection.alpha=0.3``)
do not change the defaults list, so the config of a job differs from the config composed for its group choices
only by those values, applied by Hydra's own override code (through ``memrepro.hydra_internals``) in the same order
and followed by the same ``hydra.overrides`` / ``override_dirname`` bookkeeping. Anything else (a group choice,
a package override, a dict value) composes as Hydra does. The result equals a full composition (tested key by
key on sweeps of every kind we use).

Lives in ``hydra_plugins`` because Hydra only instantiates sweepers from that package.
"""


import copy
import math
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from memrepro.context import RunContext
from memrepro.hydra_internals import apply_overrides_to_config, basic_sweeper, overrides_dirname
from memrepro.validate import validate_command_config


class ComposeOnceLoader:
    """Wraps Hydra's config loader; only ``load_sweep_config`` differs (everything else is delegated)."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self._parser = OverridesParser.create()
        # -> (master, composed); the master is kept so its id is never reused
        self._composed: Dict[tuple, Tuple[DictConfig, DictConfig]] = {}
        self._validated: Dict[tuple, Tuple[DictConfig, DictConfig]] = {}  # the same, for a batch's job configs
        self._validating = False  # inside ``validation()``

    def __getattr__(self, name: str) -> Any:
        loader = self.__dict__.get("_loader")  # absent while unpickling (a launcher that pickles its context)
        if loader is None:
            raise AttributeError(name)
        return getattr(loader, name)

    def __getstate__(self) -> dict:
        return {"_loader": self._loader}  # the composed configs stay in the process that composed them

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["_loader"])

    def _sets_a_value(self, override: Any) -> bool:
        """Hydra's own rule (``defaults_list.Overrides``): an override that names no config group, or sets a dict,
        is applied to the composed config; any other picks a config (composed as Hydra does)."""
        return isinstance(override.value(), dict) or not self._loader.repository.group_exists(override.key_or_group)

    @contextmanager
    def validation(self) -> Iterator[None]:
        """Around a batch's validation: the configs built inside are kept for the batch's launch. The previous
        batch's are dropped first (left by a launcher that ran its jobs in other processes)."""
        self._validated.clear()
        self._validating = True
        try:
            yield
        finally:
            self._validating = False

    def job_config(self, master_config: DictConfig, sweep_overrides: List[str]) -> DictConfig:
        """A job's config to read, not to launch: the one its batch's validation kept, else composed afresh."""
        kept = self._validated.get((id(master_config), tuple(sweep_overrides)))
        return kept[1] if kept is not None else self._load(master_config, sweep_overrides)

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: List[str]) -> DictConfig:
        key = (id(master_config), tuple(sweep_overrides))
        if not self._validating and key in self._validated:
            return self._validated.pop(key)[1]
        cfg = self._load(master_config, sweep_overrides)
        if self._validating:
            self._validated[key] = (master_config, cfg)
        return cfg

    def _load(self, master_config: DictConfig, sweep_overrides: List[str]) -> DictConfig:
        parsed = self._parser.parse_overrides(list(sweep_overrides))
        values = [o for o in parsed if not o.is_hydra_override() and self._sets_a_value(o)]
        if not values or any(o.package is not None or o.is_sweep_override() for o in values):
            return self._loader.load_sweep_config(master_config, list(sweep_overrides))
        choices = [o.input_line for o in parsed if not any(o is v for v in values)]
        key = (id(master_config), tuple(choices))
        if key not in self._composed:  # Hydra's composition, for the group choices only
            self._composed[key] = (master_config, self._loader.load_sweep_config(master_config, choices))
        cfg = copy.deepcopy(self._composed[key][1])
        apply_overrides_to_config(values, cfg)
        app = [o for o in parsed if not o.is_hydra_override()]
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in app]  # in the order given, as Hydra records them
            cfg.hydra.job.override_dirname = overrides_dirname(
                app, kv_sep=cfg.hydra.job.config.override_dirname.kv_sep,
                item_sep=cfg.hydra.job.config.override_dirname.item_sep,
                exclude_keys=cfg.hydra.job.config.override_dirname.exclude_keys)
        OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
        return cfg


class SharedContext:
    """A sweep's task: the command's own (``main(cfg, context)``), given the sweep's one run context. Pickled for a
    launcher that runs jobs in other processes, it leaves the context behind: each process makes its own."""

    def __init__(self, task: TaskFunction) -> None:
        self.task = task
        self.context = RunContext()

    def __call__(self, cfg: DictConfig) -> Any:
        return self.task(cfg, self.context)

    def __getstate__(self) -> dict:
        return {"task": self.task}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["task"])


class ComposeOnceSweeper(basic_sweeper()):  # the class Hydra's discovery made
    def sweep(self, arguments: List[str]) -> Any:
        """The plan line, Hydra's sweep, then the sweep summary (:mod:`memrepro.sweep`) of the points that returned
        a run."""
        from memrepro.sweep import summarize

        print(self.plan(arguments), flush=True)  # before the first point loads anything (seconds, minutes)
        returns = super().sweep(arguments)
        summarize([(job.overrides, job.return_value) for batch in returns for job in batch],
                  Path(self.config.hydra.sweep.dir))
        return returns

    def plan(self, arguments: List[str]) -> str:
        """``sweep: 20 points (retriever.recollection.alpha: 5 × retriever.gate.tau: 4); ...``: how many points,
        over which values, and what they share."""
        params = [f"{key}={value}" for key, value in (self.params or {}).items()] + list(arguments)
        swept = [(o.get_key_element(), len(list(o.sweep_string_iterator())))
                 for o in OverridesParser.create().parse_overrides(params) if o.is_sweep_override()
                 and o.is_discrete_sweep()]
        points = math.prod(n for _, n in swept)
        axes = f" ({' × '.join(f'{key}: {n}' for key, n in swept)})" if swept else ""
        launcher = type(self.launcher).__name__
        shared = ("run one after another in this process: they share each dataset and encoder, loaded once, and "
                  "their vectors and index, encoded and built once" if launcher == "BasicLauncher" else
                  f"launched by {launcher}, each in its own process (they share the embedding cache)")
        return f"sweep: {points} point{'s' if points != 1 else ''}{axes}; {shared}"

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        context = HydraContext(config_loader=ComposeOnceLoader(hydra_context.config_loader),
                               callbacks=hydra_context.callbacks)
        super().setup(hydra_context=context, task_function=SharedContext(task_function), config=config)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        loader = self.hydra_context.config_loader
        with loader.validation():
            super().validate_batch_is_legal(batch)
        if self.batch_index == 1:  # before the first job runs: every job of the sweep, not one batch at a time
            for overrides in (job for jobs in self.overrides for job in jobs):
                validate_command_config(loader.job_config(self.config, list(overrides)))


@dataclass
class ComposeOnceSweeperConf:
    _target_: str = "hydra_plugins.memrepro_sweeper.ComposeOnceSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="memrepro", node=ComposeOnceSweeperConf,
                             provider="memrepro")
