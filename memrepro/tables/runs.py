"""Reading complete runs back from ``results/runs`` for tables: config, metrics, per-query rows."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from numbers import Real
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from memrepro.checks import Finding, check_run
from memrepro.experiments import SAFE_LOADER
from memrepro.runs.folder import COMPLETE, read_queries, read_record, run_problem
from memrepro.runs.record import RunRecord

SETTING_TOLERANCE = 1e-9


def is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def same_setting(a: Any, b: Any) -> bool:
    """Equality of config values, numbers within ``SETTING_TOLERANCE``; lists and dicts compared item by item."""
    if is_number(a) and is_number(b):
        return (math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=SETTING_TOLERANCE)
                or (math.isnan(a) and math.isnan(b)))
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_setting(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_setting(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def dotted(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"recollection.alpha": 0.9, ...}``: every leaf under its dotted path, the way the
    command line names it (``retriever.recollection.alpha``) without the group."""
    flat: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, Mapping) and value and "_target_" not in value:
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@dataclass(frozen=True)
class Run:
    folder: Path

    @cached_property
    def config(self) -> dict[str, Any]:
        # libyaml where PyYAML has it: the pure-Python loader takes ~30 ms a config, seconds over every run
        return yaml.load((self.folder / "config.yaml").read_text(), Loader=SAFE_LOADER)

    @cached_property
    def record(self) -> RunRecord:
        return read_record(self.folder)

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        return read_queries(self.folder)

    @cached_property
    def checked(self) -> tuple[Finding, ...]:
        """The protocol check of the run's files (:func:`memrepro.checks.check_run`), for every cell showing it."""
        return tuple(check_run(self))

    @property
    def dataset(self) -> str:
        return self.record.dataset

    @cached_property
    def retriever(self) -> dict[str, Any]:
        """The retriever config the run recorded."""
        return dict(self.config["retriever"])

    @cached_property
    def settings(self) -> dict[str, Any]:
        """What decides this run's rankings and metrics, as its run id hashes it: what a declared condition is
        matched by."""
        from memrepro.runs.identity import semantic_config

        return semantic_config({**self.config, "retriever": self.retriever})

    @cached_property
    def retriever_settings(self) -> dict[str, Any]:
        """The retriever config by dotted path (``recollection.alpha``, ``gate.tau``, ``k``)."""
        return dotted(self.retriever)

    @property
    def retriever_name(self) -> str:
        """The retriever's folder name (``results/runs/<dataset>/<retriever>/<encoder>/<run id>``)."""
        return self.folder.parts[-3]

    @property
    def encoder_label(self) -> str:
        return self.folder.parts[-2]

    @property
    def created(self) -> float:
        """``provenance.created`` as a timestamp (−inf when absent or unreadable)."""
        stamp = self.record.provenance.created
        if not stamp:
            return -math.inf
        for parse in (lambda s: datetime.strptime(s, "%Y-%m-%dT%H:%M:%S%z"), datetime.fromisoformat):
            with contextlib.suppress(ValueError, TypeError):
                return parse(stamp).timestamp()
        return -math.inf

    @property
    def preference(self) -> tuple[bool, int, float, str]:
        """Which of several runs of one setting a table keeps (largest wins): the faithful engine (runs without
        an engine count as faithful), then the most split seeds (a run over a subset stands in only while the
        full run is absent), then the newest, then the folder name."""
        return (self.retriever.get("engine", "faithful") == "faithful", len(self.seeds), self.created,
                self.folder.name)

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(self.config["dataset"].get("seeds") or ())

    def per_unit(self, metric: str) -> dict[str, float]:
        """``{"split::query_id": value}`` over scored rows: the units of a paired test."""
        return {f"{r['split']}::{r['query_id']}": r["metrics"][metric] for r in self.rows if r["excluded"] is None}


def preferred(runs: Iterable[Run]) -> Run | None:
    """The run a table keeps among runs of one setting (see :attr:`Run.preference`); None when there is none."""
    return max(runs, key=lambda run: run.preference, default=None)


def complete_runs(results_dir: str | Path, warn: Callable[[str], None] | None = None) -> list[Run]:
    """Every complete run under ``results_dir/runs`` that a table may use.

    Left out, each with one warning line: temporary folders of an interrupted commit (dot-names), runs whose files
    fail verification (an empty or truncated ``metrics.json``, a corrupt ``queries.jsonl`` line: the file is
    named), runs on data whose sha256 is not the pinned one (``data_verified: false``), which never stand
    beside a paper number, and runs computed with an algorithm version that has since been bumped.
    """
    warn = warn or _warn
    runs = []
    for marker in sorted(Path(results_dir).glob(f"runs/*/*/*/*/{COMPLETE}")):
        folder = marker.parent
        if any(part.startswith(".") for part in folder.relative_to(results_dir).parts):
            continue
        problem = run_problem(folder)
        if problem:
            warn(f"skipped {folder}: {problem}; rerun its command to recompute it")
            continue
        run = Run(folder)
        problem = unusable(run)
        if problem:
            warn(f"skipped {folder}: {problem}")
            continue
        runs.append(run)
    return runs


def unusable(run: Run) -> str | None:
    """Why a complete, verified run must not be shown (None when it may): it ran on data whose sha256 is not the
    pinned one, or with an algorithm version that has since been bumped."""
    if run.record.data_verified is False:
        bad = [f for f in run.record.provenance.data_files if f.get("state") == "mismatch"]
        detail = "; ".join(f"{f['path']} sha256 {f['actual']} (pinned {f['expected']})" for f in bad)
        return f"ran on unverified data ({detail or 'checksum mismatch'}), never shown beside the paper"
    stale = _stale(run)
    if stale:
        return f"computed with {stale}; rerun its command to recompute it"
    return None


def _stale(run: Run) -> str:
    """Which algorithm versions a run was computed with that today's code has bumped ('' when none): a fixed
    retriever's old numbers never reach a table (runs recorded before versions were: every one was 1)."""
    from memrepro.runs.identity import algorithm_versions

    recorded = run.record.provenance.algorithm_versions
    current = algorithm_versions(run.config.get("retriever"), recorded=True)
    return ", ".join(f"{target.rsplit('.', 1)[-1]} ALGORITHM_VERSION {recorded.get(target, 1)} (now {version})"
                     for target, version in sorted(current.items()) if recorded.get(target, 1) != version)


def _warn(message: str) -> None:
    print(f"memrepro: warning: {message}", file=sys.stderr)
