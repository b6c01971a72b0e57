"""The GPU check (docs/performance.md#the-gpu-check), one table. Called by ``scripts/gpu_check.sh``; runs on a
CPU-only machine too (``--cpu-fallback`` or no CUDA), where every GPU column says ``n/a`` and the CPU side still
runs at small sizes, so the script itself is tested here.

(a) LoCoMo-sized dense search (many small episodes, full rankings), batched, GPU vs CPU: ms/query, identical
    rankings (real LoCoMo pools when the data is present; seeded vectors, 768-d);
(b) cross-encoder throughput: the cascade's 10 pairs per query (max length 256) vs the full pool's 500 pairs
    (library max length), same model (MiniLM backbone with a fresh head: timing only), pairs/s and the ratio;
(c) exact top-10 at 1M × 384 (``--big``): memrepro ``search`` on the device (faiss-gpu when installed, else
    torch.topk) vs plain torch matmul + topk, identical top-10;
(d) mpnet encode throughput fp32 vs fp16 on LoCoMo texts, with ranking agreement (identical top-10 lists).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROWS: list[tuple[str, str, str, str]] = []


def row(check: str, cpu: str, gpu: str, note: str) -> None:
    ROWS.append((check, cpu, gpu, note))
    print(f"  {check}: cpu {cpu} | gpu {gpu} | {note}", flush=True)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, repeats: int = 3) -> tuple[float, object]:
    fn()  # warm-up
    values, out = [], None
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        out = fn()
        sync(device)
        values.append(time.perf_counter() - start)
    return statistics.median(values), out


def unit(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def check_dense(gpu: str | None, small: bool) -> None:
    from memrepro.search import build_index, search
    from memrepro.types import Episode, Memory

    try:
        from memrepro.datasets.locomo import load_locomo

        bench = load_locomo(os.environ.get("MEMREPRO_DATA_DIR"))
        episodes, qe = dict(bench.episodes), [q.episode_id for q in bench.queries]
    except Exception:  # noqa: BLE001
        episodes = {f"e{i}": Episode(f"e{i}", tuple(Memory(f"m{j}", "", j) for j in range(600))) for i in range(10)}
        qe = [f"e{i % 10}" for i in range(1977)]
    if small:
        qe = qe[:100]
    vectors = {e: unit(len(ep), 768, i) for i, (e, ep) in enumerate(episodes.items())}
    queries = unit(len(qe), 768, 99)
    cpu_index = build_index(episodes, vectors, device="cpu")
    cpu_s, cpu_hits = timed(lambda: search(cpu_index, queries, qe), "cpu")
    if gpu is None:
        row("(a) LoCoMo dense, batched, full rankings", f"{1000 * cpu_s / len(qe):.4f} ms/q", "n/a",
            f"{len(qe)} queries; no CUDA")
        return
    gpu_index = build_index(episodes, vectors, device=gpu)
    gpu_s, gpu_hits = timed(lambda: search(gpu_index, queries, qe), gpu)
    same = np.mean([a.positions.tolist() == b.positions.tolist() for a, b in zip(cpu_hits, gpu_hits)])
    row("(a) LoCoMo dense, batched, full rankings", f"{1000 * cpu_s / len(qe):.4f} ms/q",
        f"{1000 * gpu_s / len(qe):.4f} ms/q", f"identical rankings {same:.4f} of {len(qe)}; GPU {cpu_s / gpu_s:.1f}×")


def check_rerank(gpu: str | None, small: bool) -> None:
    from sentence_transformers import CrossEncoder

    from memrepro.models.cross_encoder import CrossEncoderScorer
    from memrepro.models.resolve import resolve_model

    folder = str(Path(tempfile.mkdtemp()) / "minilm-ce")
    CrossEncoder(resolve_model("all-MiniLM-L6-v2").path, num_labels=1).save(folder)
    rng = np.random.default_rng(0)
    words = "the memory of a long conversation about travel plans food work and family".split()
    text = lambda n: " ".join(rng.choice(words, n))  # noqa: E731
    n_queries = 1 if small else 10
    results = {}
    for device in ["cpu"] + ([gpu] if gpu else []):
        cascade = CrossEncoderScorer(folder, path=folder, max_length=256, device=device)
        full = CrossEncoderScorer(folder, path=folder, max_length=None, device=device)
        pool = 20 if small and device == "cpu" else 500
        c_pairs = [(text(12), text(25)) for _ in range(10)]
        f_pairs = [(text(12), text(25)) for _ in range(pool)]
        repeats = 1 if small else 3
        c_s, _ = timed(lambda: [cascade.score(c_pairs) for _ in range(n_queries)], device, repeats=repeats)
        f_s, _ = timed(lambda: [full.score(f_pairs) for _ in range(n_queries)], device, repeats=repeats)
        results[device] = (c_s / n_queries, f_s / n_queries, pool)
    def fmt(v):  # noqa: E306
        c, f, pool = v
        return f"cascade {1000 * c:.1f} ms/q, pool({pool}) {1000 * f:.1f} ms/q = {f / c:.1f}×"
    row("(b) cross-encoder cascade vs full pool", fmt(results["cpu"]), fmt(results[gpu]) if gpu else "n/a",
        "same model (MiniLM backbone, fresh head); per query")


def check_big(gpu: str | None, n: int) -> None:
    from memrepro.search import SearchOptions, build_index, search
    from memrepro.types import Episode, Memory

    class Pool(Episode):
        def __len__(self) -> int:
            return n

    docs, queries = unit(n, 384, 1), unit(200 if gpu else 20, 384, 2)
    device = gpu or "cpu"
    index = build_index({"big": Pool("big", (Memory("m0", "", 0),))}, {"big": docs}, device=device,
                        options=SearchOptions())
    ours_s, ours = timed(lambda: search(index, queries, ["big"] * len(queries), k=10), device, repeats=2)
    docs_t, q_t = index.matrix[0], torch.from_numpy(queries).to(device)
    torch_s, top = timed(lambda: torch.topk(q_t @ docs_t.T, 10, dim=1), device, repeats=2)
    same = np.mean([h.positions.tolist() == t.tolist() for h, t in zip(ours, top.indices.cpu().numpy())])
    import faiss

    backend = "faiss-gpu" if gpu and hasattr(faiss, "knn_gpu") and faiss.get_num_gpus() > 0 else \
        ("torch.topk on device" if gpu else "faiss (CPU)")
    cell = f"memrepro {1000 * ours_s / len(queries):.3f} ms/q ({backend}), torch {1000 * torch_s / len(queries):.3f}"
    row(f"(c) exact top-10, {n:,} × 384", cell if not gpu else "see gpu", cell if gpu else "n/a",
        f"identical top-10 {same:.3f} (swaps only at float32 near-ties)")


def check_encode(gpu: str | None, small: bool) -> None:
    from sentence_transformers import SentenceTransformer

    from memrepro.models.resolve import resolve_model

    try:
        from memrepro.datasets.locomo import load_locomo

        bench = load_locomo(os.environ.get("MEMREPRO_DATA_DIR"))
        docs = [m.text for m in next(iter(bench.episodes.values())).memories]
        queries = [q.text for q in bench.queries if q.episode_id == next(iter(bench.episodes))]
    except Exception:  # noqa: BLE001
        rng = np.random.default_rng(0)
        words = "alpha beta gamma delta travel food work family plans memory".split()
        docs = [" ".join(rng.choice(words, 20)) for _ in range(600)]
        queries = [" ".join(rng.choice(words, 8)) for _ in range(150)]
    if small:
        docs, queries = docs[:16], queries[:4]
    path = resolve_model("all-mpnet-base-v2").path
    device = gpu or "cpu"
    model = SentenceTransformer(path, device=device)
    out = {}
    for precision in ("fp32", "fp16") if gpu else ("fp32",):
        if precision == "fp16":
            model.half()
        seconds, _ = timed(lambda: model.encode(docs, batch_size=64, normalize_embeddings=True), device, repeats=1)
        d = model.encode(docs, batch_size=64, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
        q = model.encode(queries, batch_size=64, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
        out[precision] = (len(docs) / seconds, np.argsort(-(q @ d.T), axis=1, kind="stable")[:, :10])
    cell = ", ".join(f"{p} {v[0]:.0f} texts/s" for p, v in out.items())
    note = "fp32 only (no CUDA)"
    if "fp16" in out:
        note = f"identical top-10 fp16 vs fp32: {np.mean(np.all(out['fp16'][1] == out['fp32'][1], axis=1)):.3f}"
    row("(d) mpnet encode", cell if not gpu else "n/a", cell if gpu else "n/a", note)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpu-fallback", action="store_true", help="small sizes, CPU only (the tested path)")
    parser.add_argument("--big", type=int, default=1_000_000, help="(c) memories")
    args = parser.parse_args()
    gpu = "cuda" if torch.cuda.is_available() and not args.cpu_fallback else None
    small = gpu is None
    print(f"device: {torch.cuda.get_device_name(0) if gpu else 'CPU only: fallback sizes'}; torch {torch.__version__}",
          flush=True)
    for name, fn in (("a", lambda: check_dense(gpu, small)), ("b", lambda: check_rerank(gpu, small)),
                     ("c", lambda: check_big(gpu, args.big if gpu else 5_000)),
                     ("d", lambda: check_encode(gpu, small))):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one failed check must not hide the others
            row(f"({name})", "error", "error", f"{type(exc).__name__}: {exc}"[:200])
    print("\n| check | CPU | GPU | note |\n|---|---|---|---|")
    for check, cpu, gpu_cell, note in ROWS:
        print(f"| {check} | {cpu} | {gpu_cell} | {note} |")
    if any(cpu == "error" for _, cpu, _, _ in ROWS):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
