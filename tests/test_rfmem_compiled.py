"""What only the compiled Recollection engine (``memrepro.retrievers.rfmem.compiled``) has: shared pools and its
input checks, its scikit-learn KMeans replay, its faithful-engine fallback, its probe, and its agreement with the
faithful engine on random pools at the benchmark settings.

The engines: docs/retrievers.md#engines. The scenarios both engines must answer alike are in
``test_rfmem_engines.py`` (parametrised over the engines); the random pools are its.
"""

from __future__ import annotations

import math
import warnings
import zlib

import numpy as np
import pytest

from memrepro.retrievers.rfmem import compiled
from memrepro.retrievers.rfmem.compiled import (KMEANS_NOT_REPLAYED, KMEANS_OK, KMEANS_RELOCATED, kmeans_labels,
                                                recollect_compiled)
from memrepro.retrievers.rfmem.params import RecollectionParams
from memrepro.retrievers.rfmem.recollection import recollect_faithful
from memrepro.retrievers.rfmem.result import RecollectionResult
from tests.test_rfmem_engines import AGREEMENT_SETTINGS, HAND_POOL, Q0, random_pool, random_query, unit


def run(q0: np.ndarray, pool: np.ndarray, params: RecollectionParams) -> RecollectionResult:
    """One query through the compiled engine."""
    pools = np.ascontiguousarray(pool, dtype=np.float32)[None]
    return recollect_compiled(np.asarray(q0, np.float32)[None], pools, np.array([len(pool)]), np.array([0]),
                              params).results[0]


def run_many(q0s: np.ndarray, pools: list[np.ndarray], params: RecollectionParams) -> compiled.RecollectionBatch:
    """Many queries, each with its own pool, padded into one (E, L, d) array."""
    width = max([len(p) for p in pools] + [1])
    padded = np.zeros((len(pools), width, q0s.shape[1]), dtype=np.float32)
    for i, pool in enumerate(pools):
        padded[i, :len(pool)] = pool
    return recollect_compiled(q0s, padded, np.array([len(p) for p in pools]), np.arange(len(pools)), params)


# ---------------------------------------------------------------------------------------------------------------
# shared pools and input checks


def test_padding_is_never_emitted_and_pools_can_be_shared() -> None:
    rng = np.random.default_rng(9)
    pools = [random_pool(rng, n, 8) for n in (3, 9, 1, 6)]
    padded = np.zeros((4, 9, 8), np.float32)
    for i, pool in enumerate(pools):
        padded[i, :len(pool)] = pool
    of_query = np.array([0, 1, 1, 2, 3, 1, 0])  # several queries per pool; nothing is copied per query
    q0s = np.stack([random_query(rng, pools[e]) for e in of_query])
    params = RecollectionParams(k=20, beam=3, fanout=2, rounds=10, min_sim=None)  # no floor to hide padding
    batch = recollect_compiled(q0s, padded, np.array([len(p) for p in pools]), of_query, params)
    for q0, e, result in zip(q0s, of_query, batch.results):
        assert sorted(result.positions) == list(range(len(pools[e])))
        assert result.positions == recollect_faithful(q0, pools[e], params).positions


def test_no_queries() -> None:
    empty = recollect_compiled(np.zeros((0, 3), np.float32), HAND_POOL[None], np.array([7]),
                               np.zeros(0, np.int64), RecollectionParams())
    assert empty.results == [] and empty.fallbacks == 0


@pytest.mark.parametrize("variant", [{"clustering": "dbscan"}, {"mixing": "gated"}, {"expansion": "graph_bfs"}])
def test_rejects_faithful_only_variants(variant: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(variant))):
        run(Q0, HAND_POOL, RecollectionParams(**variant))


def test_rejects_non_finite_query_and_bad_shapes() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        run(np.array([np.nan, 0, 0], np.float32), HAND_POOL, RecollectionParams())
    with pytest.raises(ValueError, match="expected"):
        recollect_compiled(np.zeros((2, 3)), np.zeros((3, 4, 3)), np.array([4, 4, 4]), np.array([0]),
                           RecollectionParams())
    with pytest.raises(ValueError, match="index the 1 pools"):
        recollect_compiled(np.zeros((1, 3)), HAND_POOL[None], np.array([7]), np.array([1]), RecollectionParams())
    with pytest.raises(ValueError, match="dimension"):
        recollect_compiled(np.zeros((1, 4)), HAND_POOL[None], np.array([7]), np.array([0]), RecollectionParams())


# ---------------------------------------------------------------------------------------------------------------
# the scikit-learn KMeans replay


def _sklearn_labels(rows: np.ndarray, k: int) -> np.ndarray:
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return KMeans(n_clusters=k, random_state=42, n_init="auto").fit_predict(rows)


def _kmeans_problems(rng: np.random.Generator, count: int, dim: int, max_k: int):
    problems = []
    for i in range(count):
        n = int(rng.integers(1, 20))
        kind = i % 3
        if kind == 0:
            x = rng.standard_normal((n, dim))
        elif kind == 1:
            centres = rng.standard_normal((3, dim))
            x = centres[rng.integers(0, 3, n)] + 0.3 * rng.standard_normal((n, dim))
        else:  # duplicates
            base = rng.standard_normal((max(1, n // 2), dim))
            x = base[rng.integers(0, len(base), n)]
        problems.append((unit(x), int(min(rng.integers(1, max_k + 1), n))))
    return problems


def test_kmeans_replay_matches_sklearn() -> None:
    problems = _kmeans_problems(np.random.default_rng(0), 90, 24, 4)
    identical = 0
    for rows, k in problems:
        labels, status = kmeans_labels(rows, k)
        assert status != KMEANS_NOT_REPLAYED
        identical += np.array_equal(labels, _sklearn_labels(rows, k))
    assert identical == len(problems), f"{identical}/{len(problems)} identical label vectors"


def test_kmeans_replay_relocates_or_refuses_but_never_guesses() -> None:
    """Tiny problems with repeated or nearly repeated points: Lloyd can empty a cluster. An unambiguous relocation
    (one empty cluster, one farthest point) is replayed and must give scikit-learn's labels; an ambiguous one (tied
    farthest points, whose pick is np.argpartition's implementation detail) is refused, and the engine then asks
    the faithful engine. Relocation is rare (about 1 in 3,000 of the near-duplicate problems), hence the counts."""
    rng = np.random.default_rng(0)
    seen = {KMEANS_OK: 0, KMEANS_RELOCATED: 0, KMEANS_NOT_REPLAYED: 0}
    wrong_relocated = wrong_sampled = sampled = 0
    for i in range(3400):
        n, dim = int(rng.integers(3, 12)), int(rng.choice([2, 3]))
        base = rng.standard_normal((int(rng.integers(1, n + 1)), dim))
        noise = 0.05 if i >= 400 or rng.random() < 0.5 else 0.0  # the first 400: half with exact copies
        x = unit(base[rng.integers(0, len(base), n)] + noise * rng.standard_normal((n, dim)))
        k = int(rng.integers(2, min(n, 6) + 1))
        labels, status = kmeans_labels(x, k)
        seen[status] += 1
        if status == KMEANS_RELOCATED:
            wrong_relocated += not np.array_equal(labels, _sklearn_labels(x, k))
        elif status == KMEANS_OK and i % 20 == 0:
            sampled += 1
            wrong_sampled += not np.array_equal(labels, _sklearn_labels(x, k))
    assert seen[KMEANS_RELOCATED] > 0 and seen[KMEANS_NOT_REPLAYED] > 0, seen
    assert wrong_relocated == 0, f"{wrong_relocated} relocations differ from scikit-learn ({seen})"
    # points 0.05 apart in 2-3 dimensions make k-means++ potentials tie to about one float32 ulp, where summation
    # order (OpenBLAS's sgemv vs ours) decides: 1 of these 170 
    assert wrong_sampled <= 2, f"{wrong_sampled}/{sampled} sampled problems differ from scikit-learn"


def test_kmeans_k_equals_n_follows_kmeans_plusplus_pick_order() -> None:
    rng = np.random.default_rng(1)
    for n in (2, 3, 4, 5, 8):
        rows = unit(rng.standard_normal((n, 16)))
        labels, _ = kmeans_labels(rows, n)
        assert labels.tolist() == _sklearn_labels(rows, n).tolist()


def test_ambiguous_relocation_falls_back_to_the_faithful_engine(monkeypatch) -> None:
    """A query whose clustering cannot be replayed is answered by the faithful engine, and counted."""
    rng = np.random.default_rng(5)
    pools = [random_pool(rng, 30, 16, duplicates=0.3) for _ in range(6)]
    q0s = np.stack([random_query(rng, p) for p in pools])
    params = RecollectionParams(k=10, beam=3, fanout=2, alpha=0.5, mmr_lambda=0.9, min_sim=0.0)
    calls = []
    real = compiled.recollect_faithful

    def spy(q0, pool, p):
        calls.append(len(pool))
        return real(q0, pool, p)

    monkeypatch.setattr(compiled, "recollect_faithful", spy)
    # force every query down the fallback path through the kernel's flag
    monkeypatch.setattr(compiled, "_recollect_all", _refuse_all(compiled._recollect_all))
    batch = run_many(q0s, pools, params)
    assert batch.fallbacks == len(pools) == len(calls)
    for q0, pool, result in zip(q0s, pools, batch.results):
        assert result == real(q0, pool, params)


def _refuse_all(kernel):
    def refusing(*args):
        kernel(*args)
        args[-1][:] = False  # ok flags: as if every query had met an ambiguous relocation
    return refusing


# ---------------------------------------------------------------------------------------------------------------
# agreement with the faithful engine


@pytest.mark.parametrize("name", sorted(AGREEMENT_SETTINGS))
def test_agreement_with_faithful_engine(name: str) -> None:
    params = AGREEMENT_SETTINGS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    pools = [random_pool(rng, int(rng.integers(8, 45)), 32, duplicates=0.05 if i % 4 == 0 else 0.0)
             for i in range(24)]
    q0s = np.stack([random_query(rng, p) for p in pools])
    batch = run_many(q0s, pools, params)
    for i, (q0, pool, ours) in enumerate(zip(q0s, pools, batch.results)):
        reference = recollect_faithful(q0, pool, params)
        assert ours.positions == reference.positions, f"{name}: query {i}"
        assert ours.trace == reference.trace, f"{name}: query {i}"
        assert np.allclose(ours.scores, reference.scores, rtol=0, atol=1e-6)


def test_top_k_is_the_dense_ranking_with_the_tie_rule() -> None:
    """The compiled probe (gate and Familiarity path of engine=compiled): exact top-k, ties by position, duplicate
    memories tied exactly, never padding."""
    rng = np.random.default_rng(11)
    pools = [random_pool(rng, n, 24, duplicates=0.3) for n in (0, 1, 5, 30, 30)]
    padded = np.zeros((len(pools), 30, 24), np.float32)
    for e, pool in enumerate(pools):
        padded[e, :len(pool)] = pool
    of_query = np.array([0, 1, 2, 3, 4, 4, 3, 2])
    q0s = np.stack([unit(rng.standard_normal(24)) for _ in of_query])
    q0s[-1] = pools[2][3]  # a query equal to a memory
    positions, scores, counts = compiled.top_k_compiled(q0s, padded, np.array([len(p) for p in pools]), of_query, 7)
    for i, e in enumerate(of_query):
        pool = pools[e]
        exact = pool.astype(np.float64) @ q0s[i].astype(np.float64)
        expected = sorted(range(len(pool)), key=lambda p: (-exact[p], p))[:7]
        got = positions[i, :counts[i]].tolist()
        assert counts[i] == min(7, len(pool))
        # equal vectors tie exactly and keep position order; otherwise the float64 order (no near-ties here)
        assert got == expected
        assert np.allclose(scores[i, :counts[i]], exact[got], atol=1e-6)
    with pytest.raises(ValueError, match="k must be"):
        compiled.top_k_compiled(q0s, padded, np.array([len(p) for p in pools]), of_query, 0)


def _fake_sklearn(tmp_path, body: str):
    package = tmp_path / "sklearn"
    (package / "cluster").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('never imported')\n")
    (package / "cluster" / "_kmeans.py").write_text(
        "def stable_cumsum(x):\n    return x\n\n\ndef _kmeans_plusplus(X):\n" + body + "\n")
    return tmp_path


@pytest.mark.parametrize("body, expected", [("    return stable_cumsum(X)", False),  # releases up to 1.6
                                            ("    return np.cumsum(X)", True)])  # later ones
def test_the_cumsum_rule_is_read_from_the_source_without_importing_sklearn(tmp_path, monkeypatch, body,
                                                                          expected) -> None:
    import sys

    from memrepro.retrievers.rfmem import kmeans_replay
    monkeypatch.syspath_prepend(str(_fake_sklearn(tmp_path, body)))
    monkeypatch.delitem(sys.modules, "sklearn", raising=False)
    assert kmeans_replay.sklearn_cumsum_is_float32.__wrapped__() is expected
    assert "sklearn" not in sys.modules  # located, never executed (its __init__ raises)


def test_the_cumsum_rule_agrees_with_the_installed_sklearn() -> None:
    import inspect

    from sklearn.cluster import _kmeans

    from memrepro.retrievers.rfmem import kmeans_replay
    expected = "stable_cumsum" not in inspect.getsource(_kmeans._kmeans_plusplus)
    assert kmeans_replay.sklearn_cumsum_is_float32.__wrapped__() is expected
