"""A run's ``metrics.json``: one typed record, built and read by the same class.

:meth:`RunRecord.build` is the one place a record is made from what a run computed (``run`` and ``eval`` both call
it): every field derived there, the protocol check's findings included; :func:`memrepro.runs.folder.write_run` is
the one writer of the file. Every field has a type, and a file is checked against them when read back: a missing
field, a value of another type or an unknown key is refused with the file and the key named
(:class:`RunRecordError`), never read as some other number. ``schema_version`` says which layout a file has; older
layouts are migrated on read (see :data:`MIGRATIONS`), newer ones are refused.

Free-form parts stay mappings: what a retriever's ``describe()`` says, the encoder's identity, library versions.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from memrepro.errors import DamagedFileError
from memrepro.evaluation.freeze import TIE_RULE
from memrepro.provenance import git_commit, package_versions
from memrepro.types import Benchmark

# 1: metrics.json before this record (no schema_version key; eval runs had no data_verified).
# 2: the typed record.
# 3: + findings (the protocol check, memrepro.checks); a record of schema 2 reads with none recorded.
SCHEMA_VERSION = 3


ENCODER_RECORD_ONLY = ("label", "resolved")  # what a record's encoder adds to the encoder's identity (run id)


class RunRecordError(DamagedFileError):
    """A metrics.json that is not a valid run record (file and key named)."""


@dataclass(frozen=True)
class Stats:
    """Aggregates over a set of scored rows (``memrepro.evaluation.aggregate``)."""

    n: int
    splits: dict[str, dict[str, Optional[float]]]  # per split: its n and its mean of every metric
    split_mean: dict[str, Optional[float]]
    split_std: dict[str, Optional[float]]  # None with a single split
    pooled: dict[str, Optional[float]]

    def mean_text(self, metric: str) -> str:
        """``mean ± std`` of the split means over several splits, else the pooled mean (4 decimals)."""
        if len(self.splits) > 1 and self.split_std.get(metric) is not None:
            return f"{self.split_mean[metric]:.4f} ± {self.split_std[metric]:.4f}"
        return f"{self.pooled[metric]:.4f}"


@dataclass(frozen=True)
class Category(Stats):
    name: str = ""


@dataclass(frozen=True)
class Summary(Stats):
    categories: dict[str, Category] = field(default_factory=dict)


@dataclass(frozen=True)
class Counts:
    n_total: int
    n_scored: int
    n_excluded: dict[str, int]  # reason -> count
    loader: dict[str, int] = field(default_factory=dict)  # what the loader dropped or repaired


@dataclass(frozen=True)
class Latency:
    """Batched amortized ms/query and batch-1 statistics; all empty for an external run file (nothing timed)."""

    batched_amortized_ms_per_query: Optional[float] = None
    batch1: dict[str, Any] = field(default_factory=dict)  # n, warmup, device, mean_ms, median_ms, p90_ms, measured_on
    timed_region: Optional[str] = None


@dataclass(frozen=True)
class Provenance:
    config_hash: str
    data_sha256: str
    files: list[dict[str, Any]]
    loader_options: dict[str, Any]
    tie_rule: str
    git: dict[str, Any]
    versions: dict[str, Optional[str]]
    created: str
    data_files: list[dict[str, Any]] = field(default_factory=list)  # checksum state of every file
    hardware: Optional[dict[str, Any]] = None  # runs only (an external run file was not computed here)
    run_file: Optional[dict[str, Any]] = None  # eval only: path and sha256 of the scored file
    # the ALGORITHM_VERSION of every class the retriever config names, as hashed into the run id (schema 1: none
    # recorded, every one was 1)
    algorithm_versions: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    dataset: str
    retriever: dict[str, Any]  # the retriever's describe()
    encoder: dict[str, Any]  # label and identity
    metric_names: list[str]
    primary: list[str]
    counts: Counts
    summary: Summary
    timings: dict[str, float]
    provenance: Provenance
    # True: every data file has its pinned sha256; False: one does not (never shown beside a paper); None: no pin
    data_verified: Optional[bool] = None
    returned: dict[str, Optional[float]] = field(default_factory=dict)  # gold-free: mean items, mean chars of top n
    warnings: list[str] = field(default_factory=list)
    latency: Latency = field(default_factory=Latency)
    routing: Optional[dict[str, dict[str, Optional[float]]]] = None  # per trace path: n and mean timings
    search: Optional[dict[str, Any]] = None  # approximate backends: their recall against exact search
    encoded: dict[str, int] = field(default_factory=dict)
    cache_hits: dict[str, int] = field(default_factory=dict)
    cache_quarantined: list[dict[str, Any]] = field(default_factory=list)  # damaged embedding shards re-encoded
    validation: Optional[dict[str, Any]] = None  # eval only: the run file's warnings
    migrated_from: Optional[str] = None  # an earlier id the run was stored under (older records); None when written
    # the protocol check's findings when the run was written (memrepro.checks.Finding.to_json: code, message, fix,
    # metrics); None: not checked when written (``memrepro check`` checks its files). Never part of the run id
    findings: Optional[list[dict[str, Any]]] = None
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The ``metrics.json`` document (``schema_version`` first)."""
        document = dataclasses.asdict(self)
        return {"schema_version": document.pop("schema_version"), **document}

    @classmethod
    def build(cls, *, run_id: str, config: Mapping[str, Any], rows: list[dict[str, Any]], benchmark: Benchmark,
              verification: Mapping[str, Any] | None, retriever: Mapping[str, Any], encoder: Mapping[str, Any],
              metric_names: list[str], counts: Mapping[str, Any], summary: Mapping[str, Any],
              timings: Mapping[str, float], source: str, warnings: Sequence[str] = (),
              quarantined: Sequence[Mapping[str, Any]] = (), latency: Mapping[str, Any] | None = None,
              search: Mapping[str, Any] | None = None, encoded: Mapping[str, int] | None = None,
              cache_hits: Mapping[str, int] | None = None, validation: Mapping[str, Any] | None = None,
              tie_rule: str = TIE_RULE, hardware: Mapping[str, Any] | None = None,
              algorithm_versions: Mapping[str, int] | None = None,
              run_file: Mapping[str, Any] | None = None) -> "RunRecord":
        """The record of a run about to be written to ``source`` (its ``metrics.json``), from what it computed:
        ``config`` as ``config.yaml`` will hold it, its scored ``rows`` (``queries.jsonl``), ``counts`` and
        ``summary`` (:func:`memrepro.stages.score_rankings`), the loaded ``benchmark`` and its files'
        ``verification``. Derived here: the returned-items and routing statistics of the rows, the warnings a
        reader must know (data anomalies, unverified files, ``quarantined`` cache shards, then ``warnings``), the
        provenance (data, code, library versions, time) and the protocol check's findings (:mod:`memrepro.checks`).
        What only a computed run has: ``latency``, ``search``, ``encoded``, ``cache_hits``, ``hardware``,
        ``algorithm_versions``; only a scored run file (``eval``): ``validation``, ``run_file``."""
        from memrepro.checks import RunView, check_run

        verification = verification or {}
        record = cls.new({
            "run_id": run_id,
            "dataset": benchmark.name,
            "data_verified": verification.get("data_verified"),
            "retriever": dict(retriever),
            "encoder": dict(encoder),
            "metric_names": list(metric_names),
            "primary": list(benchmark.protocol.primary),
            "counts": {**counts, "loader": dict(benchmark.loader_counts)},
            "returned": returned_stats(rows),
            "summary": summary,
            "warnings": run_warnings(benchmark, verification, quarantined) + list(warnings),
            "latency": dict(latency or {}),
            "routing": routing_summary(rows),
            "search": search,
            "timings": dict(timings),
            "encoded": dict(encoded or {}),
            "cache_hits": dict(cache_hits or {}),
            "cache_quarantined": list(quarantined),
            "validation": validation,
            "provenance": {
                "config_hash": run_id,
                "data_sha256": benchmark.data_sha256,
                "files": [vars(f) for f in benchmark.files],
                "data_files": verification.get("data_files", []),
                "loader_options": dict(benchmark.options),
                "run_file": run_file,
                "tie_rule": tie_rule,
                "algorithm_versions": dict(algorithm_versions or {}),
                "git": git_commit(),
                "versions": package_versions(),
                "hardware": hardware,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        }, source)
        found = check_run(RunView(config, record, rows))
        return dataclasses.replace(record, findings=[f.to_json() for f in found])

    @classmethod
    def new(cls, fields: Mapping[str, Any], source: str = "<new run record>") -> "RunRecord":
        """A record of the current schema from the given fields (the rest take their defaults), type-checked as a
        file is. The fields go through one JSON round trip first (numpy scalars, tuples, paths become what the
        file will hold), so the record in memory is exactly the one read back later."""
        plain = json.loads(json.dumps({**fields, "schema_version": SCHEMA_VERSION}, default=str))
        return _build(cls, plain, Path(source), "", complete=False)

    @classmethod
    def from_json(cls, document: Any, path: Path | str = "metrics.json") -> "RunRecord":
        """Validate ``document`` (migrating an older schema) into a record; :class:`RunRecordError` otherwise."""
        path = Path(path)
        if not isinstance(document, dict):
            raise RunRecordError(path, f"expected a JSON object, found {type(document).__name__}")
        version = document.get("schema_version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise RunRecordError(path, f"schema_version {version!r} is not a schema version")
        if version > SCHEMA_VERSION:
            raise RunRecordError(path, f"schema_version {version} was written by a newer memrepro (this one reads "
                                       f"up to {SCHEMA_VERSION}); update memrepro to read it")
        if version < SCHEMA_VERSION:
            for step in range(version, SCHEMA_VERSION):
                document = MIGRATIONS[step](document)
            return _build(cls, document, path, "", complete=False)
        return _build(cls, document, path, "", complete=True)

    @classmethod
    def read(cls, path: Path) -> "RunRecord":
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RunRecordError(path, "missing from a complete run") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RunRecordError(path, f"not valid JSON ({str(exc)[:80]}): empty, truncated or damaged") from None
        return cls.from_json(document, path)


def run_warnings(benchmark: Benchmark, verification: Mapping[str, Any] | None,
                 quarantined: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """What a reader of the results must know: tolerated data anomalies, unverified files, repaired cache shards."""
    out = list(benchmark.warnings)
    for check in (verification or {}).get("data_files", []):
        if check["state"] == "mismatch":
            out.append(f"unverified data: {check['path']} has sha256 {check['actual']}, not the pinned "
                       f"{check['expected']}")
    for shard in quarantined:
        out.append(f"embedding cache shard {shard['path']} failed its check ({shard['reason']}): quarantined and "
                   f"re-encoded")
    return out


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def returned_stats(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Gold-free diagnostics over every retrieved row (PersonaMem has no gold at all)."""
    return {"mean_items": _mean([r["n_returned"] for r in rows]),
            "mean_chars_top_n": _mean([r["returned_chars"] for r in rows])}


def routing_summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per path (a trace's ``path``): query count and the mean of every numeric ``*_ms`` trace field.

    RF-Mem reports its latency with the timer around the chosen path only (``path_ms``); the gate's probe is
    timed separately (``gate_ms``), so both the paper's number and the full cost can be read here.
    """
    by_path: dict[str, list[dict]] = {}
    for row in rows:
        trace = row.get("trace") or {}
        if "path" in trace:
            by_path.setdefault(str(trace["path"]), []).append(trace)
    if not by_path:
        return None
    out: dict[str, Any] = {}
    for path, traces in sorted(by_path.items()):
        timing_keys = sorted({k for t in traces for k, v in t.items() if k.endswith("_ms") and
                              isinstance(v, (int, float))})
        out[path] = {"n": len(traces), **{f"mean_{k}": _mean([t[k] for t in traces if k in t]) for k in timing_keys}}
    return out


def _defaults_for_new_fields(document: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2 and v2 -> v3: the same fields; what the older file lacks takes its default, which says "not
    recorded" (v1: data_verified, warnings, cache fields, an external run's latency; v2: findings, which
    ``memrepro check`` computes from the run's files)."""
    return {k: v for k, v in document.items() if k != "schema_version"}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _defaults_for_new_fields,
                                                                   2: _defaults_for_new_fields}


def _build(cls: type, data: Any, path: Path, where: str, complete: bool) -> Any:
    """``data`` as a ``cls`` instance, every field type-checked; ``complete``: every field must be present."""
    if not isinstance(data, Mapping):
        raise RunRecordError(path, f"{where or '<root>'}: expected an object, found {_kind(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise RunRecordError(path, f"{_join(where, unknown[0])}: unknown key (not in run record schema "
                                   f"{SCHEMA_VERSION})")
    hints = typing.get_type_hints(cls)
    values = {}
    for name, spec in fields.items():
        key = _join(where, name)
        has_default = spec.default is not dataclasses.MISSING or spec.default_factory is not dataclasses.MISSING
        if name not in data:
            if complete or not has_default:
                raise RunRecordError(path, f"{key}: missing")
            continue
        values[name] = _value(hints[name], data[name], path, key, complete)
    return cls(**values)


def _value(hint: Any, value: Any, path: Path, key: str, complete: bool) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _value(inner, value, path, key, complete)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, path, key, complete)
    if origin is dict:
        if not isinstance(value, dict):
            raise RunRecordError(path, f"{key}: expected an object, found {_kind(value)}")
        return {k: _value(args[1], v, path, _join(key, k), complete) for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list):
            raise RunRecordError(path, f"{key}: expected a list, found {_kind(value)}")
        return [_value(args[0], v, path, f"{key}[{i}]", complete) for i, v in enumerate(value)]
    if hint is Any:
        return value
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, hint):
        return value
    raise RunRecordError(path, f"{key}: expected {hint.__name__}, found {_kind(value)} {value!r:.40}")


def _join(where: str, name: Any) -> str:
    return f"{where}.{name}" if where else str(name)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
