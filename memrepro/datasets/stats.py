"""Dataset statistics (``data check --stats``): what a loader produced, in numbers a golden file can pin.

A loader change or a different data file changes at least one of these, so tests compare them with golden
files and nothing passes silently.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from memrepro.types import Benchmark


def _spread(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"min": None, "mean": None, "max": None}
    array = np.asarray(values, dtype=np.float64)
    return {"min": _num(array.min()), "mean": round(float(array.mean()), 4), "max": _num(array.max())}


def _num(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(float(value), 4)


def benchmark_stats(benchmark: Benchmark) -> dict[str, Any]:
    scored = [q for q in benchmark.queries if q.scored]
    episodes = list(benchmark.episodes.values())
    return {
        "benchmark": benchmark.name,
        "options": {k: v for k, v in benchmark.options.items() if k != "reader"},
        "files": [{"path": f.path, "sha256": f.sha256, "bytes": f.bytes} for f in benchmark.files],
        "queries": len(benchmark.queries),
        "scored_queries": len(scored),
        "excluded": dict(sorted(Counter(q.excluded for q in benchmark.queries if q.excluded).items())),
        "episodes": len(episodes),
        "memories": sum(len(e) for e in episodes),
        "memories_per_episode": _spread([len(e) for e in episodes]),
        "memory_text_chars": _spread([len(m.text) for e in episodes for m in e.memories]),
        "query_text_chars": _spread([len(q.text) for q in benchmark.queries]),
        "relevant_per_scored_query": _spread([len(set(q.gold)) for q in scored]),
        "scored_by_category": dict(sorted(Counter(q.category for q in scored).items())),
        "splits": {s.name: len(benchmark.split_queries(s)) for s in benchmark.splits},
        "loader_counts": dict(benchmark.loader_counts),
    }


def personamem_question_stats(questions: Any) -> dict[str, Any]:
    """PersonaMem offline: only the questions CSV exists, so its statistics stand in for a benchmark's."""
    rows = questions.questions
    return {
        "benchmark": "personamem_questions",
        "label_map": questions.label_map,
        "files": [{"path": questions.file.path, "sha256": questions.file.sha256, "bytes": questions.file.bytes}],
        "queries": len(rows),
        "by_category": dict(sorted(Counter(q.category for q in rows).items())),
        "options_format": dict(sorted(Counter(q.options_format for q in rows).items())),
        "shared_contexts": len({q.shared_context_id for q in rows}),
        "end_index": _spread([q.end_index for q in rows]),
        "query_text_chars": _spread([len(q.text) for q in rows]),
        "counts": dict(questions.counts),
    }
