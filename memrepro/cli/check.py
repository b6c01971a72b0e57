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
import json
import os
import sys
from pathlib import Path
from typing import Any

from memrepro.checks import (CODES, ROW_FIELDS, CheckInputError, Finding, RunView, check_comparison, check_run,
                             say, stored_or_checked, valid_codes, without)
from memrepro.cli.args import ArgumentParser
from memrepro.errors import EXIT_BAD_INPUT, MemreproError

Pools = dict[str, int]  # episode id -> memories in its candidate pool


def main(argv: list[str] | None = None) -> int:
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
    benchmarks: dict[str, tuple[set[tuple[str, str]], Pools] | None] = {}  # loaded once per dataset config
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
            pools = episode_pools(run, benchmarks)
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


def findings_of(folder: Path, record: Any) -> list[Finding]:
    """A just run, restored or skipped run's findings (``run``, ``eval``): those recorded, else (a run written
    before they were) checked from its files, which the caller has just verified or written."""
    if record.findings is not None:
        return stored_or_checked(RunView({}, record, [], folder))
    from memrepro.runs.folder import read_config, read_row_fields

    return check_run(RunView(read_config(folder), record, read_row_fields(folder, ROW_FIELDS), folder))


def load_run(path: str | Path) -> RunView:
    """A complete run folder (``results/runs/...``) or a kept copy (``results/kept/...``, read in place), verified:
    a damaged or incomplete folder is a :class:`CheckInputError` naming it."""
    from memrepro.runs.folder import COMPLETE, read_config, read_queries, read_record, run_problem
    from memrepro.runs.kept import QUERIES_XZ, read_in_place

    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise CheckInputError(f"{folder}: not a folder; pass run folders (results/runs/<dataset>/<retriever>/"
                              f"<encoder>/<run id>) or kept copies (results/kept/...)")
    if not (folder / COMPLETE).is_file():
        raise CheckInputError(f"{folder}: not a complete run folder (no {COMPLETE} marker)")
    try:
        if (folder / QUERIES_XZ).is_file() and not (folder / "queries.jsonl").is_file():
            config, record, rows = read_in_place(folder)
            return RunView(config, record, rows, folder)
        problem = run_problem(folder)
        if problem:
            raise CheckInputError(f"{problem}; rerun its command (or restore its kept copy) to check it")
        return RunView(read_config(folder), read_record(folder), read_queries(folder), folder)
    except MemreproError as exc:
        if isinstance(exc, CheckInputError):
            raise
        raise CheckInputError(str(exc)) from exc
    except (OSError, ValueError) as exc:
        raise CheckInputError(f"{folder}: unreadable ({type(exc).__name__}: {exc})") from exc


def episode_pools(run: Any, loaded: dict[str, tuple[set[tuple[str, str]], Pools] | None]) -> Pools | None:
    """``{episode id: memories}`` from the benchmark files the run read, when they are on this machine and have the
    sha256 the run recorded; None otherwise. For runs whose rows predate the recorded candidate pool. ``loaded``
    holds what each dataset config loaded to (its files and pools; None: absent or unreadable here), so a command
    checking several runs of one dataset loads it once."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from memrepro.datasets.io import DATA_DIR_ENV, RUNNER_SWITCHES

    node = {k: v for k, v in dict(run.config.get("dataset") or {}).items() if k not in RUNNER_SWITCHES}
    if os.environ.get(DATA_DIR_ENV):  # this machine's data root, else where the run read its files
        node["data_dir"] = None
    key = json.dumps(node, sort_keys=True, default=str)
    if key not in loaded:
        try:
            benchmark = instantiate(OmegaConf.create(node))
        except Exception:  # noqa: BLE001 - data absent or unreadable here: the pools stay unknown
            loaded[key] = None
        else:
            loaded[key] = ({(f.path, f.sha256) for f in benchmark.files},
                           {e: len(ep) for e, ep in benchmark.episodes.items()})
    found = loaded[key]
    recorded = {(f["path"], f["sha256"]) for f in run.record.provenance.files}
    return found[1] if found is not None and found[0] == recorded else None
