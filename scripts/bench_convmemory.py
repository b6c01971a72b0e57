"""ConvMemory's cost ratios side by side in one process (LoCoMo, MPNet, one split seed's test questions):
raw dense, v1, v1 + v2 (cascade over v1), the cascade over raw dense and the full pool with the same per-seed
cross-encoders. Batch-1 (one query per call, interleaved round robin so drift hits every method alike) and
amortized (all questions in one call). Models are found by recipe hash (or trained on demand, as in `run`).

    python scripts/bench_convmemory.py --seed 7 --queries 100

A cost does not depend on a model's weights, only on its architecture and input lengths. ``--cost-ce same`` gives
the cascade over dense and the full pool the v1 + v2 cross-encoder of the seed (same backbone, same recipe), so the
full pool / cascade ratio can be measured before the cascade-over-dense models are trained; rankings of those two
rows are then meaningless and the output says so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

CONF = str(Path(__file__).resolve().parents[1] / "conf")
METHODS = {  # name -> run overrides (the same configs `python -m memrepro run` composes)
    "dense": ["retriever=dense"],
    "v1": ["retriever=convmemory_v1"],
    "v1+v2": ["retriever=cascade"],
    "cascade over dense": ["retriever=cascade", "first_stage=dense"],
    "full pool (same CE)": ["retriever=fullpool_trained"],
}
COST_ONLY = ("cascade over dense", "full pool (same CE)")  # the rows --cost-ce same gives the v1+v2 weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1, help="batch-1 passes over the queries")
    parser.add_argument("--skip", nargs="*", default=[], help="methods to leave out")
    parser.add_argument("--cost-ce", choices=["own", "same"], default="own",
                        help="same: the dense-stage rows use the v1+v2 cross-encoder (cost only, see above)")
    args = parser.parse_args()

    import memrepro.config  # noqa: F401
    from memrepro.models.encoder import resolve_device
    from memrepro.retrievers.base import RetrievalInput
    from memrepro.models.cross_encoder import CrossEncoderScorer
    from memrepro.stages import build, encode_and_index, load_benchmark
    from memrepro.artifacts.per_seed import TrainingContext

    retrievers = {}
    with initialize_config_dir(CONF, version_base="1.3"):
        base = compose("config", [f"dataset.seeds=[{args.seed}]"])
        device = resolve_device(base.runtime.device)
        benchmark, _ = load_benchmark(base.dataset)
        encoder = build(base.encoder)
        index, qv, _ = encode_and_index(benchmark, encoder, Path(base.paths.cache_dir), device, False, {})
        context = TrainingContext(benchmark, index, qv, encoder.identity, Path(base.paths.models_dir), device,
                                  progress=False)
        split = benchmark.splits[0]
        for name, overrides in METHODS.items():
            if name in args.skip:
                continue
            config = compose("config", [f"dataset.seeds=[{args.seed}]", *overrides]).retriever
            retriever = build(config)
            if args.cost_ce == "same" and name in COST_ONLY:
                # cost only: the same architecture, recipe and max length, the v1+v2 weights of the seed
                weights = retrievers["v1+v2"].scorer.resolved.path
                retriever._set_cross_encoder(CrossEncoderScorer(weights, path=weights,
                                                                max_length=config.cross_encoder.max_length))
                retriever.for_split(split)
                retrievers[name] = retriever
                continue
            if hasattr(retriever, "bind_training"):
                retriever.bind_training(context)
                retriever.for_split(split)
            retrievers[name] = retriever
    queries = list(benchmark.split_queries(split))[: args.queries]
    inputs = [RetrievalInput(q.id, q.text, q.episode_id) for q in queries]
    vectors = np.stack([qv[q.id] for q in queries])
    for retriever in retrievers.values():  # warm-up: first calls load models and start thread pools
        retriever.retrieve(inputs[:2], vectors[:2], index)
    batch1: dict[str, list[float]] = {name: [] for name in retrievers}
    for _ in range(args.rounds):
        for i in range(len(queries)):
            for name, retriever in retrievers.items():
                start = time.perf_counter()
                retriever.retrieve(inputs[i:i + 1], vectors[i:i + 1], index)
                batch1[name].append(1000 * (time.perf_counter() - start))
    amortized = {}
    for name, retriever in retrievers.items():
        start = time.perf_counter()
        retriever.retrieve(inputs, vectors, index)
        amortized[name] = 1000 * (time.perf_counter() - start) / len(queries)
    print(f"LoCoMo seed {args.seed}, {len(queries)} test questions, one process, {os.cpu_count()} CPUs, "
          f"device {device}")
    if args.cost_ce == "same":
        print(f"{', '.join(COST_ONLY)}: cost only (the v1+v2 cross-encoder's weights; their rankings mean nothing)")
    print(f"| method | batch-1 mean ms | batch-1 median ms | amortized ms |")
    print("|---|---|---|---|")
    for name in retrievers:
        print(f"| {name} | {statistics.fmean(batch1[name]):.2f} | {statistics.median(batch1[name]):.2f} | "
              f"{amortized[name]:.2f} |")
    for a, b in (("v1", "dense"), ("v1+v2", "v1"), ("full pool (same CE)", "cascade over dense")):
        if a in retrievers and b in retrievers:
            print(f"{a} / {b}: batch-1 {statistics.fmean(batch1[a]) / statistics.fmean(batch1[b]):.2f}x, "
                  f"amortized {amortized[a] / amortized[b]:.2f}x")


if __name__ == "__main__":
    main()
