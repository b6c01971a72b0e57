"""Config values checked where they enter: every key with a range, before anything loads or runs.

A parameter is declared once, in its schema dataclass (``memrepro/config.py``, ``retrievers/rfmem/params.py``,
``training/recipes.py``): ``alpha: float = param(0.8, number_in(0, 1))`` gives its default, the values it allows
and, with ``changes_results=False`` / ``in_run_id=False``, whether it changes rankings and whether it is part of the
run id.
Everything here is derived from those declarations: the check of a composed config (:func:`validate_run_config`,
which :func:`memrepro.runner.run` calls, so the CLI, ``memrepro.evaluate``, sweeps and experiments all get it), the
check of a retriever built in Python (its constructor calls :func:`validate_arguments`: the same walk, the same
message), ``docs/parameters.md`` and the settings :mod:`memrepro.runs.identity` leaves out of a run id.

A value outside its range fails in one line naming the key, the value and what is allowed (:class:`ConfigError`)
instead of running to a COMPLETE result that means something else, or a traceback from deep inside. A field's type
is checked too (OmegaConf does that for a composed config; a retriever built in Python gets it here), and a field of
``Optional`` type also takes null. Checks across fields are the schema's own ``check_together(values, prefix)``.

The schemas refuse unknown keys and wrong types at composition, except a key added with ``+key=value``, which Hydra
applies even to a structured config: :func:`check_closed_schema` refuses that (the run config is a closed schema: an
added key is ignored or reaches a constructor, and it changes the run id).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from omegaconf import DictConfig, ListConfig, OmegaConf

from memrepro.errors import ConfigError, MissingValueError
from memrepro.options import unknown_config_key

# Allowed device names, mirrored from the modules that use them (importing those would load torch before validation).
DEVICES = "auto, cpu, cuda or cuda:<n> (cuda only where torch sees a GPU)"
_RULE, _CHANGES_RESULTS, _IN_RUN_ID = "memrepro.rule", "memrepro.changes_results", "memrepro.in_run_id"
_LABEL = "memrepro.label"


@dataclass(frozen=True)
class Rule:
    """The values a parameter allows: ``ok(value)``, and ``allowed``, the words every message and the parameters
    page use."""

    ok: Callable[[Any], bool]
    allowed: str
    example: Any = None  # a value it allows, for messages (``retriever.k=1``)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def integer_at_least(low: int) -> Rule:
    return Rule(lambda v: _integer(v) and v >= low, f"an integer >= {low}", max(low, 1))


def integer_in(low: int, high: int, why: str = "") -> Rule:
    return Rule(lambda v: _integer(v) and low <= v <= high,
                f"an integer in [{low}, {high}]" + (f" ({why})" if why else ""), low)


def number_in(low: float, high: float) -> Rule:
    return Rule(lambda v: _number(v) and low <= v <= high, f"a number in [{low:g}, {high:g}]", (low + high) / 2)


def number_in_open_closed(low: float, high: float, allowed: str) -> Rule:
    """A number in (low, high]: above ``low``, at most ``high``."""
    return Rule(lambda v: _number(v) and low < v <= high, allowed, high)


def number_above(low: float, inclusive: bool = False) -> Rule:
    return Rule(lambda v: _number(v) and (v >= low if inclusive else v > low),
                f"a number {'>=' if inclusive else '>'} {low:g}", low + 1)


def one_of(*names: str) -> Rule:
    return Rule(lambda v: v in names, "one of " + ", ".join(names), names[0] if names else None)


def or_null(rule: Rule) -> Rule:
    return Rule(lambda v: v is None or rule.ok(v), rule.allowed + " or null", rule.example)


def _device_name_ok(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    return value in ("auto", "cpu", "cuda", "mps") or (value.startswith("cuda:") and value[5:].isdigit())


def distinct_list(item: Rule, what: str, non_empty: bool = True) -> Rule:
    """A list of distinct values, each allowed by ``item`` (``what`` names them): a value listed twice would count
    its data twice (a split seed, a community), so it is refused, not silently doubled."""
    return Rule(lambda v: isinstance(v, list) and (bool(v) or not non_empty) and all(map(item.ok, v))
                and len(set(v)) == len(v), f"a {'non-empty ' if non_empty else ''}list of distinct {what}",
                [item.example])


DEVICE = Rule(_device_name_ok, DEVICES, "cpu")
INTEGER = Rule(_integer, "an integer", 1)
NAME = Rule(lambda v: isinstance(v, str) and bool(v.strip()), "a name", "a")
NON_EMPTY_INTEGERS = distinct_list(INTEGER, "integers")


def param(default: Any = dataclasses.MISSING, rule: Rule | None = None, *,
          default_factory: Any = dataclasses.MISSING, changes_results: bool = True,
          in_run_id: bool | None = None, label: str | None = None) -> Any:
    """A schema field, declared once: its default, the values it allows (``rule``; None: any value of its type;
    null is added when the field's type is ``Optional``), whether it changes rankings or metrics
    (``changes_results``), whether it is part of the run id (``in_run_id``, by default when it changes results:
    a setting that changes results elsewhere, e.g. through an interpolation, or one compared across runs of their
    own, says otherwise) and how tables and figures name it (``label``; None: its field name)."""
    metadata = {_RULE: rule, _CHANGES_RESULTS: changes_results,
                _IN_RUN_ID: changes_results if in_run_id is None else in_run_id, _LABEL: label}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def changes_results(spec: dataclasses.Field) -> bool:
    return spec.metadata.get(_CHANGES_RESULTS, True)


def in_run_id(spec: dataclasses.Field) -> bool:
    return spec.metadata.get(_IN_RUN_ID, True)


def declared_label(schema: type, name: str) -> str:
    """How tables and figures name the field ``name`` of ``schema``: its declared label, else its name."""
    spec = next(spec for spec in dataclasses.fields(schema) if spec.name == name)
    return spec.metadata.get(_LABEL) or name


@functools.cache
def _hints(schema: type) -> dict[str, Any]:
    return typing.get_type_hints(schema)


def _optional(hint: Any) -> tuple[Any, bool]:
    """``(the type, whether null is allowed)`` of a field's annotation."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else Any), True
    return hint, False


@functools.cache
def declared_rules(schema: type) -> dict[str, Rule]:
    """``{field: rule}`` of every field of ``schema`` that declares one, null added where its type allows it."""
    out = {}
    for spec in dataclasses.fields(schema):
        rule = spec.metadata.get(_RULE)
        if rule is not None:
            out[spec.name] = or_null(rule) if _optional(_hints(schema)[spec.name])[1] else rule
    return out


_TYPE_RULES = {bool: Rule(lambda v: isinstance(v, bool), "true or false", True),
               int: INTEGER, float: Rule(_number, "a number", 0.5),
               str: Rule(lambda v: isinstance(v, str), "a string", "text")}
_LIST_RULES = {int: Rule(lambda v: isinstance(v, list) and all(map(_integer, v)), "a list of integers", [1, 2]),
               str: Rule(lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of names",
                         ["a", "b"])}


def _type_rule(hint: Any) -> Rule | None:
    """What a field of this type takes when it declares no rule of its own (None: no check, e.g. a list)."""
    base, nullable = _optional(hint)
    rule = _TYPE_RULES.get(base)
    return or_null(rule) if rule is not None and nullable else rule


def expected(schema: type, name: str) -> tuple[str, Any]:
    """``(what the field name of schema takes, a value it takes)``: the words of its declared rule (else of its
    type) and its default (else the rule's example), for a message about a value of the wrong type."""
    hint = _hints(schema)[name]
    base, nullable = _optional(hint)
    rule = declared_rules(schema).get(name) or _type_rule(hint)
    if rule is None and typing.get_origin(base) in (list, typing.List):
        rule = _LIST_RULES.get((typing.get_args(base) or (None,))[0])
        rule = or_null(rule) if rule is not None and nullable else rule
    default = _defaults(schema).get(name)
    if rule is None:
        return f"a value of type {getattr(base, '__name__', base)}", default
    usable = default not in (None, []) and rule.ok(default)
    return rule.allowed, default if usable else rule.example


def as_override(value: Any) -> str:
    """A value as it is typed in an override (``true``, ``null``, ``[7,11]``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(as_override(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


# --------------------------------------------------------------------------------------------- the one walk


def _check(key: str, value: Any, rule: Rule) -> None:
    if not rule.ok(value):
        raise ConfigError(key, value, rule.allowed)


def _plain(node: Any) -> Any:
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return dataclasses.asdict(node)
    return node


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _schema_for(target: Any) -> type | None:
    from memrepro.config import schema_for_target  # the config imports this module: read it late

    return schema_for_target(target) if isinstance(target, str) else None


def _nested_schema(hint: Any, value: Any) -> type | None:
    """The schema of a nested node: its field's dataclass, or for a field of any type (a retriever, a first stage,
    a cross-encoder) the schema registered for the ``_target_`` it names."""
    if dataclasses.is_dataclass(hint):
        return hint
    if hint is Any and isinstance(value, Mapping):
        return _schema_for(value.get("_target_"))
    return None


def _defaults(schema: type) -> dict[str, Any]:
    out = {}
    for spec in dataclasses.fields(schema):
        if spec.default is not dataclasses.MISSING:
            out[spec.name] = spec.default
        elif spec.default_factory is not dataclasses.MISSING:
            out[spec.name] = spec.default_factory()
    return out


def check_node(values: Mapping[str, Any], schema: type, prefix: str, closed: bool = True) -> None:
    """``values`` (a config node as plain data) against ``schema``'s declarations: every key one of its fields
    (``closed``), every value of its type and in its declared range, nested nodes alike, then the schema's own
    check across its fields (``check_together(values with defaults, prefix)``). Raises :class:`ConfigError`
    (an unknown key: :class:`memrepro.errors.UnknownNameError`) at the first key or value that is not allowed."""
    fields = {spec.name: spec for spec in dataclasses.fields(schema)}
    rules = declared_rules(schema)
    for name, value in values.items():
        key = _join(prefix, str(name))
        if name not in fields:
            if closed:
                raise unknown_config_key(key, schema)
            continue
        hint = _hints(schema)[name]
        nested = _nested_schema(hint, value)
        if nested is not None:
            if isinstance(value, Mapping):  # anything else is refused by whoever takes it (``as_params``)
                check_node(value, nested, key)
            continue
        rule = rules.get(name) or _type_rule(hint)
        if rule is not None:
            _check(key, value, rule)
    together = getattr(schema, "check_together", None)
    if together is not None:
        together({**_defaults(schema), **values}, prefix)


def check_params(params: Any, prefix: str) -> None:
    """A parameter dataclass instance (``RecollectionParams`` …) against its own declarations."""
    check_node(_plain(params), type(params), prefix)


def validate_retriever(node: Any, prefix: str = "retriever") -> None:
    """A config node that names its code (``_target_``): a retriever, a first stage, a model resolver. Checked
    against the schema registered for that target; a target without one (your own retriever) is not checked."""
    plain = _plain(node)
    if isinstance(plain, Mapping):
        schema = _schema_for(plain.get("_target_"))
        if schema is not None:
            check_node(plain, schema, prefix)


def validate_arguments(code: type, arguments: Mapping[str, Any], prefix: str = "retriever") -> None:
    """A constructor's arguments checked as the config node that would build ``code`` is (same walk, same
    message), so a retriever built in Python refuses what ``python -m memrepro run`` refuses. Parameter blocks
    may be given as their dataclass; None for a block means its defaults."""
    validate_retriever({"_target_": f"{code.__module__}.{code.__qualname__}",
                        **{name: _plain(value) for name, value in arguments.items()}}, prefix)


@functools.cache
def _declares_checks(schema: type) -> bool:
    """Whether a node of ``schema`` has anything to check beyond its types (a rule, a nested node that may)."""
    hints = _hints(schema)
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
    hints = _hints(schema)
    values = {}
    for spec in sorted(dataclasses.fields(schema), key=lambda spec: hints[spec.name] is Any):
        hint = hints[spec.name]
        if spec.name not in cfg or OmegaConf.is_missing(cfg, spec.name):
            continue
        if spec.name in declared_rules(schema) or hint is Any or (
                dataclasses.is_dataclass(hint) and _declares_checks(hint)):
            values[spec.name] = _plain(cfg[spec.name])
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
    return True, _plain(node)


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

    plain = OmegaConf.to_container(cfg, resolve=False)  # names are read as written: nothing is resolved
    for name, node in plain.items():
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
    from memrepro.config import RunConfig

    check_closed_schema(cfg)
    check_values_set(cfg)
    check_targets(cfg)
    _check_config(cfg, RunConfig)
    validate_metrics(cfg)
    _validate_devices(cfg)


def validate_train_config(cfg: DictConfig) -> None:
    from memrepro.config import TrainConfig

    check_closed_schema(cfg)
    check_values_set(cfg)
    check_targets(cfg)
    _check_config(cfg, TrainConfig)
    _validate_devices(cfg)


def validate_eval_config(cfg: DictConfig) -> None:
    """An ``eval`` config: its keys, metrics, declared ranges and the run file's format and order."""
    from memrepro.config import EvalConfig

    check_closed_schema(cfg)
    check_values_set(cfg)
    check_targets(cfg)
    _check_config(cfg, EvalConfig)
    validate_metrics(cfg)


def validate_command_config(cfg: DictConfig) -> None:
    """The check of a ``run``, ``train`` or ``eval`` config, told apart by its root schema (a sweep checks each
    job's config with it before the first job runs); a config of another schema is not checked here."""
    from memrepro.config import EvalConfig, RunConfig, TrainConfig

    check = {RunConfig: validate_run_config, TrainConfig: validate_train_config,
             EvalConfig: validate_eval_config}.get(OmegaConf.get_type(cfg))
    if check is not None:
        check(cfg)


def declared_names(schemas: Iterable[type], keep: Callable[[dataclasses.Field], bool]) -> tuple[str, ...]:
    """The names of the fields, in the given schemas and the dataclasses nested in them, whose declaration
    ``keep`` accepts (first seen first, each once): e.g. the settings a run id leaves out."""
    names: dict[str, None] = {}
    for schema in schemas:
        for spec in dataclasses.fields(schema):
            hint = _hints(schema)[spec.name]
            if dataclasses.is_dataclass(hint):
                names.update(dict.fromkeys(declared_names((hint,), keep)))
            elif keep(spec):
                names[spec.name] = None
    return tuple(names)
