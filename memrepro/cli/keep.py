"""``python -m memrepro keep RUN_FOLDER...`` / ``keep --restore`` / ``keep --list``.

Keeps complete runs as compressed copies under ``results/kept/`` (``$MEMREPRO_KEPT_DIR``) to commit with the
repository, so that runs too expensive for one sitting (the full-pool cross-encoder: about 1.5 CPU hours per
LoCoMo split seed) add up across machines and clones. ``run`` restores a kept copy of the run it is asked for and
reuses kept runs over fewer seeds (``memrepro/runs/kept.py``), and ``tables`` restores every kept run first;
``--restore`` only writes every kept run absent from ``results/runs`` back (or the run folders it names), each with
its ``run.trec``: ``run`` and ``tables`` leave a restored run's ``run.trec`` to be written when first asked for
(``eval`` of it, or ``keep --restore <run folder>``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memrepro.cli.args import ArgumentParser
from memrepro.errors import EXIT_BAD_INPUT, MemreproError, one_line
from memrepro.paths import folder_path


def main(argv: list[str] | None = None) -> int:
    from memrepro.runs.kept import KeptRuns

    parser = ArgumentParser(prog="python -m memrepro keep", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="*", type=Path,
                        help="complete run folders under results/runs to keep (with --restore: to restore)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--restore", action="store_true",
                        help="write every kept run absent from results/runs back (or the run folders named), each "
                             "with its run.trec")
    action.add_argument("--list", action="store_true", help="list the kept runs and whether results/runs has them")
    parser.add_argument("--results", type=Path, default=folder_path("results_dir"))
    parser.add_argument("--kept", type=Path, default=folder_path("kept_dir"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    kept = KeptRuns(args.results, args.kept, say=lambda line: print(f"memrepro: {line}", file=sys.stderr))
    if args.list and args.folders:
        parser.error("--list takes no run folders")
    if not (args.restore or args.list or args.folders):
        parser.error("name run folders to keep, or --restore, or --list")
    try:
        if args.folders and not args.restore:
            kept.remove_leftovers()
            for folder in args.folders:
                copy = kept.keep(folder)
                size = sum(p.stat().st_size for p in copy.iterdir())
                print(f"kept {folder} -> {copy} ({size / 1e6:.2f} MB; commit it)")
            return 0
        if args.list:
            for copy in kept.all():
                folder = kept.folder_of(copy)
                print(f"{copy}  ({'in' if (folder / 'COMPLETE').is_file() else 'not in'} {args.results}/runs)")
            return 0
        restored, problems = kept.restore_all(trec=True, folders=args.folders or None)
        for problem in problems:
            print(f"memrepro: error: {problem}", file=sys.stderr)
        asked = len(args.folders) if args.folders else len(kept.all())
        print(f"{len(restored)} restored into {args.results}/runs, {asked - len(restored) - len(problems)} already "
              f"present, {len(problems)} damaged; run.trec written where absent")
        return EXIT_BAD_INPUT if problems else 0
    except MemreproError as exc:
        print(f"memrepro: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
