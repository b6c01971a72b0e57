"""The vocabulary that declares a parameter, and the one walk that checks values against the declarations.

A parameter is declared once, in its schema dataclass (``memrepro/config.py``, ``retrievers/schemas.py``,
``retrievers/rfmem/params.py``, ``training/recipes.py``, ``search.py``): ``alpha: float = param(0.8,
number_in(0, 1))`` gives its default, the values it allows and, with ``changes_results=False`` /
``in_run_id=False``, whether it changes rankings and whether it is part of the run id. Algorithm modules declare
their parameters with it and check their own arguments (:func:`validate_arguments`, :func:`check_params`), so it
sits at the bottom of the package and knows no schema; the check of a whole config tree, which knows them all, is
:mod:`memrepro.validate`.

A field's type is checked too (OmegaConf does that for a composed config; a retriever built in Python gets it
here), and a field of ``Optional`` type also takes null. Checks across fields are the schema's own
``check_together(values, prefix)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from memrepro.errors import ConfigError, UnknownNameError

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
def field_hints(schema: type) -> dict[str, Any]:
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
            out[spec.name] = or_null(rule) if _optional(field_hints(schema)[spec.name])[1] else rule
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
    hint = field_hints(schema)[name]
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


def plain(node: Any) -> Any:
    """A config node (OmegaConf's, or a parameter dataclass) as plain data."""
    omegaconf = sys.modules.get("omegaconf")  # a node of OmegaConf's exists only once OmegaConf is loaded
    if omegaconf is not None and isinstance(node, (omegaconf.DictConfig, omegaconf.ListConfig)):
        return omegaconf.OmegaConf.to_container(node, resolve=True)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return dataclasses.asdict(node)
    return node


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


SchemaFor = Callable[[str], "type | None"]  # a node's schema by the code it names (its ``_target_``)
Unknown = Callable[[str, type], Exception]  # the error for a key that is not a field of the schema


def _no_schema(target: str) -> type | None:
    return None


def unknown_field(key: str, schema: type) -> UnknownNameError:
    """``key`` is not a field of ``schema``: the error names the nearest fields."""
    fields = [f.name for f in dataclasses.fields(schema) if not f.name.startswith("_")]
    return UnknownNameError("config key", key, fields, "fix the key; the config is a closed schema, so `+key=value` "
                            "cannot add a key its schema does not have", within=key.rpartition(".")[0])


def _nested_schema(hint: Any, value: Any, schema_for: SchemaFor) -> type | None:
    """The schema of a nested node: its field's dataclass, or for a field of any type (a retriever, a first stage,
    a cross-encoder) the schema ``schema_for`` gives for the ``_target_`` it names."""
    if dataclasses.is_dataclass(hint):
        return hint
    if hint is Any and isinstance(value, Mapping) and isinstance(value.get("_target_"), str):
        return schema_for(value["_target_"])
    return None


def _defaults(schema: type) -> dict[str, Any]:
    out = {}
    for spec in dataclasses.fields(schema):
        if spec.default is not dataclasses.MISSING:
            out[spec.name] = spec.default
        elif spec.default_factory is not dataclasses.MISSING:
            out[spec.name] = spec.default_factory()
    return out


def check_node(values: Mapping[str, Any], schema: type, prefix: str, closed: bool = True, *,
               schema_for: SchemaFor = _no_schema, unknown: Unknown = unknown_field) -> None:
    """``values`` (a config node as plain data) against ``schema``'s declarations: every key one of its fields
    (``closed``), every value of its type and in its declared range, nested nodes alike, then the schema's own
    check across its fields (``check_together(values with defaults, prefix)``). Raises :class:`ConfigError`
    (an unknown key: ``unknown(key, schema)``) at the first key or value that is not allowed. A field of any type
    (a cascade's first stage) is checked against ``schema_for(its _target_)``; the config tree's check
    (:mod:`memrepro.validate`) knows every schema, a parameter block alone needs none."""
    fields = {spec.name: spec for spec in dataclasses.fields(schema)}
    rules = declared_rules(schema)
    for name, value in values.items():
        key = _join(prefix, str(name))
        if name not in fields:
            if closed:
                raise unknown(key, schema)
            continue
        hint = field_hints(schema)[name]
        nested = _nested_schema(hint, value, schema_for)
        if nested is not None:
            if isinstance(value, Mapping):  # anything else is refused by whoever takes it (``as_params``)
                check_node(value, nested, key, schema_for=schema_for, unknown=unknown)
            continue
        rule = rules.get(name) or _type_rule(hint)
        if rule is not None:
            _check(key, value, rule)
    together = getattr(schema, "check_together", None)
    if together is not None:
        together({**_defaults(schema), **values}, prefix)


def check_params(params: Any, prefix: str) -> None:
    """A parameter dataclass instance (``RecollectionParams`` …) against its own declarations."""
    check_node(plain(params), type(params), prefix)


def validate_arguments(schema: type, arguments: Mapping[str, Any], prefix: str = "retriever") -> None:
    """A constructor's arguments checked against the schema of the config node that would build it (same walk,
    same message), so a retriever built in Python refuses what ``python -m memrepro run`` refuses. Parameter
    blocks may be given as their dataclass; None for a block means its defaults."""
    check_node({name: plain(value) for name, value in arguments.items()}, schema, prefix)


def declared_names(schemas: Iterable[type], keep: Callable[[dataclasses.Field], bool]) -> tuple[str, ...]:
    """The names of the fields, in the given schemas and the dataclasses nested in them, whose declaration
    ``keep`` accepts (first seen first, each once): e.g. the settings a run id leaves out."""
    names: dict[str, None] = {}
    for schema in schemas:
        for spec in dataclasses.fields(schema):
            hint = field_hints(schema)[spec.name]
            if dataclasses.is_dataclass(hint):
                names.update(dict.fromkeys(declared_names((hint,), keep)))
            elif keep(spec):
                names[spec.name] = None
    return tuple(names)
