"""``python -m memrepro migrate``: move run folders written before run ids hashed algorithm versions to their
current ids (see :mod:`memrepro.runs.migrate`)."""

from __future__ import annotations

import sys

from memrepro.cli.args import ArgumentParser
from memrepro.paths import folder_path
from memrepro.runs.migrate import __doc__ as MIGRATE_DOC
from memrepro.runs.migrate import migrate


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m memrepro migrate", description=MIGRATE_DOC.split("\n\n")[0])
    parser.add_argument("--results", default=str(folder_path("results_dir")))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    results = migrate(args.results)
    left = [r for r in results if r.new is None and r.note.startswith(("not migrated", "left for"))]
    print(f"{sum(r.new is not None for r in results)} moved, {len(left)} left in place, "
          f"{len(results) - len(left) - sum(r.new is not None for r in results)} unchanged")
    return 1 if left else 0
