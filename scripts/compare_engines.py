"""Agreement and speed of runs that differ only in ``retriever.engine`` (faithful vs each other engine).

Prints, per pair of complete runs under ``--results``, the share of identical rankings, the delta of the primary
metric and the retrieval-time ratio; ``python -m memrepro tables`` writes the same as ``engine_agreement.*``.
Example: ``python scripts/compare_engines.py --results results``.
"""

from __future__ import annotations

import argparse

from memrepro.tables.engines import agreement_table
from memrepro.tables.runs import complete_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", default="results")
    args = parser.parse_args()
    frame, summary = agreement_table(complete_runs(args.results))
    if frame.empty:
        raise SystemExit(summary[0])
    print(frame.to_markdown(index=False, disable_numparse=True))
    print("\n" + "\n".join(summary))


if __name__ == "__main__":
    main()
