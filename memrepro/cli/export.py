"""``python -m memrepro export dataset=locomo [dataset.…=…] --format beir|trec [--out DIR]``.

Hydra-style ``key=value`` overrides choose the benchmark (as for ``run``); ``--format`` and ``--out`` are flags.
Default output folder: ``$MEMREPRO_RESULTS_DIR/export/<benchmark>/<format>/`` (``results/export/…``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memrepro.cli.args import ArgumentParser
from memrepro.errors import MemreproError
from memrepro.paths import folder_path


def main(argv: list[str] | None = None) -> int:
    from memrepro.export import FORMATS, export

    parser = ArgumentParser(prog="python -m memrepro export", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. dataset=longmemeval dataset.variant=oracle")
    parser.add_argument("--format", choices=FORMATS, default="beir")
    parser.add_argument("--out", default=None, help="output folder")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        print(f"memrepro: error: {bad[0]!r} is not an override (key=value), e.g. dataset=locomo", file=sys.stderr)
        return 2
    try:
        from hydra.errors import HydraException

        from memrepro.api import compose
        from memrepro.stages import load_benchmark

        dataset = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("dataset=")), "locomo")
        rest = [o for o in args.overrides if not o.startswith("dataset=")]
        try:
            cfg = compose(dataset=dataset, encoder="fake", overrides=rest)
        except HydraException as exc:
            print(f"memrepro: error: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
        benchmark, _ = load_benchmark(cfg.dataset)
        out = Path(args.out) if args.out else (folder_path("results_dir") / "export"
                                               / benchmark.name / args.format)
        written = export(benchmark, out, args.format)
    except MemreproError as exc:
        print(f"memrepro: error: {exc}", file=sys.stderr)
        return 1
    print(f"exported {benchmark.name} ({args.format}): {len(benchmark.queries)} queries, "
          f"{sum(len(e) for e in benchmark.episodes.values())} memories in {len(benchmark.episodes)} episodes, "
          f"{len(benchmark.splits)} split(s) → {out}")
    for path in written:
        print(f"  {path}")
    return 0
