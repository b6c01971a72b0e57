"""``python -m memrepro bench scale``: exact top-k search at 10k / 100k / 1M memories, side by side.

One process times memrepro's ``search`` (one episode of N memories, ``search.backend=auto``), FAISS
``IndexFlatIP`` and NumPy (matmul + ``argpartition`` + sort of the k), interleaved ``--repeats`` times on the
same vectors and queries, and reports ms/query, build time and the ratio to FAISS. Peak memory is measured per
method in a fresh child process (same vectors, same queries): its peak RSS, and the peak minus the RSS with the
vectors alone (what the index and the search add). Top-10 lists are asserted identical to FAISS's and NumPy's
wherever the k-th and (k+1)-th scores are not within float32 rounding (exact duplicates in the replicated
corpus tie exactly in memrepro; FAISS orders them arbitrarily, so there only the score lists are compared).

Corpora: ``synthetic`` (seeded unit vectors, 384-d by default) and ``replicated`` (LoCoMo's cached embeddings of
``--encoder``, tiled to N; queries = LoCoMo's questions). ``--locomo`` adds the no-regression point: LoCoMo's
pool sizes (many small episodes, full rankings), the search entry point vs the padded torch path it dispatches to.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Callable

import numpy as np

from memrepro.cli.args import ArgumentParser
from memrepro.errors import EXIT_BAD_INPUT
from memrepro.limits import DEFAULT_CHUNK_BYTES

SIZES = (10_000, 100_000, 1_000_000)


def unit_rows(n: int, dim: int, seed: int, chunk: int = 1 << 16) -> np.ndarray:
    """Seeded unit vectors in float32, generated in chunks (no float64 copy of a 1M matrix)."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, chunk):
        part = rng.standard_normal((min(chunk, n - start), dim), dtype=np.float32)
        part /= np.linalg.norm(part, axis=1, keepdims=True)
        out[start:start + len(part)] = part
    return out


def locomo_vectors(encoder: str) -> tuple[np.ndarray, np.ndarray]:
    """LoCoMo's memory and question vectors from the embedding cache; refuses to encode anything."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    import memrepro.config  # noqa: F401
    from memrepro.models.encoder import CachedEncoder
    from memrepro.paths import CONFIG_DIR
    from memrepro.stages import build, load_benchmark

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["dataset=locomo", f"encoder={encoder}"])
    benchmark, _ = load_benchmark(cfg.dataset)
    inner = build(cfg.encoder)

    class CacheOnly:
        identity, label, prefixes = inner.identity, inner.label, getattr(inner, "prefixes", {})

        def encode(self, texts, role):
            raise SystemExit(f"bench scale: {len(texts)} LoCoMo {role} texts are not in the embedding cache for "
                             f"encoder={encoder}; run `python -m memrepro run dataset=locomo encoder={encoder}` "
                             "once first")

    cached = CachedEncoder(CacheOnly(), Path(cfg.paths.cache_dir) / "embeddings", progress=False)
    docs = cached.encode([m.text for e in benchmark.episodes.values() for m in e.memories], "document")
    queries = cached.encode([q.text for q in benchmark.queries], "query")
    return docs, queries


def corpus(kind: str, n: int, dim: int, n_queries: int, encoder: str) -> tuple[np.ndarray, np.ndarray]:
    if kind == "synthetic":
        return unit_rows(n, dim, seed=1), unit_rows(n_queries, dim, seed=2)
    docs, queries = locomo_vectors(encoder)
    reps = -(-n // len(docs))
    tiled = np.empty((n, docs.shape[1]), dtype=np.float32)
    for r in range(reps):
        start = r * len(docs)
        tiled[start:min(n, start + len(docs))] = docs[: max(0, min(len(docs), n - start))]
    return tiled, np.ascontiguousarray(queries[:n_queries])


# ------------------------------------------------------------------------------------------------- methods
def build_memrepro(docs: np.ndarray):
    from memrepro.search import build_index
    from memrepro.types import Episode, Memory

    class Pool(Episode):  # N memories without N Memory objects: search reads only the length
        def __len__(self) -> int:
            return len(docs)

    episode = Pool("big", (Memory("m0", "", 0),))
    return build_index({"big": episode}, {"big": docs}, dim=docs.shape[1])


def search_memrepro(index, queries: np.ndarray, k: int):
    from memrepro.search import search

    hits = search(index, queries, ["big"] * len(queries), k=k)
    return np.stack([h.positions for h in hits]), np.stack([h.scores for h in hits])


def build_faiss(docs: np.ndarray):
    import faiss

    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(docs)
    return index


def search_faiss(index, queries: np.ndarray, k: int):
    scores, positions = index.search(queries, k)
    return positions, scores


def search_numpy(docs: np.ndarray, queries: np.ndarray, k: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
    rows = max(1, chunk_bytes // (4 * len(docs)))
    positions, scores = [], []
    for start in range(0, len(queries), rows):
        s = queries[start:start + rows] @ docs.T
        part = np.argpartition(-s, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(s, part, axis=1)
        order = np.argsort(-top, axis=1, kind="stable")
        positions.append(np.take_along_axis(part, order, axis=1))
        scores.append(np.take_along_axis(top, order, axis=1))
    return np.concatenate(positions), np.concatenate(scores)


def agreement(ours: tuple[np.ndarray, np.ndarray], theirs: tuple[np.ndarray, np.ndarray], bound: float,
              kth_gap: np.ndarray) -> dict[str, float]:
    """Lists identical wherever no near-tie straddles the cutoff; score lists equal to the float32 bound."""
    same = np.all(ours[0] == theirs[0], axis=1)
    clear = kth_gap > 2 * bound
    score_close = np.all(np.abs(ours[1].astype(np.float64) - theirs[1]) <= 2 * bound, axis=1)
    return {"identical": float(same.mean()), "identical_where_no_near_tie": float(same[clear].mean()) if clear.any()
            else 1.0, "n_near_tie": int((~clear).sum()), "scores_equal": float(score_close.mean()),
            "ok": bool(score_close.all() and same[clear & np.isfinite(kth_gap)].all())}


def peak_rss_gb() -> float:
    """This process's peak RSS (``VmHWM``: per address space, so unlike ``ru_maxrss`` it does not inherit the
    parent's peak through fork + exec)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20  # KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def current_rss_gb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def probe_memory(args: argparse.Namespace) -> None:
    """Child process: every method's libraries imported first (the same state for all three), then the vectors,
    then one method's build + search; prints JSON. ``peak - vectors`` is what the index and the search add."""
    import faiss  # noqa: F401
    import torch  # noqa: F401

    import memrepro.search  # noqa: F401

    docs, queries = corpus(args.corpus, args.size, args.dim, args.queries, args.encoder)
    base = current_rss_gb()
    began = time.perf_counter()
    if args.probe == "memrepro":
        index = build_memrepro(docs)
        built = time.perf_counter() - began
        search_memrepro(index, queries, args.k)
    elif args.probe == "faiss":
        index = build_faiss(docs)
        built = time.perf_counter() - began
        search_faiss(index, queries, args.k)
    else:
        built = 0.0
        search_numpy(docs, queries, args.k)
    print(json.dumps({"peak_gb": peak_rss_gb(), "vectors_gb": base, "build_s": built}))


def child_memory(args: argparse.Namespace, method: str, size: int) -> dict:
    command = [sys.executable, "-m", "memrepro", "bench", "scale", "--probe", method, "--sizes", str(size),
               "--size", str(size), "--corpus", args.corpus, "--dim", str(args.dim), "--queries", str(args.queries),
               "--k", str(args.k), "--encoder", args.encoder]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_size(args: argparse.Namespace, size: int) -> dict:
    from memrepro.search import error_bound

    memory = {m: child_memory(args, m, size) for m in ("memrepro", "faiss", "numpy")} if args.memory else {}
    docs, queries = corpus(args.corpus, size, args.dim, args.queries, args.encoder)
    k = args.k
    builds: dict[str, list[float]] = {"memrepro": [], "faiss": []}
    searches: dict[str, list[float]] = {"memrepro": [], "faiss": [], "numpy": []}
    results: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for _ in range(args.repeats):  # interleaved: each method once per round, fresh build each round
        start = time.perf_counter()
        ours = build_memrepro(docs)
        builds["memrepro"].append(time.perf_counter() - start)
        start = time.perf_counter()
        flat = build_faiss(docs)
        builds["faiss"].append(time.perf_counter() - start)
        for name, fn in (("memrepro", lambda: search_memrepro(ours, queries, k)),
                         ("faiss", lambda: search_faiss(flat, queries, k)),
                         ("numpy", lambda: search_numpy(docs, queries, k))):
            start = time.perf_counter()
            results[name] = fn()
            searches[name].append(time.perf_counter() - start)
        del ours, flat
    # the (k+1)-th exact score, for the near-tie test
    _, wide = search_faiss(build_faiss(docs), queries, k + 1)
    kth_gap = wide[:, k - 1].astype(np.float64) - wide[:, k]
    bound = error_bound(docs.shape[1])
    checks = {name: agreement(results["memrepro"], results[name], bound, kth_gap) for name in ("faiss", "numpy")}
    if args.corpus == "synthetic":
        for name, check in checks.items():
            if not check["ok"]:
                raise SystemExit(f"bench scale: memrepro's top-{k} differs from {name}'s at N={size}: {check}")
    return {"size": size, "dim": int(docs.shape[1]), "queries": len(queries), "k": k, "repeats": args.repeats,
            "ms_per_query": {m: 1000 * statistics.median(v) / len(queries) for m, v in searches.items()},
            # the same round's FAISS time as the denominator: load changes between rounds, not within one
            "ratio_to_faiss": {m: statistics.median(a / b for a, b in zip(v, searches["faiss"]))
                               for m, v in searches.items()},
            "build_ratio_to_faiss": statistics.median(a / b for a, b in zip(builds["memrepro"], builds["faiss"])),
            "ms_per_query_all": {m: [1000 * x / len(queries) for x in v] for m, v in searches.items()},
            "build_s": {m: statistics.median(v) for m, v in builds.items()}, "agreement": checks,
            "memory": memory, "load_average": os.getloadavg()[0]}


def run_locomo(args: argparse.Namespace) -> dict:
    """Many small episodes (LoCoMo's pool sizes, full rankings): ``search`` vs the padded path it calls."""
    from memrepro.search import _search_torch, build_index, search
    from memrepro.types import Episode, Memory

    try:
        from memrepro.datasets.locomo import load_locomo

        bench = load_locomo(os.environ.get("MEMREPRO_DATA_DIR"))
        episodes, query_episodes = dict(bench.episodes), [q.episode_id for q in bench.queries]
    except Exception:  # noqa: BLE001 - no data: LoCoMo-sized synthetic pools
        episodes = {f"e{i}": Episode(f"e{i}", tuple(Memory(f"m{j}", "", j) for j in range(600))) for i in range(10)}
        query_episodes = [f"e{i % 10}" for i in range(1977)]
    vectors = {e: unit_rows(len(ep), 768, seed=i) for i, (e, ep) in enumerate(episodes.items())}
    queries = unit_rows(len(query_episodes), 768, seed=99)
    index = build_index(episodes, vectors)
    methods = {"search (dispatch)": lambda: search(index, queries, query_episodes),
               "padded torch path": lambda: _search_torch(index, queries, query_episodes, None, None, DEFAULT_CHUNK_BYTES)}
    times: dict[str, list[float]] = {m: [] for m in methods}
    out = {}
    for _ in range(args.repeats):
        for name, fn in methods.items():
            start = time.perf_counter()
            out[name] = fn()
            times[name].append(time.perf_counter() - start)
    same = all(a.positions.tolist() == b.positions.tolist() and np.array_equal(a.scores, b.scores)
               for a, b in zip(*out.values()))
    assert same, "search() and the padded path disagree on LoCoMo pools"
    return {"queries": len(query_episodes), "ms_per_query": {m: 1000 * statistics.median(v) / len(query_episodes)
                                                              for m, v in times.items()}, "identical": same}


def table(rows: list[dict]) -> str:
    lines = ["| N | method | ms/query (median) | × FAISS time (median of per-round ratios) | build s | peak RSS GB | × FAISS memory | "
             "index+search GB | top-10 identical |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ms, mem = row["ms_per_query"], row["memory"]
        for method in ("memrepro", "faiss", "numpy"):
            peak = mem.get(method, {}).get("peak_gb")
            fpeak = mem.get("faiss", {}).get("peak_gb")
            extra = None if peak is None else peak - mem[method]["vectors_gb"]
            agree = row["agreement"].get(method, {}).get("identical") if method != "memrepro" else None
            lines.append(
                f"| {row['size']:,} | {method} | {ms[method]:.3f} | {row['ratio_to_faiss'][method]:.2f} | "
                f"{row['build_s'].get(method, 0.0):.2f} | {'' if peak is None else f'{peak:.2f}'} | "
                f"{'' if peak is None or not fpeak else f'{peak / fpeak:.2f}'} | "
                f"{'' if extra is None else f'{extra:.2f}'} | {'' if agree is None else f'{agree:.3f}'} |")
    return "\n".join(lines)


USAGE = ("usage: python -m memrepro bench scale [--sizes 10000,100000,1000000] [--corpus synthetic|replicated] "
         "[--queries 1000] [--dim 384] [--repeats 3] [--no-memory] [--locomo] [--json FILE]")


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] in ("-h", "--help", "help"):
        print(f"{USAGE}\n\n{__doc__.strip()}\n\n`python -m memrepro bench scale --help` describes every option")
        return 0
    if not argv or argv[0] != "scale":
        given = f"unknown benchmark {argv[0]!r}" if argv else "no benchmark named"
        print(f"memrepro: error: bench: {given}; {USAGE}", file=sys.stderr)
        return EXIT_BAD_INPUT
    parser = ArgumentParser(prog="python -m memrepro bench scale", description=__doc__)
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--corpus", choices=("synthetic", "replicated"), default="synthetic")
    parser.add_argument("--encoder", default="mpnet", help="replicated corpus: whose cached LoCoMo vectors")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=384, help="synthetic corpus dimension")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the child-process RSS probes")
    parser.add_argument("--locomo", action="store_true", help="also the LoCoMo-sized no-regression point")
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("--probe", choices=("memrepro", "faiss", "numpy"), help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv[1:])
    if args.probe:
        probe_memory(args)
        return 0
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        row = run_size(args, size)
        rows.append(row)
        print(f"N={size:,}: " + ", ".join(f"{m} {v:.3f} ms/query" for m, v in row["ms_per_query"].items())
              + f" (load average {row['load_average']:.1f})", flush=True)
    print(f"\nexact top-{args.k}, {args.corpus} corpus, {args.queries} queries, {args.repeats} interleaved repeats; "
          "memory: fresh child process per method\n")
    print(table(rows))
    report = {"corpus": args.corpus, "rows": rows}
    if args.locomo:
        report["locomo"] = run_locomo(args)
        print(f"\nLoCoMo pools ({report['locomo']['queries']} queries, full rankings, 768-d): " + ", ".join(
            f"{m} {v:.4f} ms/query" for m, v in report["locomo"]["ms_per_query"].items()) + "; identical")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1)
    return 0
