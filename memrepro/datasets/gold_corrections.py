"""Corrected gold labels: a versioned file per benchmark (``memrepro/datasets/corrections/<benchmark>.yaml``) of
questions whose retrieval gold a public report shows to be wrong, each with what is wrong, the corrected gold and
the report (docs/checks.md#gold-labels).

``dataset.gold_labels=original`` (the default) scores the data as published, as the papers did: nothing here is
read and every run id stays what it was. ``dataset.gold_labels=corrected`` replaces the listed questions' gold; the
corrections file's sha256 joins the benchmark's data hash (:attr:`memrepro.types.Benchmark.data_sha256`), so a
corrected run has its own run id, and its record says which file and version corrected how many questions.

A file is checked whole when it is read: an entry whose question does not exist in the loaded benchmark, or whose
corrected gold names a memory outside the question's own episode, is refused in one line naming the file, the
entry and the id.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from memrepro.errors import EXIT_BAD_INPUT, MemreproError
from memrepro.types import Benchmark

ORIGINAL, CORRECTED = "original", "corrected"
GOLD_LABELS = (ORIGINAL, CORRECTED)
PACKAGE = "memrepro.datasets.corrections"


class CorrectionsError(MemreproError, ValueError):
    """A corrections file that cannot be applied (file, entry and id named): bad input."""

    exit_code = EXIT_BAD_INPUT


@dataclass(frozen=True)
class Correction:
    question: str
    problem: str
    gold: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class Corrections:
    benchmark: str
    version: int
    path: str  # as shown to users: memrepro/datasets/corrections/<name>.yaml
    sha256: str
    entries: tuple[Correction, ...]


def file_name(benchmark: str) -> str:
    """The corrections file of a loaded benchmark (``longmemeval_s`` and ``longmemeval_oracle`` share one)."""
    return f"{benchmark.split('_')[0]}.yaml"


def available() -> list[str]:
    return sorted(p.name for p in resources.files(PACKAGE).iterdir() if p.name.endswith(".yaml"))


def read_corrections(benchmark: str) -> Corrections:
    """The corrections file of ``benchmark``, parsed and checked for shape (not yet against the data)."""
    name = file_name(benchmark)
    shown = f"memrepro/datasets/corrections/{name}"
    source = resources.files(PACKAGE).joinpath(name)
    if not source.is_file():
        raise CorrectionsError(f"dataset.gold_labels=corrected: there is no corrections file for {benchmark} "
                               f"(files: {', '.join(available())}); use dataset.gold_labels=original")
    data = source.read_bytes()
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise CorrectionsError(f"{shown}: not valid YAML ({str(exc).splitlines()[0]}); restore the file") from None
    if not isinstance(document, dict) or not isinstance(document.get("corrections"), list):
        raise CorrectionsError(f"{shown}: expected a mapping with a `corrections` list; restore the file")
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CorrectionsError(f"{shown}: `version` must be a positive integer, found {version!r}")
    entries = []
    for index, raw in enumerate(document["corrections"], start=1):
        entry = f"{shown}: entry {index}"
        if not isinstance(raw, dict):
            raise CorrectionsError(f"{entry}: expected a mapping (question, problem, gold, source)")
        missing = [key for key in ("question", "problem", "gold", "source") if not raw.get(key)]
        if missing:
            raise CorrectionsError(f"{entry} ({raw.get('question', '?')!r}): missing {', '.join(missing)}; every "
                                   f"correction names its question, what is wrong, the corrected gold and its source")
        gold = raw["gold"]
        if not isinstance(gold, list) or not all(isinstance(g, str) for g in gold):
            raise CorrectionsError(f"{entry} ({raw['question']!r}): `gold` must be a list of memory ids")
        entries.append(Correction(str(raw["question"]), str(raw["problem"]), tuple(gold), str(raw["source"])))
    seen: dict[str, int] = {}
    for index, correction in enumerate(entries, start=1):
        if correction.question in seen:
            raise CorrectionsError(f"{shown}: entry {index}: question {correction.question!r} is corrected again "
                                   f"(also entry {seen[correction.question]}); keep one entry per question")
        seen[correction.question] = index
    return Corrections(str(document.get("benchmark") or benchmark), version, shown,
                       hashlib.sha256(data).hexdigest(), tuple(entries))


def apply_corrections(benchmark: Benchmark, corrections: Corrections | None = None) -> Benchmark:
    """``benchmark`` with the corrected gold of every entry; an entry whose question does not exist, or whose gold
    is not a memory of the question's own episode, is refused (one line: file, entry, id)."""
    corrections = corrections or read_corrections(benchmark.name)
    by_id = {q.id: q for q in benchmark.queries}
    fixed: dict[str, Any] = {}
    for index, correction in enumerate(corrections.entries, start=1):
        entry = f"{corrections.path}: entry {index}"
        query = by_id.get(correction.question)
        if query is None:
            raise CorrectionsError(f"{entry}: question {correction.question!r} does not exist in {benchmark.name} "
                                   f"({len(by_id):,} questions loaded); fix the id or remove the entry")
        known = set(benchmark.episodes[query.episode_id].ids)
        outside = [g for g in correction.gold if g not in known]
        if outside:
            raise CorrectionsError(f"{entry}: question {correction.question!r}: corrected gold {outside[0]!r} is not a "
                                   f"memory of its episode {query.episode_id!r}; fix the gold id")
        fixed[query.id] = dataclasses.replace(query, gold=correction.gold)
    options = {**benchmark.options, "gold_labels": {"mode": CORRECTED, "file": corrections.path,
                                                    "version": corrections.version, "sha256": corrections.sha256,
                                                    "corrected": len(fixed)}}
    return dataclasses.replace(benchmark, queries=tuple(fixed.get(q.id, q) for q in benchmark.queries),
                               options=options, gold_corrections=corrections.sha256)


@dataclass(frozen=True)
class CorrectionEffect:
    """What the corrections change for one system: over the corrected questions it scored, its metric with the
    original gold and with the corrected gold, and the change of its overall mean."""

    metric: str
    questions: int  # corrected questions among the scored units
    before: float | None  # mean over those questions, original gold
    after: float | None  # the same, corrected gold
    overall_before: float
    overall_after: float

    @property
    def overall_delta(self) -> float:
        return self.overall_after - self.overall_before


def corrections_effect(original: Any, corrected: Any, metric: str) -> CorrectionEffect:
    """The difference the corrections make to one system: ``original`` and ``corrected`` are its runs (anything
    with a record and query rows: :class:`memrepro.tables.runs.Run`) with ``dataset.gold_labels=original`` and
    ``corrected``, on the same data and settings otherwise."""
    labels = corrected.record.provenance.loader_options.get("gold_labels")
    if not isinstance(labels, dict) or labels.get("mode") != CORRECTED:
        raise CorrectionsError(f"{getattr(corrected, 'folder', 'the second run')}: not a run with "
                               f"dataset.gold_labels=corrected")
    fixed = {c.question for c in read_corrections(corrected.record.dataset).entries}

    def units(run: Any) -> dict[tuple[str, str], float]:
        return {(r["split"], r["query_id"]): r["metrics"][metric] for r in run.rows if r.get("excluded") is None}

    a, b = units(original), units(corrected)
    touched = [u for u in a if u[1] in fixed and u in b]

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return CorrectionEffect(metric, len(touched), mean([a[u] for u in touched]), mean([b[u] for u in touched]),
                            mean(list(a.values())) or 0.0, mean(list(b.values())) or 0.0)
