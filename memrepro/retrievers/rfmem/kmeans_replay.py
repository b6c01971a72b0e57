"""What replaying scikit-learn's ``KMeans(n_clusters=k, random_state=seed)`` needs from outside the Lloyd loop.

The compiled engine (``compiled.py``) replays scikit-learn's k-means++ and Lloyd operation by operation so that
its clusters are the faithful engine's; these are the parts that depend on scikit-learn's random stream and on
the installed release, computed on the host once and handed to the kernels.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

import numpy as np

KMEANS_MAX_ITER = 300  # scikit-learn's defaults, as the official code calls KMeans
KMEANS_TOL = 1e-4


def n_local_trials(k: int) -> int:
    """scikit-learn's k-means++ trials per centre after the first: ``2 + int(log k)``."""
    return 2 + int(np.log(k))


@functools.lru_cache(maxsize=64)
def uniform_stream(seed: int, count: int) -> np.ndarray:
    """The first ``count`` doubles of ``RandomState(seed)``: what ``choice`` and ``uniform`` consume in order."""
    return np.random.RandomState(seed).random_sample(count)


@functools.lru_cache(maxsize=4096)
def first_centre(seed: int, n: int) -> int:
    """The first k-means++ centre scikit-learn picks among ``n`` unit-weight samples.

    ``RandomState(seed).choice(n, p=w / w.sum())`` with float32 weights: a float64 cdf of the float32
    probabilities, normalised by its last entry, searched (side="right") with the stream's first double.
    """
    p = np.ones(n, dtype=np.float32) / np.float32(n)
    cdf = p.astype(np.float64).cumsum()
    cdf /= cdf[-1]
    return int(cdf.searchsorted(uniform_stream(seed, 1)[0], side="right"))


@functools.lru_cache(maxsize=16)
def first_centres(seed: int, max_n: int) -> np.ndarray:
    """``first[n]`` = ``first_centre(seed, n)`` for every ``n <= max_n``, as one read-only array kernels index."""
    first = np.array([0] + [first_centre(seed, n) for n in range(1, max_n + 1)], dtype=np.int64)
    first.flags.writeable = False  # shared by every call through the cache
    return first


@functools.lru_cache(maxsize=1)
def sklearn_cumsum_is_float32() -> bool:
    """Whether the installed scikit-learn forms the k-means++ cumulative potential in float32.

    Releases up to 1.6 (RF-Mem pins 1.6.1) used ``stable_cumsum`` (float64); later ones call ``np.cumsum`` on
    the float32 distances. The replay follows the installed library so that it agrees with the faithful engine
    run in the same environment; without scikit-learn it follows the pinned 1.6.1.

    Read from ``sklearn/cluster/_kmeans.py``'s source text, located without importing scikit-learn: importing it
    (with scipy.stats) costs more than a whole point of a sweep on the compiled engine.
    """
    spec = importlib.util.find_spec("sklearn")  # a top-level spec: finds the package without executing it
    if spec is None or not spec.submodule_search_locations:
        return False
    path = Path(next(iter(spec.submodule_search_locations))) / "cluster" / "_kmeans.py"
    try:
        source = path.read_text(encoding="utf-8")
    except OSError:  # pragma: no cover - a scikit-learn without sources
        return False
    body = next((ast.get_source_segment(source, node) for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.FunctionDef) and node.name == "_kmeans_plusplus"), None)
    return body is not None and "stable_cumsum" not in body
