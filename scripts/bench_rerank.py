"""Reranking cost: the v2 cascade (top-10, v2 format, max length 256) vs the full pool (top-500, plain pairs,
library max length) with the **same** cross-encoder, measured side by side in one process (``make bench``).

ConvMemory reports ~68x (28.6 ms vs 1960.2 ms on an RTX 4080 SUPER, with mxbai-large for the pool). Here both
stages use one model, so the ratio isolates the candidate count and sequence length. Timed region: scoring the
pairs, tokenisation included, plus the sort (CMR App. A), after a warm-up query; mean over queries.
Needs the LoCoMo data and the mpnet embeddings (for the dense pools); the cross-encoder is a local folder
(``--cross-encoder``, e.g. a ``memrepro train`` checkpoint) or, by default, one built offline from the MiniLM
bundle (random head: fine for timing, meaningless scores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from memrepro.datasets.locomo import load_locomo
from memrepro.models.cross_encoder import CrossEncoderScorer
from memrepro.models.encoder import CachedEncoder, SentenceTransformerEncoder
from memrepro.models.resolve import cache_root, resolve_model
from memrepro.retrievers.cascade import memory_position, v2_pairs
from memrepro.search import build_index, search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--cross-encoder", default=None, help="local cross-encoder folder")
    parser.add_argument("--pool", type=int, default=500)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data-dir", default=os.environ.get("MEMREPRO_DATA_DIR"))
    args = parser.parse_args()

    bench = load_locomo(args.data_dir)
    encoder = CachedEncoder(SentenceTransformerEncoder("all-mpnet-base-v2", device=args.device,
                                                       show_progress=False), cache_root() / "embeddings")
    texts = [m.text for e in bench.episodes.values() for m in e.memories]
    matrix, vectors, offset = encoder.encode(texts, "document"), {}, 0
    for episode_id, episode in bench.episodes.items():
        vectors[episode_id] = matrix[offset:offset + len(episode)]
        offset += len(episode)
    index = build_index(bench.episodes, vectors)
    queries = list(bench.queries)[:: max(1, len(bench.queries) // (args.queries + 1))][: args.queries + 1]
    query_vectors = encoder.encode([q.text for q in queries], "query")
    hits = search(index, query_vectors, [q.episode_id for q in queries])

    folder = args.cross_encoder
    if folder is None:
        from sentence_transformers import CrossEncoder

        folder = str(Path(tempfile.mkdtemp()) / "minilm-ce")
        CrossEncoder(resolve_model("all-MiniLM-L6-v2").path, num_labels=1).save(folder)
    cascade = CrossEncoderScorer(folder, path=folder, max_length=256, device=args.device)
    fullpool = CrossEncoderScorer(folder, path=folder, max_length=None, device=args.device)

    def cascade_query(query, hit):
        memories = bench.episodes[query.episode_id].memories
        head = hit.positions[:10].tolist()
        candidates = [{"id": memories[p].id, "text": memories[p].text,
                       "position": memory_position(memories[p].id, r)} for r, p in enumerate(head)]
        return np.argsort(-cascade.score(v2_pairs(query.text, candidates)), kind="stable")

    def fullpool_query(query, hit):
        memories = bench.episodes[query.episode_id].memories
        head = hit.positions[: args.pool].tolist()
        return np.argsort(-fullpool.score([(query.text, memories[p].text) for p in head]), kind="stable")

    timings = {"cascade (top-10, v2 format, len 256)": [], f"full pool (top-{args.pool}, plain, len 512)": []}
    for i, (query, hit) in enumerate(zip(queries, hits)):
        for name, fn in zip(timings, (cascade_query, fullpool_query)):
            start = time.perf_counter()
            fn(query, hit)
            if i > 0:  # the first query is the warm-up
                timings[name].append(1000 * (time.perf_counter() - start))
    means = {name: statistics.fmean(values) for name, values in timings.items()}
    names = list(means)
    print(f"{len(queries) - 1} LoCoMo queries (after 1 warm-up), cross-encoder {cascade.label}, device "
          f"{args.device}, load {os.getloadavg()[0]:.2f}")
    for name in names:
        print(f"  {name:<40} {means[name]:9.1f} ms/query (median {statistics.median(timings[name]):.1f})")
    print(f"  full pool / cascade cost ratio: {means[names[1]] / means[names[0]]:.1f}x "
          f"(ConvMemory: 1960.2 / 28.6 = 68.5x with mxbai-large as the pool model)")


if __name__ == "__main__":
    main()
