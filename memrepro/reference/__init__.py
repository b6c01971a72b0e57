"""The papers' published numbers (``reference_numbers.yaml``), looked up by dotted path for comparison only."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml


@lru_cache(maxsize=1)
def reference_numbers() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("reference_numbers.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


@lru_cache(maxsize=1)
def calibration_numbers() -> dict[str, Any]:
    """Numbers measured with the official code itself (``official_code_calibration.yaml``), not from a paper."""
    text = resources.files(__package__).joinpath("official_code_calibration.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def calibration_value(path: str) -> Any:
    """``calibration_value("convmemory_v1_seed23.methods.v1_dense_teacher.mrr")`` → 0.557."""
    node: Any = calibration_numbers()
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(f"no calibration number at {path!r} (missing {key!r})")
        node = node[key]
    return node


def reference_value(path: str) -> Any:
    """``reference_value("convmemory.headline_locomo.methods.raw_dense_mpnet.mrr")`` → 0.3254."""
    return reference_at(*path.split("."))


def reference_at(*keys: str) -> Any:
    """Like :func:`reference_value` with the path given as keys, for names that contain dots
    (``reference_at("rfmem", "table_2", "models", "BAAI/bge-base-en-v1.5")``)."""
    node: Any = reference_numbers()
    for i, key in enumerate(keys):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(f"no reference number at {'/'.join(keys)!r} (missing {key!r} after "
                           f"{'/'.join(keys[:i]) or 'the root'!r})")
        node = node[key]
    return node


@lru_cache(maxsize=1)
def paper_settings() -> dict[str, Any]:
    """What each paper's numbers were computed on, by benchmark (``paper_settings.yaml``): data files, scored
    queries, encoders, latency hardware. Read by the protocol check (``memrepro.checks``)."""
    text = resources.files(__package__).joinpath("paper_settings.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["benchmarks"]
