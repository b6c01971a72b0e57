"""``python -m memrepro tables``: render the paper tables that our results allow into ``results/tables/``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from memrepro.tables.convmemory import ablation_table, main_table, select
from memrepro.tables.runs import complete_runs


def _write(frame, out_dir: Path, name: str, title: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".md", f"# {title}\n\n" + frame.to_markdown(index=False) + "\n"),
                         (".csv", frame.to_csv(index=False))):
        target = out_dir / f"{name}{suffix}"
        tmp = target.with_suffix(suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, target)
    print(f"# {title}\n\n{frame.to_markdown(index=False)}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memrepro tables", description=__doc__)
    parser.add_argument("--results", default=os.environ.get("MEMREPRO_RESULTS_DIR", "results"))
    parser.add_argument("--resamples", type=int, default=10_000, help="paired bootstrap resamples (seed 13)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    runs = complete_runs(args.results)
    if not runs:
        print(f"no complete runs under {args.results}/runs: run `python -m memrepro run ...` first", file=sys.stderr)
        return 1
    selected = select(runs)
    out = Path(args.results) / "tables"
    _write(main_table(selected, args.resamples), out, "convmemory_locomo",
           "ConvMemory LoCoMo (5 conversation-level seeds; mean ± std of seed means)")
    _write(ablation_table(selected, args.resamples), out, "convmemory_ablation", "ConvMemory v2 ablation (FULL MRR)")
    return 0
