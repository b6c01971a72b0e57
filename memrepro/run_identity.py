"""What a run id is: the hash of what decides a run's rankings and metrics, and of nothing else.

Hashed: the resolved config minus the settings listed here (where files live, devices, speed, verbosity), the data
files' sha256, the encoder's identity, and the ``ALGORITHM_VERSION`` of every class the retriever config names.
A fix that changes a retriever's rankings bumps its ``ALGORITHM_VERSION``: its old runs then have another id and
are recomputed instead of being reused silently. This module is the one list of settings that change nothing;
the tables read it too.
"""

from __future__ import annotations

from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

# Top-level config keys: paths, devices, timing and resume switches. first_stage / cross_encoder / arm are read by
# the cascade presets through interpolation, so they reach the id through the retriever node only. run_file
# (eval): its sha256 is hashed instead of its path.
RUN_SETTINGS = ("paths", "runtime", "latency", "overwrite", "hydra", "first_stage", "cross_encoder", "arm",
                "run_file")
# Keys of the dataset and encoder nodes: where the data lives and how the encoder runs are not identity.
SOURCE_SETTINGS = ("data_dir", "device", "show_progress", "batch_size", "allow_unverified")
# Retriever keys, at any depth of the retriever node (a cascade's first stage too): how a run computes or reports
# its timing, never what it ranks.
RETRIEVER_SETTINGS = ("chunk_bytes", "latency_scope")
# Not measuring either, but a run of its own: engines give identical rankings and are compared with each other.
NON_MEASURING_RETRIEVER_KEYS = ("engine", *RETRIEVER_SETTINGS)
EXTERNAL = "memrepro.retrievers.external.ExternalRetriever"


def semantic_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config minus every setting that changes no ranking or metric."""
    from memrepro.search import EXACT_BACKENDS

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
    if "retriever" in resolved:
        resolved["retriever"] = _without(resolved["retriever"], RETRIEVER_SETTINGS)
    return resolved


def algorithm_versions(node: Any) -> dict[str, int]:
    """``{target: version}`` for every class or function a (retriever) config names that declares one: its
    ``algorithm_version(config)`` when it has one (a fix that changed only some of its settings' rankings, e.g. one
    ablation arm, leaves the other settings' runs valid), else its ``ALGORITHM_VERSION``."""
    from hydra.utils import get_object

    found: dict[str, int] = {}
    for target, config in sorted(_targets(node), key=lambda pair: pair[0]):
        try:
            code = get_object(target)
        except Exception:  # noqa: BLE001 - not importable here: building the retriever reports it properly
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


def _targets(node: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """Where a config names the code that computes it, with the node that configures it: Hydra's ``_target_``,
    and an external retriever's ``target`` (``retriever=external``, or ``memrepro.evaluate``'s ``external: true``
    node)."""
    if isinstance(node, Mapping):
        out = [(node["_target_"], node)] if isinstance(node.get("_target_"), str) else []
        if isinstance(node.get("target"), str) and (node.get("_target_") == EXTERNAL or node.get("external") is True):
            out.append((node["target"], node))
        for value in node.values():
            out += _targets(value)
        return out
    if isinstance(node, (list, tuple)):
        return [pair for value in node for pair in _targets(value)]
    return []


def _without(node: Any, keys: tuple[str, ...]) -> Any:
    if isinstance(node, Mapping):
        return {k: _without(v, keys) for k, v in node.items() if k not in keys}
    if isinstance(node, list):
        return [_without(v, keys) for v in node]
    return node


def _copy(node: Any) -> Any:
    return _without(node, ())
