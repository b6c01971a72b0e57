"""Encoders (MTEB-style small protocol): ``encode(texts, role) -> unit-norm float32 matrix`` plus an identity.

``SentenceTransformerEncoder`` wraps sentence-transformers with memrepro's name resolution; ``FakeEncoder`` is a
seeded hashed bag-of-words stand-in for tests and smoke runs (shipped, like MTEB's mocks); ``CachedEncoder``
puts the on-disk cache in front of either and counts what it actually encoded.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Literal, Protocol, Sequence

import numpy as np

from memrepro.context import FileDigests, RunContext
from memrepro.errors import ConfigError
from memrepro.models.cache import EmbeddingCache, text_sha256
from memrepro.models.resolve import ResolvedModel, resolve_model, weights_identity

Role = Literal["query", "document"]
ROLE_PLURALS = {"query": "queries", "document": "documents"}  # the progress bar's label


class Encoder(Protocol):
    identity: dict[str, object]  # everything that changes a vector except the role prefix
    label: str  # what tables print (names a substitute as such)

    def encode(self, texts: Sequence[str], role: Role) -> np.ndarray: ...


# What a machine where torch could see a GPU has: NVIDIA's driver, ROCm's, or WSL's GPU bridge (Linux only here).
ACCELERATOR_DEVICES = ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/kfd", "/dev/dxg")


def resolve_device(device: str) -> str:
    """``auto``: cuda where torch sees a GPU, else cpu. A Linux machine with no GPU driver at all is cpu without
    importing torch (a second of start-up a skipped run does not need)."""
    if device != "auto":
        return device
    if sys.platform.startswith("linux") and not any(os.path.exists(p) for p in ACCELERATOR_DEVICES):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def unit_normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm; zero rows stay zero (score 0 against everything, never NaN)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def max_positions(folder: str) -> int | None:
    """How many tokens the model in ``folder`` reads at most: its tokenizer's ``model_max_length``, else its
    config's ``max_position_embeddings``; None when neither file says (or ``folder`` is not a local folder)."""
    for name, key in (("tokenizer_config.json", "model_max_length"), ("config.json", "max_position_embeddings")):
        try:
            value = json.loads((Path(folder) / name).read_text(encoding="utf-8")).get(key)
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, int) and 0 < value < 1_000_000:  # transformers writes 1e30 for "no limit known"
            return value
    return None


class SentenceTransformerEncoder:
    def __init__(self, model: str, path: str | None = None, allow_substitute: bool = False,
                 max_seq_length: int | None = None, batch_size: int = 64, query_prefix: str = "",
                 document_prefix: str = "", device: str = "auto", show_progress: bool = True,
                 context: RunContext | None = None) -> None:
        self._request = (model, path, allow_substitute)
        self.context = context  # the run's: loading the model checks its weights once, and a repair is recorded
        # where the model is, nothing read: a complete run is skipped on its identity; loading verifies the bytes
        self.resolved: ResolvedModel = resolve_model(model, path, allow_substitute, verify=False, context=context)
        self._requested_max_len = max_seq_length
        self._check_max_len(self.resolved.path)
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.prefixes = {"query": query_prefix, "document": document_prefix}
        self.show_progress = show_progress
        self._model = None
        self.load_seconds = 0.0
        self.identity = {
            "kind": "sentence-transformers",
            "model": self.resolved.name,
            "weights": weights_identity(self.resolved),  # a bundle's pins, else hashed by content in this process
            "max_seq_length": max_seq_length or "model-default",
            "normalize": True,
            "dtype": "float32",
        }
        self.weights_verified = self.identity["weights"] != "unknown"  # a local folder with no weights file to hash
        self.label = self.resolved.label

    def _check_max_len(self, folder: str) -> None:
        """``max_seq_length`` within what the model in ``folder`` reads (checked as soon as the folder exists, so
        before anything is encoded): longer inputs would index past its position embeddings."""
        limit = max_positions(folder)
        if self._requested_max_len is not None and limit is not None and self._requested_max_len > limit:
            raise ConfigError("encoder.max_seq_length", self._requested_max_len,
                              f"an integer in [1, {limit}] ({self.resolved.name} reads at most {limit} tokens)")

    @property
    def dim(self) -> int | None:
        """The width of its vectors as its folder declares it (read, not loaded: a training plan needs it), or
        None when the folder does not say (the caller encodes a probe)."""
        return declared_dim(Path(self.resolved.path))

    @property
    def model(self):
        """Loaded on first encode, so a run served entirely from the cache never loads the model."""
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            start = time.perf_counter()
            # a bundle extracted if needed and its bytes checked against its pins
            ready = resolve_model(*self._request, context=self.context)
            self._check_max_len(ready.path)
            self._model = SentenceTransformer(ready.path, device=self.device)
            if self._requested_max_len:
                self._model.max_seq_length = self._requested_max_len
            self.load_seconds = time.perf_counter() - start
        return self._model

    def encode(self, texts: Sequence[str], role: Role) -> np.ndarray:
        prefix = self.prefixes[role]
        show = self.show_progress and len(texts) > 4096 and not os.environ.get("TQDM_DISABLE")
        vectors = self.model.encode([prefix + t for t in texts], batch_size=self.batch_size,
                                    normalize_embeddings=True, convert_to_numpy=True,
                                    show_progress_bar=show)
        return unit_normalise(vectors)


# sentence-transformers' pooling modes: the pooled vector is the token width times the modes that are on
POOLING_MODES = ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens",
                 "lasttoken")


def declared_dim(folder: Path) -> int | None:
    """The output width a sentence-transformers folder declares: its modules (``modules.json``) in order, the
    pooling width (token width × pooling modes) then any dense layer's ``out_features``; None when a module is
    of another kind or a file is missing."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        dim = None
        for module in modules:
            kind = module["type"].rsplit(".", 1)[-1]
            if kind in ("Transformer", "Normalize"):
                continue
            config = json.loads((folder / module["path"] / "config.json").read_text(encoding="utf-8"))
            if kind == "Pooling":
                dim = config["word_embedding_dimension"] * sum(bool(config.get(f"pooling_mode_{m}"))
                                                                for m in POOLING_MODES)
            elif kind == "Dense":
                dim = config["out_features"]
            else:
                return None
        return int(dim) if dim else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


class FakeEncoder:
    """Deterministic hashed bag-of-words: texts sharing words get similar vectors. For tests and smoke runs only."""

    def __init__(self, dim: int = 64, seed: int = 0) -> None:
        self.dim, self.seed = dim, seed
        self.identity = {"kind": "fake", "dim": dim, "seed": seed, "normalize": True, "dtype": "float32"}
        self.label = f"fake-bow-{dim}d"
        self.prefixes = {"query": "", "document": ""}

    def _token_vector(self, token: str) -> np.ndarray:
        digest = hashlib.sha256(f"{self.seed}:{token}".encode()).digest()
        return np.random.default_rng(int.from_bytes(digest[:8], "little")).standard_normal(self.dim)

    def encode(self, texts: Sequence[str], role: Role) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            tokens = "".join(c.lower() if c.isalnum() else " " for c in text).split()
            for token in tokens or [f"\0{text}"]:
                out[row] += self._token_vector(token)
        return unit_normalise(out)


class CachedEncoder:
    """An encoder behind the embedding cache; ``encoded`` counts texts that actually went through the model.
    ``digests``: the run context's (each shard hashed once by a sweep's points)."""

    def __init__(self, inner: Encoder, cache_dir: str | os.PathLike[str] | None, chunk_size: int = 2048,
                 progress: bool = True, digests: FileDigests | None = None) -> None:
        self.inner = inner
        self.digests = digests
        self.chunk_size = chunk_size  # each chunk is stored as it finishes: an interrupted encode resumes
        self.progress = progress
        self.cache_dir = cache_dir
        self.identity = inner.identity
        self.label = inner.label
        self.encoded = {"query": 0, "document": 0}
        self.cache_hits = {"query": 0, "document": 0}
        self.encode_seconds = 0.0
        self._caches: dict[str, EmbeddingCache] = {}

    def _cache(self, role: Role) -> EmbeddingCache | None:
        if self.cache_dir is None or not getattr(self.inner, "weights_verified", True):
            return None  # vectors of weights whose content was not hashed would be stored under a guessed identity
        if role not in self._caches:
            prefix = getattr(self.inner, "prefixes", {}).get(role, "")
            self._caches[role] = EmbeddingCache(self.cache_dir, {**self.identity, "prefix": prefix},
                                                reencode=lambda texts: self._encode(texts, role),
                                                digests=self.digests)
        return self._caches[role]

    def _encode(self, texts: Sequence[str], role: Role) -> np.ndarray:
        """Texts through the model, counted and timed (new rows, and cached rows the cache asks to check)."""
        began = time.perf_counter()
        vectors = self.inner.encode(texts, role)
        self.encode_seconds += time.perf_counter() - began
        self.encoded[role] += len(texts)
        return vectors

    @property
    def quarantined(self) -> list[dict[str, object]]:
        """Damaged cache shards found (and moved aside) by this encoder: their rows were encoded again."""
        return [vars(q) for cache in self._caches.values() for q in cache.quarantined]

    def encode(self, texts: Sequence[str], role: Role) -> np.ndarray:
        dim_probe: np.ndarray | None = None
        cache = self._cache(role)
        keys = [text_sha256(t) for t in texts]
        # Encode each distinct text once (LoCoMo repeats turns, LongMemEval repeats sessions).
        unique_keys = list(dict.fromkeys(keys))
        first_text = {k: t for k, t in zip(reversed(keys), reversed(texts))}
        found, missing = (cache.lookup(unique_keys, [first_text[k] for k in unique_keys]) if cache
                          else ({}, list(range(len(unique_keys)))))
        vectors: dict[str, np.ndarray] = {unique_keys[i]: v for i, v in found.items()}
        from tqdm.auto import tqdm  # here, as in training: tqdm.auto loads asyncio, a skip or restore needs neither

        with tqdm(total=len(missing), desc=f"encode {ROLE_PLURALS[role]}", unit="text", disable=not self.progress or
                  len(missing) < 256 or bool(os.environ.get("TQDM_DISABLE"))) as bar:
            for start_at in range(0, len(missing), self.chunk_size):
                chunk = missing[start_at:start_at + self.chunk_size]
                new = self._encode([first_text[unique_keys[i]] for i in chunk], role)
                if cache:
                    cache.store([unique_keys[i] for i in chunk], new)
                for row, i in enumerate(chunk):
                    vectors[unique_keys[i]] = new[row]
                dim_probe = new
                bar.update(len(chunk))
        self.cache_hits[role] += len(unique_keys) - len(missing)
        if not texts:
            dim = dim_probe.shape[1] if dim_probe is not None else 0
            return np.zeros((0, dim), dtype=np.float32)
        return np.stack([vectors[k] for k in keys]).astype(np.float32, copy=False)
