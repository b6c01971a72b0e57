"""External run files → validated, frozen rankings for ``python -m memrepro eval`` (and back, for ``export``).

Two forms are read:

* **TREC** (6 columns, whitespace separated): ``query_id Q0 memory_id rank score tag``.
* **JSONL**: one JSON object per line mapping query ids to a ranked list, ``{"q1": ["D1:3", "D2:7"]}``; a list
  item may also be ``[memory_id, score]``. One object holding every query is fine too.

A memory id is the native id (``run.trec``) or the ``"<episode id>::<memory id>"`` corpus id of a BEIR export.
A query key is a benchmark query id (its ranking is used in every split holding the query) or
``"<split>::<query id>"`` (that split only; what ``run`` writes into ``run.trec`` for multi-split benchmarks such
as LoCoMo's 5 seeds).

Validation (docs/protocols.md#tie-rule, docs/protocols.md#query-universe). Always errors, because each would change
a score silently: a malformed line, a memory id that is not in the query's episode (named as "from another episode"
when some other episode has it), a query key given twice in a JSONL file. Warnings, counted in ``metrics.json`` and
printed, errors with ``strict=true``: an unknown query id (ignored), a memory listed twice for one query (the
better-ranked occurrence is kept), a scored query the file lacks (scored 0, kept in the denominator, as ir-measures
does).

Depth: a file whose longest ranked list is shorter than some scored query's candidate pool (``run.trec`` keeps a
run's top ``output.top_n``) may be truncated: :func:`depth_warning` names the depth and which metrics are then lower
bounds (those without a cutoff, such as ``mrr``, and those cut deeper than the file) and which are exact.

Freezing: ``order=score`` (default) sorts by score descending, ties by the memory's pool position (the project's
tie rule, the same ``freeze`` that ``run`` uses); ``order=rank`` keeps the file's order (TREC rank column, JSONL
list order), for retrievers whose output order is not their score order. A JSONL list without scores is always
taken in list order.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from memrepro.checks import RUN_FILE_FIX, truncation
from memrepro.config import RUN_FILE_FORMATS, RUN_FILE_ORDERS
from memrepro.errors import EXIT_BAD_INPUT, MemreproError
from memrepro.evaluation.freeze import FrozenRanking, freeze
from memrepro.runs.folder import TREC, is_complete, trec_file
from memrepro.search import Hits
from memrepro.types import Benchmark

ORDERS, FORMATS = RUN_FILE_ORDERS, RUN_FILE_FORMATS


class RunFileError(MemreproError, ValueError):
    """One line: the file, the line, the id, the problem and the fix."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: Path | str, line: int | None, problem: str, fix: str = "") -> None:
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {problem}" + (f" ({fix})" if fix else ""))


@dataclass
class Entry:
    memory_id: str
    score: float | None
    rank: int | None
    line: int


@dataclass
class ParsedRun:
    path: Path
    format: str
    entries: dict[str, list[Entry]]  # query key → entries in file order
    has_scores: bool


@dataclass
class Validation:
    """What was accepted, with every tolerated problem counted (``warnings``) and a few examples named."""

    rankings: dict[tuple[str, str], FrozenRanking]
    warnings: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    depth: int = 0  # the longest ranked list the file gives a query
    ranked: int = 0  # queries the file ranks two or more memories for
    tied: int = 0  # ... of which every score is the same (the scores then say nothing about the order)
    pools: dict[str, int] = field(default_factory=dict)  # scored query id → its candidate pool (episode) size

    def warn(self, kind: str, example: str) -> None:
        self.warnings[kind] = self.warnings.get(kind, 0) + 1
        shown = self.examples.setdefault(kind, [])
        if len(shown) < 3:
            shown.append(example)

    def lines(self) -> list[str]:
        return [f"warning: {n} {kind.replace('_', ' ')} (e.g. {', '.join(self.examples[kind])})"
                for kind, n in self.warnings.items()]


WARNING_FIXES = {
    "unknown_query_ids": "ignored; is the run for another dataset or variant?",
    "duplicate_memories": "the better-ranked occurrence kept",
    "missing_queries": "scored 0 and kept in the denominator",
}


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's lines numbered from 1, decoded as UTF-8 (a leading byte-order mark dropped); a byte that is not
    UTF-8 is an error naming the file and the line."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise RunFileError(path, number, f"not UTF-8: byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} "
                                   "of the line", "save the run file as UTF-8") from None


def detect_format(path: Path) -> str:
    for _, line in numbered_lines(path):
        if line.strip():
            return "jsonl" if line.lstrip().startswith("{") else "trec"
    return "trec"


def read_run_file(path: str | Path, fmt: str = "auto") -> ParsedRun:
    path = Path(path).expanduser()
    if fmt not in FORMATS:
        raise RunFileError(path, None, f"unknown format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if not path.is_file() and path.name == TREC and is_complete(path.parent):
        path = trec_file(path.parent)  # a restored run's: written when first asked for
    if not path.is_file():
        raise RunFileError(path, None, "run file not found", "check the run_file= path")
    fmt = detect_format(path) if fmt == "auto" else fmt
    entries: dict[str, list[Entry]] = {}
    has_scores = True
    if fmt == "trec":
        for number, line in numbered_lines(path):
            if not line.strip():
                continue
            cols = line.split()
            if len(cols) != 6:
                raise RunFileError(path, number, f"expected 6 TREC columns (query_id Q0 memory_id rank score "
                                   f"tag), found {len(cols)}: {line.strip()[:80]!r}")
            qid, _, memory_id, rank, score, _ = cols
            try:
                rank_value = int(rank)
            except ValueError:
                raise RunFileError(path, number, f"rank {rank!r} of query {qid!r} is not an integer") from None
            score_value = _number(score, path, number, qid)
            entries.setdefault(qid, []).append(Entry(memory_id, score_value, rank_value, number))
    else:
        seen_at: dict[str, int] = {}
        for number, line in numbered_lines(path):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RunFileError(path, number, f"malformed JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(record, dict):
                raise RunFileError(path, number, f"expected an object {{query_id: [memory ids]}}, found "
                                   f"{type(record).__name__}")
            for qid, ranked in record.items():
                if qid in seen_at:
                    raise RunFileError(path, number, f"query {qid!r} listed again (first on line "
                                       f"{seen_at[qid]})", "give each query one ranked list")
                seen_at[qid] = number
                if not isinstance(ranked, list):
                    raise RunFileError(path, number, f"query {qid!r}: expected a list of memory ids, found "
                                       f"{type(ranked).__name__}")
                out = entries.setdefault(qid, [])
                for position, item in enumerate(ranked, start=1):
                    if isinstance(item, str):
                        out.append(Entry(item, None, position, number))
                        has_scores = False
                    elif (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                          and isinstance(item[1], (int, float)) and not isinstance(item[1], bool)):
                        out.append(Entry(item[0], _number(item[1], path, number, qid), position, number))
                    else:
                        raise RunFileError(path, number, f"query {qid!r}, item {position}: expected a memory "
                                           f"id or [memory_id, score], found {item!r:.60}")
    return ParsedRun(path, fmt, entries, has_scores and any(entries.values()))


def _number(value: Any, path: Path, line: int, qid: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise RunFileError(path, line, f"score {value!r} of query {qid!r} is not a number") from None
    if math.isnan(out):
        raise RunFileError(path, line, f"score of query {qid!r} is NaN")
    return out


def validate(parsed: ParsedRun, benchmark: Benchmark, order: str = "score", strict: bool = False) -> Validation:
    """Map every (split, query) of the benchmark to a frozen ranking from ``parsed``; see the module doc."""
    if order not in ORDERS:
        raise RunFileError(parsed.path, None, f"unknown order {order!r}", f"use order={' or order='.join(ORDERS)}")
    path = parsed.path
    queries = {q.id: q for q in benchmark.queries}
    split_queries = {s.name: {q.id for q in benchmark.split_queries(s)} for s in benchmark.splits}
    owner: dict[str, str] = {}  # memory id → first episode holding it (for "from another episode")
    for episode in benchmark.episodes.values():
        for memory in episode.memories:
            owner.setdefault(memory.id, episode.id)
    result = Validation({})

    def problem(kind: str, line: int | None, text: str, fix: str) -> None:
        if strict:
            raise RunFileError(path, line, text, fix + "; strict=true makes this an error")
        result.warn(kind, text if line is None else f"line {line}: {text}")

    keyed: dict[str, tuple[str | None, str]] = {}  # file key → (split or None, query id)
    for key, entries in parsed.entries.items():
        if key in queries:
            keyed[key] = (None, key)
            continue
        split, sep, qid = key.partition("::")
        if sep and split in split_queries and qid in split_queries[split]:
            keyed[key] = (split, qid)
        else:
            problem("unknown_query_ids", entries[0].line if entries else None,
                    f"unknown query id {key!r}", f"not a {benchmark.name} query; ignored")

    if not keyed:  # scoring it would write a result of zeros that looks like a run
        what = (f"ranks no {benchmark.name} query ({len(parsed.entries)} unknown query ids, e.g. "
                f"{next(iter(parsed.entries))!r})" if parsed.entries else "is empty")
        raise RunFileError(path, None, f"{what}: nothing to score", "give the rankings of this benchmark's queries, "
                           "one TREC line per ranked memory or one JSONL object per query")

    positions: dict[str, np.ndarray] = {}
    by_key: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}
    for key, (split, qid) in keyed.items():
        episode = benchmark.episodes[queries[qid].episode_id]
        where = {m.id: m.position for m in episode.memories}
        entries = parsed.entries[key]
        if parsed.format == "trec" and order == "rank":
            entries = sorted(entries, key=lambda e: (e.rank, e.line))
        kept: dict[str, Entry] = {}
        prefix = f"{episode.id}::"
        for entry in entries:
            if entry.memory_id not in where and entry.memory_id.startswith(prefix):  # BEIR export corpus ids
                entry.memory_id = entry.memory_id[len(prefix):]
            if entry.memory_id not in where:
                other = owner.get(entry.memory_id)
                detail = (f"memory {entry.memory_id!r} of query {qid!r} is from another episode ({other!r}), not "
                          f"the query's episode {episode.id!r}" if other else
                          f"unknown memory id {entry.memory_id!r} for query {qid!r} (episode {episode.id!r})")
                raise RunFileError(path, entry.line, detail, f"rank only memories of the query's own episode "
                                   f"({benchmark.name}: {len(episode)} memories)")
            if entry.memory_id in kept:
                first = kept[entry.memory_id]
                better = (entry.score is not None and first.score is not None and order == "score"
                          and entry.score > first.score)
                problem("duplicate_memories", entry.line, f"memory {entry.memory_id!r} listed twice for query "
                        f"{key!r} (also line {first.line})", "list each memory once per query")
                if better:
                    kept[entry.memory_id] = entry
                continue
            kept[entry.memory_id] = entry
        chosen = list(kept.values())
        if order == "score" and parsed.has_scores:
            scores = np.array([e.score for e in chosen], dtype=np.float64)
            how = "score"
        else:  # file order; scores that encode it (n - rank) unless the file gave scores
            scores = (np.array([e.score for e in chosen], dtype=np.float64) if parsed.has_scores
                      else np.arange(len(chosen), 0, -1, dtype=np.float64))
            how = "native"
        if len(chosen) > 1 and parsed.has_scores:
            result.ranked += 1
            result.tied += bool(np.all(np.array([e.score for e in chosen]) == chosen[0].score))
        positions[key] = np.array([where[e.memory_id] for e in chosen], dtype=np.int64)
        by_key[key] = (positions[key], scores, how)
        result.depth = max(result.depth, len(chosen))

    plain = {qid: key for key, (split, qid) in keyed.items() if split is None}
    specific = {(split, qid): key for key, (split, qid) in keyed.items() if split is not None}
    for split in benchmark.splits:
        for query in benchmark.split_queries(split):
            key = specific.get((split.name, query.id)) or plain.get(query.id)
            episode = benchmark.episodes[query.episode_id]
            if query.scored:
                result.pools[query.id] = len(episode)
            if key is None:
                if query.scored:
                    problem("missing_queries", None, f"{split.name}::{query.id}" if len(benchmark.splits) > 1
                            else query.id, "scored 0")
                result.rankings[(split.name, query.id)] = FrozenRanking(query.id, (), ())
                continue
            pos, scores, how = by_key[key]
            result.rankings[(split.name, query.id)] = freeze(query.id, Hits(pos, scores.astype(np.float32)),
                                                             episode, how)
    return result


def order_warning(parsed: ParsedRun, checked: Validation, order: str) -> str | None:
    """One line when every ranked list of the file gives all its memories the same score: the scores carry no
    order, so which order was used decides every metric. Says which (order=score: the tie rule, the memories'
    pool order; order=rank: the file's) and how to get the other. None otherwise."""
    if not checked.ranked or checked.tied < checked.ranked:
        return None
    own = "rank column" if parsed.format == "trec" else "list order"
    if order == "score":
        return (f"{parsed.path}: every query's memories have the same score, so order=score ranked them by the tie "
                f"rule (their pool position), not by the file's {own}; set order=rank to score the file's {own}")
    return (f"{parsed.path}: every query's memories have the same score; order=rank used the file's {own} (order=score "
            f"would rank them by the tie rule, their pool position)")


def depth_warning(path: Path, checked: Validation, metric_names: Sequence[str]) -> str | None:
    """One line when the file ranks fewer memories than some scored query's candidate pool
    (:func:`memrepro.checks.truncation`, with its fix); None when every pool fits (or the file ranks nothing). The
    protocol check records the same as its ``deeper-than-list`` finding."""
    found = truncation(checked.depth, list(checked.pools.values()), metric_names, str(path))
    return None if found is None else f"{found[0]}; {RUN_FILE_FIX.format(pool=found[2])}"
