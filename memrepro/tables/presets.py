"""Runs found by the retriever preset that defines them: for the leaderboard and the RF-Mem figures, which show
any complete run of a setting (the paper tables show only their declared conditions' runs).

A preset is read as Hydra composes it (``conf/retriever/<preset>.yaml``, its defaults list and the schema's defaults
included); a run matches when every key of the preset (and of any variant switch) equals its retriever config's,
ignoring the keys that change no measurement. When several runs match, ``Run.preference`` decides (the faithful
engine, the most split seeds, the newest).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping, Sequence

from memrepro.experiments import composed_config
from memrepro.retrievers.rfmem.params import VARIANT_DEFAULTS
from memrepro.runs.identity import NON_MEASURING_RETRIEVER_KEYS
from memrepro.tables.runs import Run, dotted, preferred, same_setting

IGNORED_KEYS = {"_target_", *NON_MEASURING_RETRIEVER_KEYS}


@lru_cache(maxsize=None)
def preset(name: str) -> dict[str, Any]:
    """A retriever preset's settings as Hydra composes them (its defaults list and the schema's defaults
    included), by dotted path (``recollection.alpha``), minus the keys that change no measurement."""
    from omegaconf import OmegaConf

    node = composed_config([f"retriever={name}"]).retriever
    values = dotted(OmegaConf.to_container(node, resolve=True))
    return {k: v for k, v in values.items() if k not in IGNORED_KEYS}


def find_run(runs: Sequence[Run], *, dataset: str, names: Sequence[str], encoder: str,
             settings: Mapping[str, Any], dataset_settings: Mapping[str, Any] | None = None) -> Run | None:
    """The run of ``dataset`` by retriever ``names`` and ``encoder`` whose retriever matches every setting."""
    matches = []
    for run in runs:
        if run.dataset != dataset or run.retriever_name not in names or run.encoder_label != encoder:
            continue
        if any(not same_setting(run.config["dataset"].get(k), v) for k, v in (dataset_settings or {}).items()):
            continue
        if all(same_setting(run.retriever_settings.get(k), v) for k, v in settings.items()):
            matches.append(run)
    return preferred(matches)


def recollection_settings(preset_name: str, **variant: Any) -> dict[str, Any]:
    """A recollection/RF-Mem preset plus a variant switch (Recollection field names); the other switches pinned
    at their defaults. Keys are dotted paths (``recollection.clustering``)."""
    switches = {f"recollection.{k}": v for k, v in {**VARIANT_DEFAULTS, **variant}.items()}
    return {**preset(preset_name), **switches}


def familiarity_settings(k: int) -> dict[str, Any]:
    return {"mode": "topk", "k": k, "min_sim": 0.0}
