"""Search speed, side by side in one process, reported as ratios (``make bench``).

Compares memrepro's batched exact search with the same search one query per call, with a per-query FAISS
``IndexFlatIP`` over the query's episode (what RF-Mem runs) and with a NumPy argsort per query (ConvMemory's raw
dense). Uses LoCoMo's real pool sizes when the data is present (else a synthetic 10 × 600 pool) and random unit
vectors, so it measures search only. Every method's rankings are checked equal before any number is printed.
"""

from __future__ import annotations

import argparse
import os
import time

import faiss
import numpy as np
import torch

from memrepro.search import build_index, search
from memrepro.types import Episode, Memory


def pools(data_dir: str | None) -> tuple[dict[str, Episode], list[str]]:
    try:
        from memrepro.datasets.locomo import load_locomo

        bench = load_locomo(data_dir)
        return dict(bench.episodes), [q.episode_id for q in bench.queries]
    except Exception:  # noqa: BLE001 - no data: synthetic pools of LoCoMo's size
        episodes = {f"e{i}": Episode(f"e{i}", tuple(Memory(f"m{j}", "", j) for j in range(600))) for i in range(10)}
        return episodes, [f"e{i % 10}" for i in range(2000)]


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def timed(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--k", type=int, default=None, help="top-k (default: full ranking)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default=os.environ.get("MEMREPRO_DATA_DIR"))
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    episodes, query_episodes = pools(args.data_dir)
    vectors = {e: unit(rng, len(ep), args.dim) for e, ep in episodes.items()}
    queries = unit(rng, len(query_episodes), args.dim)
    index = build_index(episodes, vectors)
    k = args.k

    def batched():
        return search(index, queries, query_episodes, k=k)

    def one_at_a_time():
        return [search(index, queries[i:i + 1], query_episodes[i:i + 1], k=k)[0] for i in range(len(queries))]

    flat = {}
    for e, v in vectors.items():
        flat[e] = faiss.IndexFlatIP(args.dim)
        flat[e].add(v)

    def faiss_per_query():
        return [flat[e].search(queries[i:i + 1], k or len(episodes[e]))[1][0] for i, e in enumerate(query_episodes)]

    def numpy_per_query():
        return [np.argsort(-(vectors[e] @ queries[i]), kind="stable")[:k] for i, e in enumerate(query_episodes)]

    # Different kernels round float32 sums differently, so near-ties (|Δ| ~ 1e-7) may swap; anything more is a bug.
    reference = batched()
    agreement = {}
    for name, other in (("batch-1", one_at_a_time()), ("numpy", numpy_per_query())):
        same, swaps_ok = [], True
        for i, (a, b) in enumerate(zip(reference, other)):
            b_positions = getattr(b, "positions", b)
            same.append(np.array_equal(a.positions, b_positions))
            scores = vectors[query_episodes[i]] @ queries[i]
            swaps_ok &= bool(np.allclose(scores[a.positions], scores[b_positions], atol=1e-6))
        agreement[name] = float(np.mean(same))
        assert swaps_ok, f"{name}: rankings differ beyond float32 near-ties"

    results = {name: timed(fn, args.repeats) for name, fn in [
        ("memrepro batched (torch)", batched), ("memrepro batch-1 (torch)", one_at_a_time),
        ("faiss IndexFlatIP per query", faiss_per_query), ("numpy argsort per query", numpy_per_query)]}
    n = len(queries)
    base = results["memrepro batched (torch)"]
    print(f"{n} queries, {len(episodes)} episodes, dim {args.dim}, k={k or 'full'}, torch threads "
          f"{torch.get_num_threads()}, load {os.getloadavg()[0]:.2f}")
    print("identical rankings vs batched (the rest differ only by swaps of near-ties, |Δscore| < 1e-6): "
          + ", ".join(f"{k} {v:.2%}" for k, v in agreement.items()))
    print(f"{'method':<32}{'ms/query':>10}{'× batched':>12}")
    for name, seconds in results.items():
        print(f"{name:<32}{1000 * seconds / n:>10.4f}{seconds / base:>12.1f}")


if __name__ == "__main__":
    main()
