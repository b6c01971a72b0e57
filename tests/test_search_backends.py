"""Search backends (issue 15 §1): FAISS exact top-k identical to the padded torch path, duplicates by hashing,
no padded copy of a single episode, approximate backends reported with their recall, run ids unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from memrepro.search import (DEFAULT_CHUNK_BYTES, SearchOptions, _search_torch, approximate_recall, build_index,
                             canonical_rows, error_bound, search)
from memrepro.types import Episode, Memory


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def pool(n: int, name: str = "e") -> Episode:
    return Episode(name, tuple(Memory(f"m{i}", "", i) for i in range(n)))


def unique_canonical(block: np.ndarray) -> np.ndarray:
    """What build_index computed before row hashing."""
    _, first, inverse = np.unique(block, axis=0, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)]


@pytest.mark.parametrize("n, dim, copies", [(0, 8, 0), (1, 8, 0), (50, 4, 30), (3000, 16, 400), (2000, 768, 5)])
def test_canonical_rows_equals_np_unique(n: int, dim: int, copies: int) -> None:
    rng = np.random.default_rng(n)
    block = unit(rng, n, dim) if n else np.zeros((0, dim), np.float32)
    if copies:
        block[rng.integers(0, n, copies)] = block[rng.integers(0, n, copies)]
    assert np.array_equal(canonical_rows(block), unique_canonical(block) if n > 1 else np.arange(n))


def test_canonical_rows_negative_zero_and_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    block = np.array([[0.0, 1.0], [-0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], np.float32)
    assert canonical_rows(block).tolist() == [0, 0, 2, 0]  # -0.0 == 0.0, as np.unique compares
    # every row hashing alike (a forced collision) must still give exact groups
    rng = np.random.default_rng(0)
    block = unit(rng, 200, 8)
    block[[10, 20, 30]] = block[5]
    import memrepro.search as search_module

    monkeypatch.setattr(search_module, "_hash_multipliers", lambda dim: np.zeros(dim, np.uint64))  # all collide
    assert np.array_equal(canonical_rows(block), unique_canonical(block))


def test_build_index_canonical_unchanged_on_benchmark_like_pools() -> None:
    rng = np.random.default_rng(5)
    sizes = [37, 689, 0, 120, 1]
    episodes = {f"e{i}": pool(n, f"e{i}") for i, n in enumerate(sizes)}
    vectors = {}
    for i, n in enumerate(sizes):
        block = unit(rng, n, 32) if n else np.zeros((0, 32), np.float32)
        if n > 10:
            block[[3, n - 1]] = block[0]
        vectors[f"e{i}"] = block
    index = build_index(episodes, vectors, dim=32)
    for row, (e, n) in enumerate(zip(episodes, sizes)):
        expected = unique_canonical(vectors[e]) if n > 1 else np.arange(n)
        assert index.canonical[row, :n].tolist() == expected.tolist()


def test_single_episode_index_is_a_view() -> None:
    block = unit(np.random.default_rng(1), 5000, 24)
    index = build_index({"e": pool(5000)}, {"e": block}, dim=24)
    assert np.shares_memory(index.matrix.numpy(), block) and index.blocks[0] is block


def _compare(index_a, index_b, queries, episode_ids, k, min_sim=None, near_ties=0):
    """Identical lists, except (at most ``near_ties`` queries) swaps of two distinct memories whose exact scores
    lie within float32 rounding of each other (torch scores in float32, FAISS candidates are rescored in float64)."""
    a = search(index_a, queries, episode_ids, k=k, min_sim=min_sim)
    b = search(index_b, queries, episode_ids, k=k, min_sim=min_sim)
    bound = error_bound(queries.shape[1])
    swapped = 0
    for x, y, q in zip(a, b, queries):
        np.testing.assert_allclose(x.scores, y.scores, atol=2 * bound)
        if x.positions.tolist() != y.positions.tolist():
            swapped += 1
            block = index_b.blocks[0].astype(np.float64)
            differ = x.positions != y.positions
            assert np.all(np.abs(block[x.positions[differ]] @ q - block[y.positions[differ]] @ q) <= 2 * bound)
    assert swapped <= near_ties
    return a


@pytest.mark.parametrize("k, min_sim", [(1, None), (10, None), (10, 0.05), (40, None), (5000, None)])
def test_faiss_exact_equals_torch_with_duplicates(k: int, min_sim: float | None) -> None:
    rng = np.random.default_rng(k)
    block = unit(rng, 3000, 64)
    block[[7, 900, 2999, 1500]] = block[1234]  # a group of five copies
    block[100:140] = block[200:240]  # forty pairs
    queries = unit(rng, 120, 64)
    queries[:30] = block[[1234, 200, 210, 7, 100, 239] * 5]  # queries whose best hits are copies
    episodes, vectors = {"e": pool(3000)}, {"e": block}
    torch_index = build_index(episodes, vectors, options=SearchOptions(backend="torch"))
    faiss_index = build_index(episodes, vectors, options=SearchOptions(backend="faiss"))
    # a full ranking of 3,000 random scores has float32 near-ties somewhere; a top-40 practically never does
    hits = _compare(torch_index, faiss_index, queries, ["e"] * len(queries), k, min_sim,
                    near_ties=len(queries) if k > 1000 else 0)
    first = hits[0].positions.tolist()
    assert first[:5] == [7, 900, 1234, 1500, 2999] if k >= 5 else first == [7]  # copies tie, pool order


def test_more_tied_copies_than_the_margin_grows_the_candidate_set() -> None:
    rng = np.random.default_rng(3)
    block = unit(rng, 5000, 32)
    block[rng.choice(5000, 60, replace=False)] = block[17]  # 61 copies of one vector, margin 16
    queries = np.repeat(block[17:18], 4, axis=0) + 0.01 * unit(rng, 4, 32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    episodes, vectors = {"e": pool(5000)}, {"e": block}
    _compare(build_index(episodes, vectors, options=SearchOptions(backend="torch")),
             build_index(episodes, vectors, options=SearchOptions(backend="faiss", margin=2)),
             queries, ["e"] * 4, k=70)


def test_auto_sends_only_large_episodes_to_faiss_and_leaves_the_benchmarks_bit_identical() -> None:
    rng = np.random.default_rng(11)
    sizes = {"small": 300, "medium": 689, "large": 6000}
    episodes = {e: pool(n, e) for e, n in sizes.items()}
    vectors = {e: unit(rng, n, 48) for e, n in sizes.items()}
    episode_ids = [e for e in sizes for _ in range(7)]
    queries = unit(rng, len(episode_ids), 48)
    auto = build_index(episodes, vectors, options=SearchOptions(faiss_min_memories=4096))
    torch_only = build_index(episodes, vectors, options=SearchOptions(backend="torch"))
    got = search(auto, queries, episode_ids, k=10)
    ref = _search_torch(torch_only, queries, episode_ids, 10, None, DEFAULT_CHUNK_BYTES)
    for e, g, r in zip(episode_ids, got, ref):
        assert g.positions.tolist() == r.positions.tolist()
        if e != "large":  # the padded path itself: bit for bit
            assert np.array_equal(g.scores, r.scores)
    full = search(auto, queries, episode_ids)  # full rankings always take the padded path
    assert all(len(h.positions) == sizes[e] for h, e in zip(full, episode_ids))
    small_only = {e: episodes[e] for e in ("small", "medium")}
    index = build_index(small_only, {e: vectors[e] for e in small_only})
    ids = [e for e in small_only for _ in range(5)]
    for a, b in zip(search(index, queries[: len(ids)], ids), _search_torch(index, queries[: len(ids)], ids, None,
                                                                           None, DEFAULT_CHUNK_BYTES)):
        assert a.positions.tolist() == b.positions.tolist() and np.array_equal(a.scores, b.scores)


@pytest.mark.parametrize("backend", ["faiss_hnsw", "faiss_ivf"])
def test_approximate_backends_report_recall_against_exact(backend: str) -> None:
    rng = np.random.default_rng(2)
    centres = unit(rng, 20, 32)
    block = centres[rng.integers(0, 20, 6000)] + 0.3 * unit(rng, 6000, 32)  # clustered: ANN-friendly
    block = (block / np.linalg.norm(block, axis=1, keepdims=True)).astype(np.float32)
    queries = unit(rng, 50, 32)
    index = build_index({"e": pool(6000)}, {"e": block},
                        options=SearchOptions(backend=backend, faiss_min_memories=1000, ivf_nprobe=8))
    report = approximate_recall(index, queries, ["e"] * 50, k=10)
    assert report["backend"] == backend and report["n_queries"] == 50
    assert 0.5 <= report["recall_at_k"] <= 1.0
    hits = search(index, queries, ["e"] * 50, k=10)
    assert all(np.all(np.diff(h.scores) <= 0) for h in hits)  # still in tie-rule order
    exact = build_index({"e": pool(6000)}, {"e": block}, options=SearchOptions(backend="faiss"))
    assert approximate_recall(exact, queries, ["e"] * 50, k=10)["recall_at_k"] == 1.0


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="search.backend"):
        SearchOptions(backend="annoy")


def test_exact_backends_keep_the_run_id_approximate_ones_change_it() -> None:
    from hydra import compose, initialize_config_dir

    from memrepro.runs.identity import semantic_config

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        default = semantic_config(compose(config_name="config"))
        faiss = semantic_config(compose(config_name="config", overrides=["search.backend=faiss"]))
        hnsw = semantic_config(compose(config_name="config", overrides=["search.backend=faiss_hnsw"]))
    assert "search" not in default and default == faiss
    assert hnsw["search"]["backend"] == "faiss_hnsw"


@pytest.mark.integration
def test_cli_run_with_an_approximate_backend_reports_its_recall(tmp_path: Path, fixtures_dir: Path) -> None:
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(fixtures_dir), "MEMREPRO_RESULTS_DIR": str(tmp_path / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp_path / "cache"), "MEMREPRO_LOG_DIR": str(tmp_path / "logs"),
           "TQDM_DISABLE": "1"}
    out = subprocess.run([sys.executable, "-m", "memrepro", "run", "dataset=locomo", "retriever=familiarity",
                          "retriever.k=5", "encoder=fake", "latency.batch1_queries=0", "search.backend=faiss_hnsw",
                          "search.faiss_min_memories=1", "dataset.allow_unverified=true"],  # the fixture sits at a pinned path
                         capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    metrics = json.loads(next((tmp_path / "results").rglob("metrics.json")).read_text())
    assert metrics["search"]["backend"] == "faiss_hnsw" and metrics["search"]["k"] == 10
    assert 0.0 <= metrics["search"]["recall_at_k"] <= 1.0


def test_cuda_fallback_is_torch_topk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device branch of the candidate step (torch.topk), exercised on the CPU by faking the device type."""
    import memrepro.search as search_module

    rng = np.random.default_rng(4)
    block = unit(rng, 5000, 16)
    queries = unit(rng, 20, 16)
    index = build_index({"e": pool(5000)}, {"e": block}, options=SearchOptions(backend="faiss"))
    scores, cands = search_module._candidates(index, 0, queries, 12)
    top = torch.topk(torch.from_numpy(queries) @ torch.from_numpy(block).T, 12, dim=1)
    assert np.array_equal(np.sort(cands, axis=1), np.sort(top.indices.numpy(), axis=1))
