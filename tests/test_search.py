"""Batched exact search against a brute-force per-query reference, on a seeded fake encoder."""

from __future__ import annotations

import numpy as np
import pytest

from memrepro.models.encoder import FakeEncoder
from memrepro.retrievers.dense import DenseRetriever
from memrepro.retrievers.base import RetrievalInput
from memrepro.search import build_index, search
from memrepro.types import Episode, Memory


def make_episodes(rng: np.random.Generator, sizes: list[int]) -> dict[str, Episode]:
    words = "alpha beta gamma delta eps zeta eta theta iota kappa lambda mu".split()
    episodes = {}
    for e, size in enumerate(sizes):
        texts = [" ".join(rng.choice(words, size=3)) for _ in range(size)]
        if size >= 3:
            texts[2] = texts[0]  # exact duplicates → exact score ties
        episodes[f"ep{e}"] = Episode(f"ep{e}", tuple(Memory(f"m{i}", t, i) for i, t in enumerate(texts)))
    return episodes


def brute_force(doc: np.ndarray, query: np.ndarray, k: int | None, min_sim: float | None) -> list[int]:
    scores = (doc @ query).astype(np.float32)
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))  # the tie rule, spelled out
    order = order if k is None else order[:k]
    return [i for i in order if min_sim is None or scores[i] >= np.float32(min_sim)]


@pytest.mark.parametrize("sizes,queries_per_episode", [([5, 1, 12, 0, 7], 9), ([40, 3, 17], 1), ([8] * 30, 1)])
@pytest.mark.parametrize("k,min_sim", [(None, None), (4, None), (50, None), (6, 0.2)])
def test_batched_search_matches_brute_force(sizes, queries_per_episode, k, min_sim) -> None:
    rng = np.random.default_rng(7)
    encoder = FakeEncoder(dim=16, seed=3)
    episodes = make_episodes(rng, sizes)
    vectors = {e: encoder.encode([m.text for m in ep.memories], "document") for e, ep in episodes.items()}
    index = build_index(episodes, vectors, dim=16)
    episode_ids = [e for e in episodes for _ in range(queries_per_episode)]
    rng.shuffle(episode_ids)
    texts = [" ".join(rng.choice(["alpha", "beta", "mu", "zeta"], size=2)) for _ in episode_ids]
    query_vectors = encoder.encode(texts, "query")
    for chunk_bytes in (1, 1 << 30):  # one query per chunk, and everything in one chunk
        hits = search(index, query_vectors, episode_ids, k=k, min_sim=min_sim, chunk_bytes=chunk_bytes)
        for h, e, qv in zip(hits, episode_ids, query_vectors):
            expected = brute_force(vectors[e], qv, k, min_sim)
            assert h.positions.tolist() == expected
            np.testing.assert_allclose(h.scores, (vectors[e] @ qv)[expected], atol=1e-6)


def test_empty_episode_and_k_larger_than_episode() -> None:
    episodes = {"empty": Episode("empty", ()), "two": Episode("two", (Memory("a", "x", 0), Memory("b", "y", 1)))}
    vectors = {"empty": np.zeros((0, 4), np.float32), "two": np.eye(4, dtype=np.float32)[:2]}
    index = build_index(episodes, vectors, dim=4)
    hits = search(index, np.eye(4, dtype=np.float32)[[1, 1]], ["empty", "two"], k=10)
    assert hits[0].positions.tolist() == []  # never padding
    assert hits[1].positions.tolist() == [1, 0]


def test_zero_vectors_score_zero_not_nan() -> None:
    encoder = FakeEncoder(dim=8)
    assert np.all(encoder.encode([""], "document") != np.nan)
    episodes = {"e": Episode("e", (Memory("a", "x", 0),))}
    index = build_index(episodes, {"e": np.zeros((1, 8), np.float32)}, dim=8)
    hit = search(index, np.zeros((1, 8), np.float32), ["e"])[0]
    assert hit.scores.tolist() == [0.0]


def test_dense_retriever_modes() -> None:
    episodes = {"e": Episode("e", tuple(Memory(f"m{i}", "t", i) for i in range(5)))}
    vectors = {"e": np.eye(5, dtype=np.float32)}
    index = build_index(episodes, vectors, dim=5)
    query = np.array([[0.1, 0.9, 0.0, 0.3, 0.0]], np.float32)
    inputs = [RetrievalInput("q", "t", "e")]
    full = DenseRetriever("full").retrieve(inputs, query, index)[0].hits
    assert full.positions.tolist() == [1, 3, 0, 2, 4]
    top = DenseRetriever("topk", k=3, min_sim=0.2).retrieve(inputs, query, index)[0].hits
    assert top.positions.tolist() == [1, 3]  # shorter than K: the floor removed one
    with pytest.raises(ValueError, match=r"retriever\.k=None .* when retriever\.mode=topk"):
        DenseRetriever("topk")
    with pytest.raises(ValueError, match="mode"):
        DenseRetriever("sparse")


def test_duplicate_vectors_tie_exactly_and_keep_pool_order() -> None:
    """A single-query (matrix-vector) product can score identical rows a few ulps apart; measured here: without
    the canonical-copy step some of these queries give the copies different scores."""
    rng = np.random.default_rng(3)
    copies = (0, 17, 50, 77, 109)
    for trial in range(20):
        block = rng.standard_normal((110, 768)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        block[list(copies)] = block[0]  # five copies of one memory, in different SIMD lanes
        episodes = {"e": Episode("e", tuple(Memory(f"m{i}", "t", i) for i in range(110)))}
        index = build_index(episodes, {"e": block}, dim=768)
        query = rng.standard_normal((1, 768)).astype(np.float32)
        hit = search(index, query, ["e"])[0]
        order = hit.positions.tolist()
        where = [order.index(p) for p in copies]
        assert where == sorted(where) and where[-1] - where[0] == len(copies) - 1  # adjacent, in pool order
        assert len({float(hit.scores[w]) for w in where}) == 1
