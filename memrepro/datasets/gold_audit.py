"""Structural problems of a benchmark's retrieval gold (``data check --stats``, docs/checks.md#gold-labels): what can
be seen without reading the texts, question by question.

* ``empty gold``: a question with no gold memory (abstention questions, empty by design, are left out);
* ``evidence points to no memory``: an evidence id that names no memory of the question's episode, nor of any
  other (LoCoMo's raw ``evidence`` strings are audited too, including the questions the loader drops for it);
* ``gold outside its episode``: a gold id that is a memory of another episode only;
* ``gold listed twice``: one id twice in a question's gold list (LoCoMo's recall divides by the list length);
* ``duplicate question``: the same question text twice in one episode (``same gold`` or ``different gold``).

Each problem names the question and the ids; :func:`audit` returns them in file order and :func:`summary` counts
them by kind.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from memrepro.types import Benchmark

KINDS = ("empty gold", "evidence points to no memory", "gold outside its episode", "gold listed twice",
         "duplicate question")


@dataclass(frozen=True)
class GoldProblem:
    kind: str
    question: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def audit(benchmark: Benchmark, raw_locomo: Path | None = None) -> list[GoldProblem]:
    """The structural gold problems of a loaded benchmark (and, for LoCoMo, of its raw evidence strings:
    ``raw_locomo`` is the file it was read from)."""
    owner: dict[str, set[str]] = defaultdict(set)
    for episode in benchmark.episodes.values():
        for memory_id in episode.ids:
            owner[memory_id].add(episode.id)
    problems: list[GoldProblem] = []
    if raw_locomo is not None:
        problems += _locomo_evidence(raw_locomo, benchmark)
    seen_text: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for query in benchmark.queries:
        gold = [g for part in (query.gold_alternatives or ()) for g in part] or list(query.gold)
        if not gold and query.excluded != "abstention":
            problems.append(GoldProblem("empty gold", query.id, f"no gold memory ({query.excluded or 'scored'})"))
        own = set(benchmark.episodes[query.episode_id].ids)
        for memory_id in dict.fromkeys(gold):
            if memory_id in own:
                continue
            elsewhere = sorted(owner.get(memory_id, ()))
            kind = "gold outside its episode" if elsewhere else "evidence points to no memory"
            where = f" (a memory of {', '.join(elsewhere[:3])})" if elsewhere else ""
            problems.append(GoldProblem(kind, query.id, f"{memory_id!r} is not a memory of {query.episode_id}{where}"))
        twice = sorted(g for g, n in Counter(query.gold).items() if n > 1)
        if twice:
            problems.append(GoldProblem("gold listed twice", query.id, f"{', '.join(twice)} listed twice"))
        seen_text[(query.episode_id, _normal(query.text))].append(query)
    for (_, _), queries in seen_text.items():
        for later in queries[1:]:
            same = set(later.gold) == set(queries[0].gold)
            problems.append(GoldProblem("duplicate question", later.id, f"the same question as {queries[0].id} "
                                        f"({'same' if same else 'different'} gold)"))
    return problems


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def _locomo_evidence(path: Path, benchmark: Benchmark) -> list[GoldProblem]:
    """LoCoMo's raw ``evidence`` strings that are no ``dia_id`` of their conversation (the exact rule drops them, and
    the question with them when nothing is left), and questions without evidence."""
    from memrepro.datasets.io import read_json

    problems = []
    loaded = {q.id for q in benchmark.queries}
    for sample in read_json(path):
        sample_id = sample.get("sample_id")
        episode = benchmark.episodes.get(sample_id)
        if episode is None:
            continue
        known = set(episode.ids)
        for index, qa in enumerate(sample.get("qa") or []):
            query_id = f"{sample_id}::qa{index}"
            evidence = qa.get("evidence") or []
            dropped = "" if query_id in loaded else " (the question is not scored: no evidence left)"
            if not evidence:
                problems.append(GoldProblem("empty gold", query_id, f"no evidence{dropped}"))
                continue
            bad = [item for item in evidence if isinstance(item, str) and item not in known]
            if bad:
                named = f"{', '.join(repr(b) for b in bad)} {'names' if len(bad) == 1 else 'name'}"
                problems.append(GoldProblem("evidence points to no memory", query_id,
                                            f"{named} no turn of {sample_id}{dropped}"))
    return problems


def summary(problems: Iterable[GoldProblem]) -> dict[str, int]:
    """``{kind: count}`` in :data:`KINDS` order (kinds with no problem included, as 0)."""
    counts = Counter(p.kind for p in problems)
    return {kind: counts.get(kind, 0) for kind in KINDS}


