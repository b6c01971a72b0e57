"""``python -m memrepro report``: a static HTML site from the runs on this machine (``results/runs`` and the kept
runs, read in place), opened from disk with no server: the reproduction summary and each paper table, a page per
run (settings, metrics, miss breakdown, per-query evidence), the declared comparisons and the sweeps.

``--compare RUN RUN [RUN …]``: a comparison page of those run folders (the first is the baseline) and their run
pages, added to the site; runs on different benchmarks, data or splits are refused in one line (exit 2).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from memrepro.cli.args import ArgumentParser


def main(argv: list[str] | None = None) -> int:
    from memrepro.site.build import Options, build, build_comparison

    parser = ArgumentParser(prog="python -m memrepro report", description=__doc__)
    parser.add_argument("--results", default=os.environ.get("MEMREPRO_RESULTS_DIR", "results"),
                        help="the results folder (its runs/ and tables/; default: %(default)s)")
    parser.add_argument("--kept", default=os.environ.get("MEMREPRO_KEPT_DIR", "results/kept"),
                        help="kept runs, read in place ('' : none; default: %(default)s)")
    parser.add_argument("--out", default=None, help="the site folder (default: <results>/report)")
    parser.add_argument("--compare", nargs="+", metavar="RUN", default=None,
                        help="run folders to compare (the first is the baseline), under results/runs or the kept runs")
    parser.add_argument("--up-link", default=None,
                        help="a link from every page back to the site the report is part of, relative to the report "
                             "folder (make docs: ../index.html)")
    parser.add_argument("--resamples", type=int, default=10_000, help="paired bootstrap resamples (seed 13)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.resamples < 1:
        parser.error(f"--resamples {args.resamples}: must be at least 1")
    out = Path(args.out) if args.out else Path(args.results) / "report"
    options = Options(Path(args.results), Path(args.kept) if args.kept else None, out, args.up_link, args.resamples)
    say = lambda line: print(line, file=sys.stderr)  # noqa: E731
    if args.compare:
        page = build_comparison(options, [Path(p) for p in args.compare], say)
        print(f"comparison: {page}")
        return 0
    built = build(options, say)
    print(f"report: {built.index} ({built.runs} runs, {built.pages} pages, {built.seconds:.1f} s"
          f"{f'; {len(built.skipped)} left out, named above' if built.skipped else ''}); open it in a browser")
    return 0
