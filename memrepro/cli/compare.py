"""``python -m memrepro compare RUN_A RUN_B [RUN_C …] [--metric mrr] [--by category] [--latex] [--out PREFIX]``.

The first run is the baseline; every other run is paired with it (seeded paired bootstrap, the tables' routine).
Runs on different data or different query sets are refused with the difference named; ``--shared`` pairs runs
that scored different query sets (a run over fewer split seeds) over the units both scored, with their means over
those units.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memrepro.cli.args import ArgumentParser
from memrepro.paths import folder_path


def main(argv: list[str] | None = None) -> int:
    from memrepro.compare import LEGEND, compare, load_run, runs_note
    from memrepro.tables.naming import labels
    from memrepro.tables.render import latex, markdown, write_table

    parser = ArgumentParser(prog="python -m memrepro compare", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="complete run folders (results/runs/<dataset>/<retriever>/<encoder>/<id>)")
    parser.add_argument("--metric", action="append", help="metric to compare (repeatable; default: the benchmark's "
                        "primary metrics)")
    parser.add_argument("--by", choices=["category"], default=None, help="also per category, with n")
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--latex", action="store_true", help="print LaTeX (booktabs) instead of Markdown")
    parser.add_argument("--shared", action="store_true", help="pair runs with different query sets over the "
                        "units both scored (n says how many)")
    parser.add_argument("--out", default=None, help="also write PREFIX.md, PREFIX.tex and PREFIX.csv")
    parser.add_argument("--ignore", action="append", default=[], metavar="CODE",
                        help="a protocol-check finding code not to print (repeatable; docs/checks.md)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from memrepro.checks import check_comparison, say, valid_codes

    ignore = valid_codes(args.ignore, "--ignore")
    runs = [load_run(path) for path in args.runs]  # a refusal is a CompareError: one line, exit 2 (bad input)
    frame = compare(runs, args.metric, args.by, args.resamples, args.seed, args.shared)
    notes = [LEGEND.format(resamples=args.resamples, seed=args.seed), runs_note(runs)]
    findings = say(check_comparison(runs, labels(runs), (args.metric or [None])[0]), ignore)
    if findings:  # above the numbers they qualify
        print(findings + "\n")
    print(latex(frame, caption="memrepro compare") if args.latex else markdown(frame))
    print("", *notes, sep="\n")
    if args.out:
        out = Path(args.out)
        write_table(frame, out.parent, out.name, f"memrepro compare: {runs[0].dataset}",
                    notes=[*findings.splitlines(), *notes])
        print(f"wrote {out}.md, {out}.tex, {out}.csv")
    return 0


def leaderboard_main(argv: list[str] | None = None) -> int:
    from memrepro.tables.leaderboard import render_leaderboard
    from memrepro.tables.runs import complete_runs

    parser = ArgumentParser(prog="python -m memrepro leaderboard",
                            description="every retriever x every benchmark on one encoder: primary metric, "
                            "Δ vs dense with significance marks, ms/query (reads results/, runs nothing)")
    parser.add_argument("--results", default=str(folder_path("results_dir")))
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2", help="encoder label of the runs (folder name)")
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--ignore", action="append", default=[], metavar="CODE",
                        help="a protocol-check finding code not to mark (repeatable; docs/checks.md)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from memrepro.checks import valid_codes

    ignore = valid_codes(args.ignore, "--ignore")
    runs = complete_runs(args.results)
    paths, frame = render_leaderboard(runs, Path(args.results) / "tables", args.encoder, args.resamples, ignore)
    print(frame.to_markdown(index=False))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
