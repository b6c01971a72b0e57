"""Start-up of the commands a user types first, side by side, as ratios against ``python -c pass``.

Each command runs as its own process (a start is what is measured), ``--repeats`` times, interleaved, and the
median wall time is reported:

- ``python -c pass``: the interpreter alone, the unit of the ratios;
- ``python -m memrepro --help`` and ``python -m memrepro run --help``;
- ``python -m memrepro run <overrides>`` of a run whose kept copy exists: its restore into an empty results folder
  (``queries.jsonl`` decompressed and checked; ``run.trec`` is written on first use, not here), then its skip (the
  folder is complete).

As on a fresh clone, the models folder is an empty one (``--with-models``: the project's): the restore line's cost
of recomputing includes the training plan, which verifies every trained model present (hashing its files).

For each, the heavy libraries the process imported are listed (a skip or a restore imports none of torch,
sentence-transformers, pandas). The default run is LoCoMo dense mpnet, kept in ``results/kept``; the benchmark
files come from ``$MEMREPRO_DATA_DIR``. Nothing is written outside a temporary results folder.

    python scripts/bench_start.py [--repeats 7] [--with-models] [overrides ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "sentence_transformers", "pandas")
DEFAULT_RUN = ["dataset=locomo", "retriever=dense", "encoder=mpnet"]
# runs memrepro's dispatcher as `python -m memrepro` does, then names which of the given modules it imported
PROBE = ("import atexit, runpy, sys\n"
         "atexit.register(lambda: print('loaded:' + ','.join(m for m in {modules!r} if m in sys.modules), "
         "file=sys.stderr))\n"
         "sys.argv = ['memrepro', *sys.argv[1:]]\n"
         "runpy.run_module('memrepro', run_name='__main__', alter_sys=True)\n")


def loaded_modules(args: list[str], env: dict[str, str], cwd: Path = REPO,
                   modules: tuple[str, ...] = HEAVY) -> tuple[set[str], str]:
    """Which of ``modules`` ``python -m memrepro <args>`` imports, and its output; fails on an error."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(modules=modules), *args], capture_output=True,
                         text=True, env=env, cwd=cwd, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"python -m memrepro {' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")
    line = next(line for line in reversed(out.stderr.splitlines()) if line.startswith("loaded:"))
    return {m for m in line[len("loaded:"):].split(",") if m}, out.stdout + out.stderr


def _wall(command: list[str], env: dict[str, str], before=None) -> float:
    if before is not None:
        before()
    start = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--with-models", action="store_true",
                        help="use the project's models folder (default: an empty one, as on a fresh clone)")
    parser.add_argument("overrides", nargs="*", default=DEFAULT_RUN, help="the run (its kept copy must exist)")
    args = parser.parse_args()
    python = [sys.executable]
    memrepro = [*python, "-m", "memrepro"]
    with tempfile.TemporaryDirectory(prefix="bench-start-") as tmp:
        results = Path(tmp) / "results"
        env = {**os.environ, "MEMREPRO_RESULTS_DIR": str(results), "PYTHONPATH": str(REPO)}
        env.pop("MEMREPRO_KEPT_DIR", None)  # the checkout's kept runs
        if not args.with_models:
            (Path(tmp) / "models").mkdir()
            env["MEMREPRO_MODELS_DIR"] = str(Path(tmp) / "models")
        # as a user's Python does: modules compiled once into __pycache__, not on every start (0.1 s here)
        env.pop("PYTHONDONTWRITEBYTECODE", None)

        def empty() -> None:
            shutil.rmtree(results, ignore_errors=True)

        restored, said = loaded_modules(["run", *args.overrides], env)
        if "restored run" not in said:
            print(f"no kept copy of `run {' '.join(args.overrides)}` was restored:\n{said[-1500:]}", file=sys.stderr)
            return 2
        skipped, said = loaded_modules(["run", *args.overrides], env)
        assert "is complete: skipped" in said, said[-1500:]
        cases = {
            "python -c pass": ([*python, "-c", "pass"], None, set()),
            "memrepro --help": ([*memrepro, "--help"], None, None),
            "memrepro run --help": ([*memrepro, "run", "--help"], None, None),
            "run: restore of the kept run": ([*memrepro, "run", *args.overrides], empty, restored),
            "run: skip of the complete run": ([*memrepro, "run", *args.overrides], None, skipped),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeats):  # interleaved: a slow moment of the machine is shared by every case
            for name, (command, before, _) in cases.items():
                times[name].append(_wall(command, env, before))
    unit = statistics.median(times["python -c pass"])
    models = "the project's models folder" if args.with_models else "no trained models (a fresh clone)"
    print(f"run: {' '.join(args.overrides)}; {models}; median of {args.repeats} starts each, side by side")
    print(f"| command | seconds | × python -c pass | imported of {', '.join(HEAVY)} |")
    print("|:--|--:|--:|:--|")
    for name, (_, _, modules) in cases.items():
        median = statistics.median(times[name])
        shown = "-" if modules is None else (", ".join(sorted(modules)) or "none")
        print(f"| {name} | {median:.3f} | {median / unit:.1f} | {shown} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
