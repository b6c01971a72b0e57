"""Each parameter is declared once (``param(...)`` in its schema dataclass), and every check reads that declaration:
a value outside a declared range is refused with the same one-line error from the command line, from
``memrepro.evaluate`` and from a retriever built in Python; the run id leaves out exactly the settings declared as
changing no result; a retriever target that cannot be imported is an error, not a missing algorithm version."""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from omegaconf import OmegaConf

from memrepro.api import evaluate
from memrepro.config import GROUP_SCHEMAS, RunConfig
from memrepro.errors import ConfigError, UnknownNameError
from memrepro.parameters import changes_results, declared_rules, in_run_id
from memrepro.retrievers.bm25 import BM25Retriever
from memrepro.retrievers.dense import DenseRetriever
from memrepro.retrievers.rfmem.params import RecollectionParams, validate_recollection
from memrepro.retrievers.rfmem.retriever import RecollectionRetriever, RFMemRetriever
from memrepro.runs.identity import (NON_MEASURING_RETRIEVER_KEYS, RETRIEVER_SETTINGS, RUN_SETTINGS, SOURCE_SETTINGS,
                                   algorithm_versions, run_id_payload, semantic_config)
from memrepro.training.recipes import CrossEncoderRecipe, V1Recipe
from memrepro.validate import validate_retriever, validate_run_config
from tests.test_cli import memrepro

CONF = Path(__file__).resolve().parents[1] / "conf"
RECIPES = (V1Recipe, CrossEncoderRecipe)
# they validate their arguments
BUILT_BY_CONSTRUCTOR = (BM25Retriever, DenseRetriever, RecollectionRetriever, RFMemRetriever)
# candidates for an out-of-range value, by the field's type: the first its rule refuses is used
CANDIDATES = {int: (-1, 0, 10**9), float: (-1.5, 1.5, 10**9), str: ("not-a-choice",), list: ([], ["x", "x"])}


def _base_type(hint: Any) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    hint = args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint
    return typing.get_origin(hint) or hint


def _declared(schema: type, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], type, str]]:
    """``(path, owning schema, field)`` of every field with a declared rule, nested dataclasses included."""
    hints = typing.get_type_hints(schema)
    for spec in dataclasses.fields(schema):
        if dataclasses.is_dataclass(hints[spec.name]):
            yield from _declared(hints[spec.name], (*path, spec.name))
        elif spec.name in declared_rules(schema):
            yield (*path, spec.name), schema, spec.name


def _bad(schema: type, name: str) -> Any:
    rule = declared_rules(schema)[name]
    for value in CANDIDATES[_base_type(typing.get_type_hints(schema)[name])]:
        if not rule.ok(value):
            return value
    raise AssertionError(f"{schema.__name__}.{name}: its rule ({rule.allowed}) refuses no value of its type")


def _preset(group: str, schema_name: str) -> str | None:
    """The first option of ``conf/<group>/`` built directly on ``schema_name``."""
    for path in sorted((CONF / group).glob("*.yaml")):
        if schema_name in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("defaults", []):
            return path.stem
    return None


def _cases() -> list[Any]:
    """One case per declared field: the config group option it is reached through and its dotted key."""
    cases = []
    for group, schemas in GROUP_SCHEMAS.items():
        for schema_name, schema in schemas.items():
            option = _preset(group, schema_name)
            for path, owner, name in _declared(schema):
                assert option, f"no preset of {group} builds on {schema_name}"
                key = ".".join((group, *path))
                cases.append(pytest.param(group, option, schema, key, owner, name, id=f"{option}:{key}"))
    for path, owner, name in _declared(RunConfig):
        key = ".".join(path)
        cases.append(pytest.param(None, None, RunConfig, key, owner, name, id=key))
    return cases


@functools.cache
def _composed(*overrides: str) -> Any:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=["runtime.device=cpu", *overrides])


class _Unused:
    """A system for memrepro.evaluate that never runs: its config is refused first."""

    def retrieve(self, queries, query_vectors, index):
        raise AssertionError("the config check must come before any retrieval")


def _nested(path: list[str], value: Any) -> dict[str, Any]:
    return {path[0]: value} if len(path) == 1 else {path[0]: _nested(path[1:], value)}


@pytest.mark.parametrize("group,option,schema,key,owner,name", _cases())
def test_every_declared_range_is_refused_alike_by_the_config_check_and_from_python(
        group: str | None, option: str | None, schema: type, key: str, owner: type, name: str) -> None:
    bad = _bad(owner, name)
    overrides = (f"{group}={option}",) if group else ()
    cfg = copy.deepcopy(_composed(*overrides))
    validate_run_config(cfg)  # the preset itself passes
    OmegaConf.update(cfg, key, bad, merge=False)
    with pytest.raises(ConfigError) as by_config:
        validate_run_config(cfg)
    assert by_config.value.key == key and by_config.value.value == bad and by_config.value.exit_code == 2
    assert by_config.value.allowed == declared_rules(owner)[name].allowed

    if group == "retriever":  # built in Python: the constructor, or the same walk for code memrepro does not own
        code = get_class(schema._target_)
        node = _nested(key.split(".")[1:], bad)
        with pytest.raises(ConfigError) as by_python:
            if code in BUILT_BY_CONSTRUCTOR:
                code(**node)
            else:
                validate_retriever({"_target_": schema._target_, **node})
    elif owner in RECIPES:  # a training recipe built in Python checks its own fields, named by the recipe
        with pytest.raises(ConfigError) as by_python:
            owner(**{name: bad})
        assert (by_python.value.key, by_python.value.value) == (f"{owner.__name__}.{name}", bad)
        assert by_python.value.allowed == by_config.value.allowed
        return
    else:  # memrepro.evaluate checks its config before anything loads
        groups = {"encoder": "fake", **({group: option} if group in ("dataset", "encoder") else {})}
        chosen = [f"{group}={option}"] if group and group not in groups else []  # e.g. cross_encoder=published
        with pytest.raises(ConfigError) as by_python:
            evaluate(_Unused(), **groups, overrides=[*chosen, f"{key}={_override(bad)}"])
    assert str(by_python.value) == str(by_config.value)


def _override(value: Any) -> str:
    return "[]" if value == [] else str(value)


@pytest.mark.parametrize("name", sorted(declared_rules(RecollectionParams)))
def test_the_engines_refuse_what_the_config_refuses(name: str) -> None:
    """recollect_faithful / recollect_compiled validate the parameters they are handed with the same declarations."""
    bad = _bad(RecollectionParams, name)
    with pytest.raises(ConfigError) as caught:
        validate_recollection(RecollectionParams(**{name: bad}))
    assert caught.value.key == f"recollection.{name}" and caught.value.value == bad


@pytest.mark.integration
def test_python_and_the_cli_give_the_same_line(tmp_path: Path, fixtures_dir: Path) -> None:
    """The issue as a user meets it: alpha=1.5 from Python and on the command line, and a check across fields."""
    with pytest.raises(ConfigError) as alpha:
        RecollectionRetriever(recollection={"alpha": 1.5})
    with pytest.raises(ConfigError) as thetas:
        RFMemRetriever(gate={"theta_low": 0.9})  # above the default theta_high 0.6
    for python, args in ((alpha, ("retriever=recollection", "retriever.recollection.alpha=1.5")),
                         (thetas, ("retriever=rfmem", "retriever.gate.theta_low=0.9"))):
        out = memrepro("run", "encoder=fake", *args, tmp=tmp_path, data_dir=fixtures_dir)
        assert out.returncode == 2 and out.stderr.strip().splitlines() == [f"memrepro: error: {python.value}"]
    assert not (tmp_path / "results").exists()


def test_checks_across_fields_and_unknown_keys_from_python() -> None:
    with pytest.raises(ConfigError, match=r"retriever\.recollection\.clustering='dbscan'.*needs engine='faithful'"):
        RecollectionRetriever(recollection={"clustering": "dbscan"}, engine="compiled")
    with pytest.raises(ConfigError, match=r"retriever\.k=None .* when retriever\.mode=topk"):
        DenseRetriever(mode="topk")
    with pytest.raises(UnknownNameError, match=r"'retriever\.recollection\.alpah' \(nearest: retriever\.recollection"
                                               r"\.alpha"):
        RecollectionRetriever(recollection={"alpah": 0.3})


def _retriever_fields(keep) -> set[str]:
    names = set()
    for schema in GROUP_SCHEMAS["retriever"].values():
        hints = typing.get_type_hints(schema)
        for spec in dataclasses.fields(schema):
            nested = hints[spec.name]
            specs = dataclasses.fields(nested) if dataclasses.is_dataclass(nested) else (spec,)
            names |= {s.name for s in specs if keep(s)}
    return names


def test_the_run_id_leaves_out_what_the_declarations_say_and_nothing_else() -> None:
    """The lists run_identity hashes without are the declarations', and they are the lists every recorded run id was
    computed with (a change here changes the id of every run)."""
    assert set(RETRIEVER_SETTINGS) == _retriever_fields(lambda s: not in_run_id(s)) == {"chunk_bytes", "latency_scope"}
    assert set(NON_MEASURING_RETRIEVER_KEYS) == _retriever_fields(lambda s: not changes_results(s)) == {
        "engine", "chunk_bytes", "latency_scope"}
    assert set(SOURCE_SETTINGS) == {"data_dir", "device", "show_progress", "batch_size", "allow_unverified"}
    assert set(RUN_SETTINGS) == {"paths", "runtime", "latency", "overwrite", "hydra", "first_stage", "cross_encoder",
                                 "arm", "run_file", "condition", "checks"}
    retriever = semantic_config(_composed("retriever=rfmem"))["retriever"]
    assert retriever["engine"] == "faithful" and not {"chunk_bytes", "latency_scope"} & set(retriever)


def test_an_unimportable_retriever_target_is_an_error_naming_it() -> None:
    cfg = {"retriever": {"_target_": "memrepro.retrievers.cascade.CascadeRetriever",
                         "first_stage": {"_target_": "no_such_package.Ranker"}}}
    with pytest.raises(ConfigError) as caught:
        run_id_payload(cfg, "0" * 64, {})
    assert caught.value.key == "retriever.first_stage._target_" and caught.value.value == "no_such_package.Ranker"
    assert "No module named 'no_such_package'" in str(caught.value) and "\n" not in str(caught.value)
    external = {"_target_": "memrepro.retrievers.external.ExternalRetriever", "target": "no_such_package.Mine"}
    with pytest.raises(ConfigError, match=r"config retriever\.target='no_such_package\.Mine'"):
        algorithm_versions(external)
    # a run read back whose code is not installed here, and an object evaluate() was handed that has no importable
    # name, have no version to read
    assert algorithm_versions(cfg["retriever"], recorded=True) == {"memrepro.retrievers.cascade.CascadeRetriever": 1}
    assert algorithm_versions({"external": True, "target": "notebook.make.<locals>.Mine"}) == {}


def test_bm25_defaults_live_in_its_schema_alone() -> None:
    """The preset names its schema and sets nothing: each default is the declaration's (and the constructor's,
    which reads it: test_schema_signatures)."""
    import yaml

    from memrepro.paths import CONFIG_DIR

    preset = yaml.safe_load((CONFIG_DIR / "retriever" / "bm25.yaml").read_text(encoding="utf-8"))
    assert preset == {"defaults": ["bm25_schema", "_self_"]}
    built = BM25Retriever()
    schema = GROUP_SCHEMAS["retriever"]["bm25_schema"]
    assert {name: getattr(built, attr) for name, attr in (("k1", "k1"), ("b", "b"), ("method", "method"))} == {
        "k1": schema.k1, "b": schema.b, "method": schema.method}
