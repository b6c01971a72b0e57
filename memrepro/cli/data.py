"""``python -m memrepro data check [--stats] | download``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memrepro.cli.args import ArgumentParser
from memrepro.datasets.catalogue import DOWNLOADS, catalogue
from memrepro.datasets.download import ChecksumMismatch, OfflineError, check, download
from memrepro.datasets.io import DATA_DIR_ENV, data_root
from memrepro.errors import EXIT_BAD_INPUT, MemreproError
from memrepro.files import write_text_atomic
from memrepro.paths import folder_path

BENCHMARKS = ("locomo", "longmemeval", "personabench", "personamem")


def _stats_loaders(root: Path):
    """The standard configurations whose statistics are pinned by golden files."""
    from memrepro.datasets.locomo import load_locomo
    from memrepro.datasets.longmemeval import load_longmemeval
    from memrepro.datasets.personabench import load_personabench
    from memrepro.datasets.personamem import load_personamem_questions

    return {
        "locomo": lambda: load_locomo(root),
        "longmemeval_oracle": lambda: load_longmemeval(root, variant="oracle"),
        "longmemeval_s": lambda: load_longmemeval(root, variant="s"),
        "personabench": lambda: load_personabench(root),
        "personamem_questions_32k": lambda: load_personamem_questions(root),
    }


def cmd_check(args: argparse.Namespace) -> int:
    root = data_root(args.data_dir)
    statuses = check(catalogue(args.benchmark), root)
    by_state: dict[str, int] = {}
    for status in statuses:
        by_state[status.state] = by_state.get(status.state, 0) + 1
        if args.verbose or status.state != "ok":
            shown = status.sha256[:12] + "…" if status.sha256 else "-"
            print(f"{status.state:<9} {status.entry.path}  {shown}  {status.entry.note}")
    print(f"data root {root}: " + ", ".join(f"{n} {state}" for state, n in sorted(by_state.items())))
    refused = False
    if args.stats:
        from memrepro.datasets.stats import benchmark_stats, personamem_question_stats
        from memrepro.datasets.verify import check_files, describe_mismatch

        out_dir = Path(args.stats_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, load in _stats_loaders(root).items():
            if args.benchmark and not any(name.startswith(b) for b in args.benchmark):
                continue
            target = out_dir / f"{name}.json"
            try:
                loaded = load()
            except MemreproError as exc:
                print(f"stats {name}: skipped ({str(exc).splitlines()[0]})")
                continue
            files = loaded.files if hasattr(loaded, "episodes") else (loaded.file,)
            bad = [c for c in check_files(files) if c.state == "mismatch"]
            if bad:  # statistics of an unverified file would pass for the pinned data's
                refused = True
                print(f"memrepro: error: {describe_mismatch(bad[0], root)}; statistics {name} not written "
                      f"({target} left as it was); restore the file (`python -m memrepro data download`), then "
                      f"rerun", file=sys.stderr)
                continue
            stats = benchmark_stats(loaded) if hasattr(loaded, "episodes") else personamem_question_stats(loaded)
            write_text_atomic(target, json.dumps(stats, indent=2) + "\n")
            if hasattr(loaded, "episodes"):
                _gold_audit(name, loaded, root, out_dir / f"{name}.gold_audit.json")
            if "episodes" in stats:
                spread = stats["memories_per_episode"]
                print(f"stats {name}: {stats['queries']} queries ({stats['scored_queries']} scored), "
                      f"{stats['episodes']} episodes, {stats['memories']} memories "
                      f"({spread['min']}/{spread['mean']}/{spread['max']} per episode) → {target}")
            else:
                print(f"stats {name}: {stats['queries']} questions, {stats['shared_contexts']} contexts → {target}")
    if refused:
        return EXIT_BAD_INPUT
    return 1 if any(s.problem for s in statuses) else 0


def _gold_audit(name: str, benchmark, root: Path, target: Path) -> None:
    """The benchmark's structural gold problems (memrepro.datasets.gold_audit): counted in one line, listed in
    ``<name>.gold_audit.json`` beside its statistics."""
    from memrepro.datasets.gold_audit import audit, summary

    raw = root / benchmark.files[0].path if benchmark.name == "locomo" else None
    problems = audit(benchmark, raw)
    counts = summary(problems)
    document = {"benchmark": benchmark.name, "files": [{"path": f.path, "sha256": f.sha256} for f in benchmark.files],
                "counts": counts, "problems": [p.to_json() for p in problems]}
    write_text_atomic(target, json.dumps(document, indent=2) + "\n")
    found = ", ".join(f"{kind} {n}" for kind, n in counts.items() if n) or "none found"
    print(f"gold audit {name}: {found} → {target}")


def cmd_download(args: argparse.Namespace) -> int:
    root = data_root(args.data_dir)
    entries = [e for e in DOWNLOADS if not args.benchmark or e.benchmark in args.benchmark]
    try:
        results = download(entries, root, mirror=args.mirror, allow_mismatch=args.allow_mismatch)
    except OfflineError as exc:
        print(f"offline: {exc}. Place the benchmark files under ${DATA_DIR_ENV} (now {root}) instead.",
              file=sys.stderr)
        return 1
    except ChecksumMismatch as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    for result in results:
        print(f"{result.state:<20} {result.entry.path}  sha256 {result.sha256}")
    return 0


def main(argv: list[str] | None = None) -> int:
    common = ArgumentParser(add_help=False)
    common.add_argument("--data-dir", default=None,
                        help=f"data root (default ${DATA_DIR_ENV}, else data/ in the project folder)")
    common.add_argument("--benchmark", action="append", choices=BENCHMARKS, help="restrict to a benchmark")
    parser = ArgumentParser(prog="python -m memrepro data", description="benchmark files")
    sub = parser.add_subparsers(dest="command", required=True)
    p_check = sub.add_parser("check", parents=[common],
                             help="list each file, present or missing, with sha256 against pinned values")
    p_check.add_argument("--stats", action="store_true", help="also write dataset statistics")
    p_check.add_argument("--stats-dir", default=str(folder_path("results_dir") / "data_stats"))
    p_check.add_argument("-v", "--verbose", action="store_true", help="list files that are ok too")
    p_download = sub.add_parser("download", parents=[common],
                                help="fetch the official files (online), verifying checksums")
    p_download.add_argument("--mirror", default=None, help="base URL laid out like the data root")
    p_download.add_argument("--allow-mismatch", action="store_true", help="keep a file whose sha256 differs")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return {"check": cmd_check, "download": cmd_download}[args.command](args)
