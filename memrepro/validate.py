"""Config values checked where they enter: every key of a composed config with a range, before anything loads or
runs.

The declarations are the schemas' (:mod:`memrepro.config` gathers them; the vocabulary and the one walk over a
node are :mod:`memrepro.parameters`). Here: the check of a whole composed config (:func:`validate_run_config`,
which :func:`memrepro.runner.run` calls, so the CLI, ``memrepro.evaluate``, sweeps and experiments all get it),
where a node of any type (a cascade's first stage) is checked against the schema of the code it names, and a key of
another option of its group is named with those options (:func:`memrepro.options.unknown_config_key`).

A value outside its range fails in one line naming the key, the value and what is allowed (:class:`ConfigError`)
instead of running to a COMPLETE result that means something else, or a traceback from deep inside.

The schemas refuse unknown keys and wrong types at composition, except a key added with ``+key=value``, which Hydra
applies even to a structured config: :func:`check_closed_schema` refuses that (the run config is a closed schema: an
added key is ignored or reaches a constructor, and it changes the run id).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Mapping

from omegaconf import DictConfig, OmegaConf

from memrepro.config import EvalConfig, RunConfig, TrainConfig, schema_for_target
from memrepro.errors import ConfigError, MissingValueError
from memrepro.options import unknown_config_key
from memrepro.parameters import declared_rules, field_hints, plain
from memrepro.parameters import check_node as check_declared


def check_node(values: Mapping[str, Any], schema: type, prefix: str, closed: bool = True) -> None:
    """:func:`memrepro.parameters.check_node` over a node of a composed config: a node of any type is checked
    against the schema of the code it names, and an unknown key names the options of its group that have it."""
    check_declared(values, schema, prefix, closed, schema_for=schema_for_target, unknown=unknown_config_key)


def validate_retriever(node: Any, prefix: str = "retriever") -> None:
    """A config node that names its code (``_target_``): a retriever, a first stage, a model resolver. Checked
    against the schema registered for that target; a target without one (your own retriever) is not checked."""
    values = plain(node)
    if isinstance(values, Mapping):
        target = values.get("_target_")
        schema = schema_for_target(target) if isinstance(target, str) else None
        if schema is not None:
            check_node(values, schema, prefix)


@functools.cache
def _declares_checks(schema: type) -> bool:
    """Whether a node of ``schema`` has anything to check beyond its types (a rule, a nested node that may)."""
    hints = field_hints(schema)
    return bool(declared_rules(schema)) or hasattr(schema, "check_together") or any(
        hints[spec.name] is Any or (dataclasses.is_dataclass(hints[spec.name]) and _declares_checks(hints[spec.name]))
        for spec in dataclasses.fields(schema))


def _check_config(cfg: DictConfig, default: type) -> None:
    """Every node of a composed config that declares checks, against its schema (the root's own, else
    ``default``); each node is resolved on its own, so a setting nothing checks (a path) is never resolved here.
    The command's own settings come before the group nodes, which may read them by interpolation
    (``encoder.device: ${runtime.device}``): a bad value is named where it is set."""
    root = OmegaConf.get_type(cfg)
    schema = root if dataclasses.is_dataclass(root) else default
    hints = field_hints(schema)
    values = {}
    for spec in sorted(dataclasses.fields(schema), key=lambda spec: hints[spec.name] is Any):
        hint = hints[spec.name]
        if spec.name not in cfg or OmegaConf.is_missing(cfg, spec.name):
            continue
        if spec.name in declared_rules(schema) or hint is Any or (
                dataclasses.is_dataclass(hint) and _declares_checks(hint)):
            values[spec.name] = plain(cfg[spec.name])
    check_node(values, schema, "", closed=False)


def validate_device(key: str, value: str) -> None:
    """``cuda`` asked for where torch sees no GPU: a config error, not a traceback from the first tensor."""
    if isinstance(value, str) and value.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(key, value, "auto or cpu on this machine (torch sees no CUDA device)")


def _get(cfg: Any, dotted: str) -> tuple[bool, Any]:
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, (DictConfig, Mapping)) or part not in node:
            return False, None
        node = node[part]
    return True, plain(node)


def check_closed_schema(node: Any, prefix: str = "") -> None:
    """Every key of a config node typed by a schema dataclass is one of its fields (nodes without a schema, such
    as ``retriever.params`` of ``retriever=external``, take any key); raises
    :class:`memrepro.errors.UnknownNameError` naming the key and the nearest fields."""
    if not isinstance(node, DictConfig):
        return
    schema = OmegaConf.get_type(node)
    fields = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    for key, value in node.items_ex(resolve=False):  # interpolations stay unresolved: each node is walked once
        if not prefix and key == "hydra":  # Hydra's own node, in a job's config until the job starts
            continue
        name = f"{prefix}.{key}" if prefix else str(key)
        if fields is not None and key not in fields:
            raise unknown_config_key(name, schema)
        check_closed_schema(value, name)


def check_targets(cfg: DictConfig) -> None:
    """Every ``_target_`` (and an external retriever's ``target``) a config names is code Hydra's instantiation
    policy lets a config build: a blocklisted one (``os.remove``, ``builtins.eval`` …) is refused here, naming its
    key, before anything loads, instead of when the object is built."""
    from memrepro.hydra_internals import target_refusal
    from memrepro.runs.identity import code_targets

    written = OmegaConf.to_container(cfg, resolve=False)  # names are read as written: nothing is resolved
    for name, node in written.items():
        if name == "hydra":  # Hydra's own plugins, never built from a user's config
            continue
        for key, target, _ in code_targets(node, str(name)):
            why = None if "${" in target else target_refusal(target)
            if why:
                raise ConfigError(key, target, f"code Hydra may build from a config ({why})")


def validate_metrics(cfg: DictConfig) -> None:
    """``metrics.names`` / ``metrics.extra``: names the metrics module can compute."""
    for key in ("metrics.names", "metrics.extra"):
        present, names = _get(cfg, key)
        if not present or not names:
            continue
        from memrepro.evaluation.metrics import parse_metric  # loads torch: only when metrics are named

        for name in names:
            try:
                parse_metric(str(name))
            except ValueError as exc:
                raise ConfigError(key, name, f"a metric name ({exc})") from None


def _validate_devices(cfg: DictConfig, keys: Iterable[str] = ("runtime.device", "encoder.device")) -> None:
    for key in keys:
        present, value = _get(cfg, key)
        if present:
            validate_device(key, value)


def check_values_set(cfg: DictConfig) -> None:
    """Every key without a default is set (:class:`memrepro.errors.MissingValueError` names the first that is not).
    Hydra's own node is Hydra's: a sweep's job config leaves ``hydra.job.num`` unset until the job launches."""
    missing = sorted(
        found for key in cfg if key != "hydra"
        for found in ([key] if OmegaConf.is_missing(cfg, key) else
                      OmegaConf.missing_keys(cfg[key]) if OmegaConf.is_dict(cfg[key]) else ()))  # full keys
    if missing:
        raise MissingValueError(missing[0])


def validate_run_config(cfg: DictConfig) -> None:
    """Every key and range check of a ``run`` config; raises :class:`ConfigError` (an unknown key:
    :class:`memrepro.errors.UnknownNameError`) at the first key or value that is not allowed."""
    check_closed_schema(cfg)
    check_values_set(cfg)
    check_targets(cfg)
    _check_config(cfg, RunConfig)
    validate_metrics(cfg)
    _validate_devices(cfg)


def validate_train_config(cfg: DictConfig) -> None:
    check_closed_schema(cfg)
    check_values_set(cfg)
    check_targets(cfg)
    _check_config(cfg, TrainConfig)
    _validate_devices(cfg)


def validate_eval_config(cfg: DictConfig) -> None:
    """An ``eval`` config: its keys, metrics, declared ranges and the run file's format and order."""
    check_closed_schema(cfg)
    check_values_set(cfg)
    check_targets(cfg)
    _check_config(cfg, EvalConfig)
    validate_metrics(cfg)


def validate_command_config(cfg: DictConfig) -> None:
    """The check of a ``run``, ``train`` or ``eval`` config, told apart by its root schema (a sweep checks each
    job's config with it before the first job runs); a config of another schema is not checked here."""
    check = {RunConfig: validate_run_config, TrainConfig: validate_train_config,
             EvalConfig: validate_eval_config}.get(OmegaConf.get_type(cfg))
    if check is not None:
        check(cfg)
