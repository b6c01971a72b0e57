"""Reranking cost: the v2 cascade (top-10, v2 format) vs the full pool (top-500, plain pairs) with the **same**
cross-encoder and the same max length, side by side in one process (``make bench``; docs/performance.md#benchmarks).

ConvMemory reports ~68x (28.6 ms vs 1960.2 ms on an RTX 4080 SUPER, with mxbai-large for the pool). Here both
stages use one model and one max length, so the ratio isolates the candidate count (and the v2 prefix). Two
regimes, interleaved per round:

* batch-1: one query's pairs per cross-encoder call (an agent answering one question), after a warm-up query;
* amortized: every query's pairs in one call, as ``CascadeRetriever.retrieve`` and the full pool score a batch
  (sentence-transformers sorts the pairs by length, so the padding is bucketed).

Timed region: scoring the pairs, tokenisation included, plus the sort (CMR App. A). The dense pools come from the
embedding cache of ``--encoder`` (encoded once when missing); the cross-encoder is a local folder
(``--cross-encoder``, e.g. a ``memrepro train`` checkpoint) or, by default, one built offline from the MiniLM
bundle (random head: fine for timing, meaningless scores).

    python scripts/bench_rerank.py --queries 20
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
from memrepro.models.resolve import resolve_model
from memrepro.paths import folder_path
from memrepro.retrievers.cascade import as_candidate, v2_pairs
from memrepro.search import build_index, search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--cross-encoder", default=None, help="local cross-encoder folder")
    parser.add_argument("--pool", type=int, default=500)
    parser.add_argument("--protected", type=int, default=10)
    parser.add_argument("--max-length", type=int, default=256, help="both stages (the v2 recipe's length)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of both regimes")
    parser.add_argument("--encoder", default="all-mpnet-base-v2", help="the dense first stage's model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data-dir", default=os.environ.get("MEMREPRO_DATA_DIR"))
    args = parser.parse_args()

    bench = load_locomo(args.data_dir)
    encoder = CachedEncoder(SentenceTransformerEncoder(args.encoder, device=args.device, show_progress=False),
                            folder_path("cache_dir") / "embeddings", progress=False)
    texts = [m.text for e in bench.episodes.values() for m in e.memories]
    matrix, vectors, offset = encoder.encode(texts, "document"), {}, 0
    for episode_id, episode in bench.episodes.items():
        vectors[episode_id] = matrix[offset:offset + len(episode)]
        offset += len(episode)
    index = build_index(bench.episodes, vectors)
    step = max(1, len(bench.queries) // (args.queries + 1))
    queries = list(bench.queries)[::step][: args.queries + 1]
    hits = search(index, encoder.encode([q.text for q in queries], "query"), [q.episode_id for q in queries])

    folder = args.cross_encoder
    if folder is None:
        from sentence_transformers import CrossEncoder

        folder = str(Path(tempfile.mkdtemp()) / "minilm-ce")
        CrossEncoder(resolve_model("all-MiniLM-L6-v2").path, num_labels=1).save(folder)
    scorer = CrossEncoderScorer(folder, path=folder, max_length=args.max_length, device=args.device)

    def cascade_pairs(query, hit) -> list[tuple[str, str]]:
        memories = bench.episodes[query.episode_id].memories
        candidates = [as_candidate(memories[p], r) for r, p in enumerate(hit.positions[: args.protected].tolist())]
        return v2_pairs(query.text, candidates)

    def pool_pairs(query, hit) -> list[tuple[str, str]]:
        memories = bench.episodes[query.episode_id].memories
        return [(query.text, memories[p].text) for p in hit.positions[: args.pool].tolist()]

    def scored(pairs_per_query: list[list[tuple[str, str]]]) -> None:
        scores = scorer.score([pair for pairs in pairs_per_query for pair in pairs])
        start = 0
        for pairs in pairs_per_query:
            np.argsort(-scores[start:start + len(pairs)], kind="stable")
            start += len(pairs)

    stages = {"cascade": [cascade_pairs(q, h) for q, h in zip(queries, hits)],
              "full pool": [pool_pairs(q, h) for q, h in zip(queries, hits)]}
    scored([stages["cascade"][0]]), scored([stages["full pool"][0]])  # warm-up query
    timed = {(stage, regime): [] for regime in ("batch-1", "amortized") for stage in stages}
    for _ in range(args.rounds):  # interleaved: both stages, both regimes, every round
        for stage, per_query in stages.items():
            for pairs in per_query[1:]:
                start = time.perf_counter()
                scored([pairs])
                timed[(stage, "batch-1")].append(1000 * (time.perf_counter() - start))
            start = time.perf_counter()
            scored(per_query[1:])
            timed[(stage, "amortized")].append(1000 * (time.perf_counter() - start) / len(per_query[1:]))

    n_pairs = {stage: statistics.fmean(len(p) for p in per_query[1:]) for stage, per_query in stages.items()}
    print(f"{len(queries) - 1} LoCoMo queries (after 1 warm-up), {args.rounds} interleaved rounds; cross-encoder "
          f"{scorer.label}, max length {args.max_length} for both, device {args.device}, "
          f"load {os.getloadavg()[0]:.2f}")
    print("| regime | cascade ms/query | full pool ms/query | full pool / cascade | pairs per query (cascade, pool) |")
    print("|---|---|---|---|---|")
    for regime in ("batch-1", "amortized"):
        cascade, pool = (statistics.median(timed[(s, regime)]) for s in stages)
        print(f"| {regime} | {cascade:.1f} | {pool:.1f} | {pool / cascade:.1f}× | "
              f"{n_pairs['cascade']:.1f}, {n_pairs['full pool']:.1f} |")
    print("(ConvMemory: 1960.2 / 28.6 = 68.5× batch-1 on a GPU, with mxbai-large as the pool model)")


if __name__ == "__main__":
    main()
