"""The protocol check in the report (docs/checks.md): each run's findings, the tags of paper cells and comparison
rows, and where the documentation explains each finding.

A run's findings are the ones its ``metrics.json`` recorded when it was written, else (a run written before the
check existed) :func:`memrepro.checks.check_run` of its files. Rows written before they recorded their candidate
pool get the pools from the benchmark files, read once per loader configuration (in a worker, beside the texts),
and only when those files are the ones the run read (its ``provenance.data_sha256``), as ``python -m memrepro
check`` does.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from memrepro.checks import BY_CODE, KINDS, Finding, stored_or_checked, tags

CHECKS_PAGE = "checks.html"  # docs/checks.md in the docs site (use_directory_urls off); a kind's anchor is its code


@dataclass(frozen=True)
class Pools:
    """The candidate pool of every episode of one loader configuration, and the data hash they were read from."""

    data_sha256: str
    sizes: dict[str, int]


def read_pools(datasets: Mapping[str, Mapping[str, Any]]) -> dict[str, Pools | None]:
    """``{text table key: its Pools}`` of each dataset node (None where the benchmark cannot be read here). Runs in a
    worker process."""
    from memrepro.site.texts import load

    out: dict[str, Pools | None] = {}
    for key, dataset in datasets.items():
        benchmark, _ = load(dataset)
        out[key] = None if benchmark is None else Pools(
            benchmark.data_sha256, {episode: len(memories) for episode, memories in benchmark.episodes.items()})
    return out


@dataclass(frozen=True)
class Checked:
    """A run's findings and where they come from (said under them on its page)."""

    findings: list[Finding]
    source: str


def run_findings(run: Any, pools_of: Callable[[], Pools | None]) -> Checked:
    """The findings of ``run`` (its rows still loaded): recorded, else checked from its files, with the pools
    ``pools_of()`` gives where its rows do not record their candidate pool and those are of the data it read."""
    if run.record.findings is not None:
        return Checked(stored_or_checked(run), "Recorded by the run when it was written (metrics.json)")
    recorded = all(row.get("pool") is not None for row in run.rows[:1])
    pools = None if recorded else pools_of()
    usable = pools is not None and pools.data_sha256 == run.record.provenance.data_sha256
    found = stored_or_checked(run, pools.sizes if usable else None)
    if recorded or usable:
        return Checked(found, "Checked from the run's files (it was written before runs recorded their findings)")
    return Checked(found, "Checked from the run's files without candidate pools (its rows do not record them and the "
                          "benchmark files it read are not on this machine): the pool findings are not checked")


def named(findings: Iterable[Finding], name: str) -> list[Finding]:
    """``findings`` as one run's among several (its name in front of each)."""
    return [Finding(f.code, f.message, f.fix, f.metrics, name) for f in findings]


def metric_tags(findings: Iterable[Finding], metrics: Sequence[str]) -> dict[str, str]:
    """``{metric: " [F]"}``: the tags of the findings that name ``metric`` (those that concern every number are said
    once, above the numbers)."""
    findings = [f for f in findings if f.metrics]
    return {m: tags(f for f in findings if m in f.metrics) for m in metrics}


@dataclass(frozen=True)
class KindCount:
    """One finding kind present: its tag, code, what it means, and how many cells (or runs) carry it."""

    tag: str
    code: str
    title: str
    count: int


def kinds_present(findings: Iterable[Finding]) -> list[KindCount]:
    """The kinds present in ``findings`` (each counted once per finding), in the order of the closed list."""
    counts = Counter(f.code for f in findings)
    return [KindCount(kind.tag, kind.code, kind.title, counts[kind.code]) for kind in KINDS if counts[kind.code]]


@dataclass(frozen=True)
class Note:
    """One distinct finding under a paper table: its tag, code, sentence and fix, and how many cells carry it."""

    tag: str
    code: str
    message: str
    fix: str
    cells: int


def notes(findings: Iterable[Finding]) -> list[Note]:
    """The distinct findings of a table's cells, in the order of the closed list, then of first use."""
    counts: Counter = Counter((f.code, f.message, f.fix) for f in findings)
    order = {kind.code: i for i, kind in enumerate(KINDS)}
    ordered = sorted(counts, key=lambda key: order[key[0]])  # stable: first use within a kind
    return [Note(BY_CODE[code].tag, code, message, fix, counts[(code, message, fix)])
            for code, message, fix in ordered]


def checks_doc(up_link: str | None) -> str | None:
    """The docs site's checks page relative to the report's root, when the report is part of the docs site
    (``--up-link``: the docs site's index relative to the report), else None."""
    if not up_link:
        return None
    return posixpath.join(posixpath.dirname(up_link), CHECKS_PAGE)
