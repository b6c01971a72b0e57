"""``python -m memrepro check RUN_FOLDER... [--ignore CODE] [--compare] [--no-data]``: the protocol check on demand.

Each folder (a run under ``results/runs`` or a kept copy under ``results/kept``, read in place) is checked from its
files: every finding with its code, what the run shows and the fix (docs/checks.md). A folder that is absent,
incomplete or damaged is named in one line and the next one is checked. ``--compare`` also checks the runs as
compared with each other (tie rules, gold definitions, query sets). Runs written before rows recorded their
candidate pool read the pools from the benchmark files when they are on this machine (``--no-data``: never).

Exit code: 0 no finding, 1 findings, 2 bad input (a folder that could not be checked, an unknown finding code).
"""

from __future__ import annotations

import argparse
import sys

from memrepro.cli.args import ArgumentParser
from memrepro.errors import EXIT_BAD_INPUT


def main(argv: list[str] | None = None) -> int:
    from memrepro.checks import (CODES, CheckInputError, check_comparison, check_run, episode_pools, load_run, say,
                                 valid_codes, without)

    parser = ArgumentParser(prog="python -m memrepro check", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders (results/runs/...) or kept copies (results/kept/...)")
    parser.add_argument("--ignore", action="append", default=[], metavar="CODE",
                        help=f"a finding code not to report (repeatable): {', '.join(CODES)}")
    parser.add_argument("--compare", action="store_true", help="also check the runs as compared with each other")
    parser.add_argument("--no-data", action="store_true", help="never read benchmark files for candidate pools")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    ignore = valid_codes(args.ignore, "--ignore")  # an unknown code: one line naming the valid ones, exit 2
    bad, any_findings, loaded = False, False, []
    for path in args.runs:
        try:
            run = load_run(path)
        except CheckInputError as exc:
            print(f"memrepro: error: {exc}", file=sys.stderr)
            bad = True
            continue
        loaded.append(run)
        pools = None
        if not args.no_data and any(row.get("pool") is None for row in run.rows[:1]):
            pools = episode_pools(run)
        findings = without(check_run(run, pools), ignore)
        any_findings = any_findings or bool(findings)
        note = "" if pools is None else " (candidate pools read from the benchmark files)"
        print(f"{run.folder}: {run.dataset}, {len(findings)} finding{'s' if len(findings) != 1 else ''}{note}")
        for finding in findings:
            print(f"  {finding.line()}")
    if args.compare and len(loaded) > 1:
        between = [f for f in check_comparison(loaded) if not f.run]
        shown = say(between, ignore)
        print(f"compared with each other: {shown.count(chr(10)) + 1 if shown else 0} finding(s)")
        if shown:
            print("\n".join(f"  {line}" for line in shown.splitlines()))
        any_findings = any_findings or bool(without(between, ignore))
    if bad:
        return EXIT_BAD_INPUT
    return 1 if any_findings else 0
