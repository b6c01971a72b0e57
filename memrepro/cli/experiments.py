"""``python -m memrepro experiments``: run the declared list (``conf/experiments.yaml``), skipping complete runs."""

from __future__ import annotations

import sys

from memrepro.cli.args import ArgumentParser
from memrepro.experiments import DEFAULT_LIST, ExperimentListError, load_experiments, run_experiments


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m memrepro experiments", description=__doc__)
    parser.add_argument("--file", default=str(DEFAULT_LIST), help="the experiment list (default: %(default)s)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this entry, or every entry that feeds this table/figure (repeatable)")
    parser.add_argument("--include-optional", action="store_true", help="also run entries marked optional")
    parser.add_argument("--dry-run", action="store_true", help="print the command lines without running them")
    parser.add_argument("--list", action="store_true", help="list the entries with what they feed and their cost")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        common, experiments = load_experiments(args.file)
    except ExperimentListError as exc:
        print(f"memrepro: error: {exc}", file=sys.stderr)
        return 2
    if args.only:
        wanted = set(args.only)
        known = {e.name for e in experiments} | {f for e in experiments for f in e.feeds}
        unknown = sorted(wanted - known)
        if unknown:
            print(f"memrepro: error: --only {unknown}: no such entry or table; known: {sorted(known)}",
                  file=sys.stderr)
            return 2
        # runs find their trained models by recipe hash (trained on demand when missing): no step to bring along
        experiments = [e for e in experiments if e.name in wanted or wanted & set(e.feeds)]
    if args.list:
        for e in experiments:
            flags = ", ".join(f for f, on in (("sweep", e.sweep), ("optional", e.optional), (e.kind, e.kind != "run"))
                              if on)
            print(f"{e.name:40} {('[' + flags + ']') if flags else '':18} feeds {', '.join(e.feeds)}; cost {e.cost}")
        return 0
    outcomes = run_experiments(experiments, common, include_optional=args.include_optional, dry_run=args.dry_run)
    print("\nsummary:")
    for o in outcomes:
        print(f"  {o.name:40} {o.status:22} {o.seconds:7.0f} s  {o.detail}")
    return 1 if any(o.status == "failed" for o in outcomes) else 0
