"""Every config schema that names code (``_target_``) agrees with that code: each field is a parameter of the
class or function it builds, and where the code has a default the schema's default is the same value. A Python
caller and a config-file run then start from the same defaults, and a parameter renamed or removed in the code
fails here, not at the first run that sets it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from memrepro import stages
from memrepro.config import SCHEMA_BY_TARGET
from memrepro.hydra_internals import locate


# Fields a run takes off a node before it builds the code (so the code has no such parameter), and the line of
# memrepro/stages.py that does it: the exemption ends when the field is no longer taken off.
TAKEN_BY_THE_RUNNER = {"allow_unverified": 'plain.pop("allow_unverified"', "gold_labels": 'plain.pop("gold_labels"'}


def test_each_field_the_runner_takes_off_is_still_taken_off() -> None:
    source = inspect.getsource(stages)
    for field, line in TAKEN_BY_THE_RUNNER.items():
        assert line in source, f"stages no longer takes {field!r} off; drop it from TAKEN_BY_THE_RUNNER"


def _schema_default(spec: dataclasses.Field) -> object:
    if spec.default is not dataclasses.MISSING:
        return spec.default
    if spec.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return spec.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


@pytest.mark.parametrize("target", sorted(SCHEMA_BY_TARGET))
def test_a_schema_names_only_parameters_of_its_code_with_the_code_s_defaults(target: str) -> None:
    schema = SCHEMA_BY_TARGET[target]
    parameters = inspect.signature(locate(target)).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for spec in dataclasses.fields(schema):
        if spec.name == "_target_" or spec.name in TAKEN_BY_THE_RUNNER:
            continue
        if spec.name not in parameters:
            assert takes_any, f"{schema.__name__}.{spec.name}: {target} has no parameter {spec.name!r}"
            continue
        code_default = parameters[spec.name].default
        if code_default is inspect.Parameter.empty:
            continue  # the code requires it: the schema's value is the config's choice
        schema_default = _schema_default(spec)
        if schema_default is dataclasses.MISSING or schema_default == "???":
            continue
        if dataclasses.is_dataclass(schema_default) or dataclasses.is_dataclass(code_default):
            continue  # a nested node: compared through its own schema
        if code_default is None and schema_default in ({}, []):
            continue  # None is the code's empty collection (a mutable default is not written in a signature)
        if isinstance(code_default, tuple):
            code_default = list(code_default)
        assert schema_default == code_default, (f"{schema.__name__}.{spec.name} defaults to {schema_default!r}, "
                                                f"{target} to {code_default!r}")
