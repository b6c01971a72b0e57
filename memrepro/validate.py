"""Config values checked where they enter: every key with a range, before anything loads or runs.

The schemas (``memrepro/config.py``) already refuse unknown keys and wrong types at composition, except a key
added with ``+key=value``, which Hydra applies even to a structured config: :func:`check_closed_schema` refuses
that (the run config is a closed schema: an added key is ignored or reaches a constructor, and it changes the run
id). This adds the ranges a type cannot say (``alpha`` in [0, 1], ``batch_size >= 1``, an engine name, a noise
level), so a value outside them fails in one line naming the key, the value and what is allowed
(:class:`ConfigError`) instead of running to a COMPLETE result that means something else, or a traceback from deep
inside.

Rules are keyed by field name and apply to every node of a group (a cascade's ``first_stage`` is a retriever too),
so a new retriever with a ``k`` or an ``alpha`` is covered without an edit here.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from omegaconf import DictConfig, OmegaConf

from memrepro.errors import ConfigError, unknown_config_key
from memrepro.retrievers.arms import ARMS
from memrepro.retrievers.rfmem.params import CHOICES, ENGINES, LATENCY_SCOPES

# A retriever's nested parameter blocks (the RF-Mem dataclasses of ``retrievers/rfmem/params.py``): their fields
# are checked by the same rules, under the block's key (``retriever.gate.tau``).
PARAMETER_BLOCKS = ("recollection", "gate", "familiarity")
# Allowed names, mirrored from the modules that use them (importing those would load torch before validation).
DEVICES = "auto, cpu, cuda or cuda:<n> (cuda only where torch sees a GPU)"


@dataclass(frozen=True)
class Rule:
    ok: Callable[[Any], bool]
    allowed: str


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int_at_least(low: int, optional: bool = False) -> Rule:
    text = f"an integer >= {low}" + (" or null" if optional else "")
    return Rule(lambda v: (optional and v is None) or (isinstance(v, int) and not isinstance(v, bool) and v >= low),
                text)


def _int_in_range(low: int, high: int, optional: bool = False, why: str = "") -> Rule:
    text = f"an integer in [{low}, {high}]" + (f" ({why})" if why else "") + (" or null" if optional else "")
    return Rule(lambda v: (optional and v is None) or (isinstance(v, int) and not isinstance(v, bool)
                                                       and low <= v <= high), text)


def _in_range(low: float, high: float, optional: bool = False) -> Rule:
    text = f"a number in [{low:g}, {high:g}]" + (" or null" if optional else "")
    return Rule(lambda v: (optional and v is None) or (_number(v) and low <= v <= high), text)


def _above(low: float, inclusive: bool = False) -> Rule:
    text = f"a number {'>=' if inclusive else '>'} {low:g}"
    return Rule(lambda v: _number(v) and (v >= low if inclusive else v > low), text)


def _one_of(*names: str) -> Rule:
    return Rule(lambda v: v in names, "one of " + ", ".join(names))


RETRIEVER_RULES: Mapping[str, Rule] = {
    "k": _int_at_least(1, optional=True),
    "beam": _int_at_least(1),
    "fanout": _int_at_least(1),
    "rounds": _int_at_least(1),
    "probe_k": _int_at_least(1),
    "graph_k": _int_at_least(1, optional=True),
    "protected": _int_at_least(1),
    "pool": _int_at_least(1),
    "chunk_bytes": _int_at_least(1),
    "dbscan_min_samples": _int_at_least(1),
    "kmeans_seed": _int_at_least(0),
    "arm_seed": _int_at_least(0),
    "alpha": _in_range(0.0, 1.0),
    "mmr_lambda": _in_range(0.0, 1.0),
    "min_sim": _in_range(-1.0, 1.0, optional=True),  # cosine floors
    "probe_floor": _in_range(-1.0, 1.0, optional=True),
    "graph_min_sim": _in_range(-1.0, 1.0, optional=True),
    "theta_high": _in_range(-1.0, 1.0),  # thresholds on the probe's mean cosine
    "theta_low": _in_range(-1.0, 1.0),
    "tau": _above(0.0, inclusive=True),  # entropy threshold (nats)
    "lam": _above(0.0),
    "eps": _above(0.0, inclusive=True),
    "dbscan_eps": _above(0.0),
    "spectral_gamma": _above(0.0),
    "engine": _one_of(*ENGINES),
    "mode": _one_of("full", "topk"),
    **{name: _one_of(*allowed) for name, allowed in CHOICES.items()},  # the RF-Mem parameters' own lists
    "latency_scope": _one_of(*LATENCY_SCOPES),
    "arm": _one_of(*ARMS),
}

def _optional(rule: Rule) -> Rule:
    return Rule(lambda v: v is None or rule.ok(v), rule.allowed + " or null")


# training recipes (``retriever.cross_encoder.recipe.*``, ``retriever.model.recipe.*``): the fields of
# ``memrepro.training.recipes``, checked here so a bad value fails before a model is built or trained
# an AdamW step size: the recipes here train at 2e-5 to 1e-3, and far above that the weights go to NaN
LEARNING_RATE = Rule(lambda v: _number(v) and 0.0 < v <= 1.0, "a learning rate in (0, 1]")
RECIPE_RULES: Mapping[str, Rule] = {
    "lr": LEARNING_RATE,
    "head_lr": _optional(LEARNING_RATE),
    "weight_decay": _above(0.0, inclusive=True),
    "epochs": _int_at_least(1),
    "batch_records": _int_at_least(1),
    "max_length": _int_at_least(8),
    "protected": _int_at_least(1),
    "limit_queries": _int_at_least(1, optional=True),
    "init_seed": _int_at_least(0, optional=True),
    "pairwise_weight": _above(0.0, inclusive=True),
    "gold_weight": _above(0.0, inclusive=True),
    "first_rank_weight": _above(0.0, inclusive=True),
    "pairwise_top_k": _int_at_least(1),
    "pairwise_bottom_k": _int_at_least(1),
    "teacher_temperature": _above(0.0),
    "teacher": _one_of("dense", "cross_encoder"),
    "first_rank_target": _one_of("best_gold", "teacher"),
    "hard_negatives": _int_at_least(0),
    "negative_pool": _int_at_least(1),
    "pair_format": _one_of("v2", "plain"),
}



def check_recipe(recipe: Any, prefix: str = "recipe") -> None:
    """The ranges of a training recipe's fields, for a recipe built in Python (``__post_init__``): the same
    rules the config is checked with, so the API and the CLI refuse the same values."""
    for name, rule in RECIPE_RULES.items():
        if hasattr(recipe, name):
            _check(f"{prefix}.{name}", getattr(recipe, name), rule)


def _dataset_rules() -> dict[str, dict[str, Rule]]:
    """By the loader's module; the allowed names are the loaders' own constants (these modules load no torch)."""
    from memrepro.datasets import locomo, longmemeval, personabench, personamem

    return {
        "locomo": {"evidence_rule": _one_of(*locomo.EVIDENCE_RULES)},
        "longmemeval": {"variant": _one_of(*longmemeval.VARIANTS), "granularity": _one_of(*longmemeval.GRANULARITIES),
                        "gold": _one_of(*longmemeval.GOLD_RULES), "limit": _int_at_least(1, optional=True)},
        "personabench": {"noise": _one_of(*personabench.NOISE_LEVELS), "people_per_community": _int_at_least(1)},
        "personamem": {"size": _one_of(*personamem.SIZES),
                       "unit": _one_of(*personamem.UNITS), "label_map": _one_of(*personamem.LABEL_MAPS)},
    }

ENCODER_RULES: Mapping[str, Rule] = {
    "dim": _int_at_least(1),
    "batch_size": _int_at_least(1),
    "max_seq_length": _int_at_least(1, optional=True),
    "device": Rule(lambda v: _device_name_ok(v), DEVICES),
}

RUN_RULES: Mapping[str, Rule] = {
    "runtime.batch_size": _int_at_least(1),
    "runtime.checkpoint_every_s": _above(0.0, inclusive=True),
    # more threads than CPUs only slows torch down, and far more cannot even be started (a MemoryError)
    "runtime.torch_threads": _int_in_range(1, os.cpu_count() or 1, optional=True, why="this machine's CPU count"),
    "runtime.device": Rule(lambda v: _device_name_ok(v), DEVICES),
    "output.top_n": _int_at_least(1),
    "latency.batch1_queries": _int_at_least(0),
    "latency.warmup": _int_at_least(0),
}


def _device_name_ok(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    return value in ("auto", "cpu", "cuda", "mps") or (value.startswith("cuda:") and value[5:].isdigit())


def _check(key: str, value: Any, rule: Rule) -> None:
    if not rule.ok(value):
        raise ConfigError(key, value, rule.allowed)


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def _walk_retriever(node: Mapping[str, Any], prefix: str) -> None:
    for name, value in node.items():
        if isinstance(value, Mapping):
            target = str(value.get("_target_", ""))
            if "retrievers" in target or "training" in target or name in PARAMETER_BLOCKS:
                _walk_retriever(value, f"{prefix}.{name}")  # a nested retriever, model resolver or parameter block
            elif name == "recipe":
                for field_name, rule in RECIPE_RULES.items():
                    if field_name in value:
                        _check(f"{prefix}.recipe.{field_name}", value[field_name], rule)
            continue
        if name in RETRIEVER_RULES:
            _check(f"{prefix}.{name}", value, RETRIEVER_RULES[name])
    low, high = node.get("theta_low"), node.get("theta_high")
    if _number(low) and _number(high) and low > high:
        raise ConfigError(f"{prefix}.theta_low", low, f"a number <= {prefix}.theta_high ({high})")
    if node.get("mode") == "topk" and node.get("k") is None:
        raise ConfigError(f"{prefix}.k", None, f"an integer >= 1 when {prefix}.mode=topk")


def validate_retriever(node: Any, prefix: str = "retriever") -> None:
    plain = _plain(node)
    if isinstance(plain, Mapping):
        _walk_retriever(plain, prefix)


def validate_dataset(node: Any, prefix: str = "dataset") -> None:
    plain = _plain(node)
    if not isinstance(plain, Mapping):
        return
    module = str(plain.get("_target_", "")).split(".")[-2:-1]
    rules = _dataset_rules().get(module[0] if module else "", {})
    for name, rule in rules.items():
        if name in plain:
            _check(f"{prefix}.{name}", plain[name], rule)
    seeds = plain.get("seeds")
    if seeds is not None and (not isinstance(seeds, list) or not seeds or
                              not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        raise ConfigError(f"{prefix}.seeds", seeds, "a non-empty list of integers")
    if not isinstance(plain.get("allow_unverified", False), bool):
        raise ConfigError(f"{prefix}.allow_unverified", plain["allow_unverified"], "true or false")


def validate_encoder(node: Any, prefix: str = "encoder") -> None:
    plain = _plain(node)
    if not isinstance(plain, Mapping):
        return
    for name, rule in ENCODER_RULES.items():
        if name in plain:
            _check(f"{prefix}.{name}", plain[name], rule)


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
        name = f"{prefix}.{key}" if prefix else str(key)
        if fields is not None and key not in fields:
            raise unknown_config_key(name, schema)
        check_closed_schema(value, name)


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


def _check_rules(cfg: DictConfig, keys: Any) -> None:
    for key in keys:
        present, value = _get(cfg, key)
        if present:
            _check(key, value, RUN_RULES[key])


def validate_run_config(cfg: DictConfig) -> None:
    """Every key and range check of a ``run`` config; raises :class:`ConfigError` (an unknown key:
    :class:`memrepro.errors.UnknownNameError`) at the first key or value that is not allowed."""
    check_closed_schema(cfg)
    validate_metrics(cfg)
    _check_rules(cfg, RUN_RULES)
    for group, check in (("dataset", validate_dataset), ("retriever", validate_retriever),
                         ("encoder", validate_encoder)):
        if group in cfg:
            check(cfg[group], group)
    for key in ("runtime.device", "encoder.device"):
        present, value = _get(cfg, key)
        if present:
            validate_device(key, value)


def validate_train_config(cfg: DictConfig) -> None:
    check_closed_schema(cfg)
    _check_rules(cfg, ("runtime.batch_size", "runtime.torch_threads", "runtime.device"))
    for group, check in (("dataset", validate_dataset), ("retriever", validate_retriever),
                         ("first_stage", validate_retriever), ("encoder", validate_encoder)):
        if group in cfg and cfg[group] is not None:
            check(cfg[group], group)
    for key in ("runtime.device", "encoder.device"):
        present, value = _get(cfg, key)
        if present:
            validate_device(key, value)


def validate_eval_config(cfg: DictConfig) -> None:
    """An ``eval`` config: its keys, metrics, ``output.top_n`` and the run file's format and order."""
    from memrepro.runfile import FORMATS, ORDERS

    check_closed_schema(cfg)
    validate_metrics(cfg)
    _check_rules(cfg, ("output.top_n",))
    for key, rule in (("format", _one_of(*FORMATS)), ("order", _one_of(*ORDERS))):
        _check(key, cfg[key], rule)
