"""What a run id is: the hash of what decides a run's rankings and metrics, and of nothing else.

Hashed: the resolved config minus the settings that change no ranking or metric (where files live, devices, speed,
verbosity), the data files' sha256, the encoder's identity, and the ``ALGORITHM_VERSION`` of every class the
retriever config names. A fix that changes a retriever's rankings bumps its ``ALGORITHM_VERSION``: its old runs then
have another id and are recomputed instead of being reused silently. Which settings are left out is each field's own
declaration (``param(..., changes_results=False)`` in ``memrepro/config.py``); the lists below are read from them,
and the tables read these lists too.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Mapping

from omegaconf import DictConfig, OmegaConf

from memrepro.config import GROUP_SCHEMAS, RunConfig
from memrepro.datasets.gold_corrections import ORIGINAL
from memrepro.errors import ConfigError, one_line
from memrepro.parameters import changes_results, declared_names, in_run_id

# Top-level config keys: paths, devices, timing and resume switches; first_stage / cross_encoder / arm are read by
# the cascade presets through interpolation, so they reach the id through the retriever node only. Not fields of
# the run schema: Hydra's own node, and eval's run_file (its sha256 is hashed instead of its path).
RUN_SETTINGS = (*(spec.name for spec in dataclasses.fields(RunConfig) if not in_run_id(spec)), "hydra", "run_file")
# Keys of the dataset and encoder nodes: where the data lives and how the encoder runs are not identity.
SOURCE_SETTINGS = declared_names((*GROUP_SCHEMAS["dataset"].values(), *GROUP_SCHEMAS["encoder"].values()),
                                 lambda spec: not in_run_id(spec))
# Retriever keys, at any depth of the retriever node (a cascade's first stage too): how a run computes or reports
# its timing, never what it ranks.
RETRIEVER_SETTINGS = declared_names(GROUP_SCHEMAS["retriever"].values(), lambda spec: not in_run_id(spec))
# Every retriever key that changes no ranking, including those that still make a run of their own (``engine``:
# engines rank identically and are compared with each other): what tables ignore when they match runs.
NON_MEASURING_RETRIEVER_KEYS = declared_names(GROUP_SCHEMAS["retriever"].values(),
                                              lambda spec: not changes_results(spec))
EXTERNAL = "memrepro.retrievers.external.ExternalRetriever"


def semantic_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config minus every setting that changes no ranking or metric."""
    from memrepro.limits import EXACT_BACKENDS

    resolved = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else _copy(cfg)
    for key in RUN_SETTINGS:
        resolved.pop(key, None)
    search_cfg = resolved.get("search")
    if not isinstance(search_cfg, dict) or search_cfg.get("backend", "auto") in EXACT_BACKENDS:
        resolved.pop("search", None)  # exact backends give the same rankings: same run id as before they existed
    for group in ("dataset", "encoder"):
        if isinstance(resolved.get(group), dict):
            for key in SOURCE_SETTINGS:
                resolved[group].pop(key, None)
    if isinstance(resolved.get("dataset"), dict) and resolved["dataset"].get("gold_labels") == ORIGINAL:
        del resolved["dataset"]["gold_labels"]  # the gold as published: the same run ids as before the switch
    if "retriever" in resolved:
        resolved["retriever"] = _without(resolved["retriever"], RETRIEVER_SETTINGS)
    return resolved


def algorithm_versions(node: Any, prefix: str = "retriever", recorded: bool = False) -> dict[str, int]:
    """``{target: version}`` for every class or function a (retriever) config names that declares one: its
    ``algorithm_version(config)`` when it has one (a fix that changed only some of its settings' rankings, e.g. one
    ablation arm, leaves the other settings' runs valid), else its ``ALGORITHM_VERSION``.

    A target that cannot be imported is a :class:`ConfigError` naming its key (under ``prefix``) and the import
    error: a run id without its version would be reused after a fix. ``recorded=True`` (the config of a run read
    back, e.g. by the tables) leaves it out instead: code that is not installed here cannot have been changed here.
    A ``memrepro.evaluate`` node names the class of an object already built; one defined inside a function has no
    importable name, so it has no version to read."""
    found: dict[str, int] = {}
    for key, target, config in sorted(code_targets(node, prefix), key=lambda found_at: found_at[1]):
        code = _import(key, target, skip=recorded or (config.get("external") is True and "<locals>" in target))
        if code is None:
            continue
        version = code.algorithm_version(config) if hasattr(code, "algorithm_version") else getattr(
            code, "ALGORITHM_VERSION", None)
        if version is not None:
            found[target] = max(int(version), found.get(target, 0))
    return found


def run_id_payload(cfg: DictConfig | Mapping[str, Any], data_sha256: str, encoder_identity: Mapping[str, Any],
                   ) -> dict[str, Any]:
    """What :func:`memrepro.provenance.config_hash` hashes into a ``run`` id."""
    semantic = semantic_config(cfg)
    return {"config": semantic, "data_sha256": data_sha256, "encoder": dict(encoder_identity),
            "algorithm": algorithm_versions(semantic.get("retriever"))}


def _import(key: str, target: str, skip: bool) -> Any:
    """The code ``target`` names; None when it cannot be imported and ``skip``, else a :class:`ConfigError`."""
    from memrepro.hydra_internals import locate  # what instantiate resolves with

    try:
        return locate(target)
    except (ImportError, AttributeError, ValueError) as exc:  # what a name that does not resolve raises
        if skip:
            return None
        cause = exc.__cause__ or exc
        raise ConfigError(key, target, f"an importable class or function ({type(cause).__name__}: "
                                       f"{one_line(cause)})") from exc


def code_targets(node: Any, prefix: str) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """``(key, target, node)`` wherever a config names the code that computes it: Hydra's ``_target_``, and an
    external retriever's ``target`` (``retriever=external``, or ``memrepro.evaluate``'s ``external: true`` node)."""
    if isinstance(node, Mapping):
        if isinstance(node.get("_target_"), str):
            yield f"{prefix}._target_", node["_target_"], node
        if isinstance(node.get("target"), str) and (node.get("_target_") == EXTERNAL or node.get("external") is True):
            yield f"{prefix}.target", node["target"], node
        for name, value in node.items():
            yield from code_targets(value, f"{prefix}.{name}")
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from code_targets(value, f"{prefix}[{i}]")


def _without(node: Any, keys: tuple[str, ...]) -> Any:
    if isinstance(node, Mapping):
        return {k: _without(v, keys) for k, v in node.items() if k not in keys}
    if isinstance(node, list):
        return [_without(v, keys) for v in node]
    return node


def _copy(node: Any) -> Any:
    return _without(node, ())
