"""What a result needs to be trusted later: code version, library versions, hardware, data hashes."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import uuid
from pathlib import Path
from typing import Any, Mapping

PACKAGES = ("memrepro", "torch", "numpy", "sentence-transformers", "transformers", "faiss-cpu", "ir-measures",
            "pytrec-eval-terrier", "hydra-core", "omegaconf", "scikit-learn", "scipy", "pandas", "numba")
# One id per Python process: runs that share it were timed side by side (one Hydra multirun), under one set of
# conditions; the engine agreement table compares speed only between such runs.
PROCESS_ID = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def config_hash(config: Mapping[str, Any]) -> str:
    """sha256 (first 16 hex) of the canonical JSON of a resolved config."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def git_commit() -> dict[str, Any]:
    """The checkout's commit and whether tracked files differ from it, read once per process: the code a process
    runs is what it imported, and two ``git`` calls per point were a visible part of a sweep's per-point cost."""
    return dict(_git_commit())


@functools.cache
def _git_commit() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=5).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                    capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {"commit": commit, "dirty": dirty}


def package_versions() -> dict[str, str | None]:
    return dict(_package_versions())


@functools.lru_cache(maxsize=1)  # once per process: a sweep point need not re-read every package's metadata
def _package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def hardware(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "device": device,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "process": PROCESS_ID,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info
