"""Export a benchmark's universes and gold for other toolkits (``python -m memrepro export``).

* ``beir``: ``corpus.jsonl`` (``_id`` = ``"{episode_id}::{memory_id}"``, ``text``, ``metadata`` with the
  episode, native memory id, pool position, session, speaker, time), ``queries.jsonl`` (``_id`` = the memrepro
  query id, ``text``, ``metadata`` with ``episode_id``, category, exclusion reason) and ``qrels/<split>.tsv``
  (``query-id  corpus-id  score``, the scored queries of that split, relevance 1).
* ``trec``: ``qrels/<split>.qrels`` (``query_id 0 memory_id 1``, native memory ids as in ``run.trec``), plus
  ``qrels/all_splits.qrels`` keyed ``"<split>::<query id>"`` (the keys of ``run.trec`` when there are several
  splits), and ``topics.tsv`` (``query_id  text``).

**Corpus scope**: a query may only retrieve the memories of its own episode (its LoCoMo conversation,
LongMemEval haystack, PersonaBench person): BEIR's single corpus holds every episode, so a toolkit must restrict
each query to ``metadata.episode_id`` (or rank one episode's memories at a time), as memrepro's retrievers do.

**Gold**: relevance is the set of a query's gold ids (duplicates collapsed), so ir-measures on these qrels gives
memrepro's ``mrr``, ``hit@k``, ``recall@k``, ``ndcg@k``, ``recall_any@k``. Two benchmark-defined metrics are not
qrels functions and need memrepro (``eval``): LoCoMo's ``recall_list@k`` (its denominator counts the gold *list*;
it differs from ``recall@k`` on one query, conv-50 qa5) and PersonaBench's ``pb_recall`` (max over combinations of
alternative ids; the qrels list every alternative). LongMemEval's ``recall_all@k`` is ``R@k == 1``.
Excluded queries (``Query.excluded``) have no qrels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from memrepro.files import write_lines_atomic
from memrepro.types import Benchmark

FORMATS = ("beir", "trec")


def corpus_id(episode_id: str, memory_id: str) -> str:
    return f"{episode_id}::{memory_id}"


def relevant(query) -> list[str]:
    """The ids a qrels file marks relevant: the gold set, or every alternative of every part."""
    if query.gold_alternatives is not None:
        return list(dict.fromkeys(i for part in query.gold_alternatives for i in part))
    return list(dict.fromkeys(query.gold))


def export(benchmark: Benchmark, out: Path, fmt: str) -> list[Path]:
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    written: list[Path] = []

    def put(path: Path, lines: Iterable[str]) -> None:
        write_lines_atomic(path, lines)
        written.append(path)

    multi = len(benchmark.splits) > 1
    if fmt == "beir":
        put(out / "corpus.jsonl", (json.dumps({
            "_id": corpus_id(e.id, m.id), "title": "", "text": m.text,
            "metadata": {"episode_id": e.id, "memory_id": m.id, "position": m.position, "session": m.session,
                         "speaker": m.speaker, "time": m.time}}, ensure_ascii=False)
            for e in benchmark.episodes.values() for m in e.memories))
        put(out / "queries.jsonl", (json.dumps({
            "_id": q.id, "text": q.text,
            "metadata": {"episode_id": q.episode_id, "category": q.category, "excluded": q.excluded,
                         "time": q.time}}, ensure_ascii=False) for q in benchmark.queries))
        for split in benchmark.splits:
            put(out / "qrels" / f"{split.name}.tsv", ["query-id\tcorpus-id\tscore", *(
                f"{q.id}\t{corpus_id(q.episode_id, g)}\t1"
                for q in benchmark.split_queries(split) if q.scored for g in relevant(q))])
    else:
        for split in benchmark.splits:
            put(out / "qrels" / f"{split.name}.qrels", (
                f"{q.id} 0 {g} 1" for q in benchmark.split_queries(split) if q.scored for g in relevant(q)))
        if multi:
            put(out / "qrels" / "all_splits.qrels", (
                f"{s.name}::{q.id} 0 {g} 1" for s in benchmark.splits for q in benchmark.split_queries(s)
                if q.scored for g in relevant(q)))
        put(out / "topics.tsv", (f"{q.id}\t{' '.join(q.text.split())}" for q in benchmark.queries))
    manifest = {
        "benchmark": benchmark.name, "format": fmt, "data_sha256": benchmark.data_sha256,
        "files": [vars(f) for f in benchmark.files], "loader_options": dict(benchmark.options),
        "splits": {s.name: {"seed": s.seed, "test_episodes": list(s.test_episode_ids),
                            "dev_episodes": list(s.dev_episode_ids),
                            "scored_queries": sum(q.scored for q in benchmark.split_queries(s))}
                   for s in benchmark.splits},
        "episodes": len(benchmark.episodes), "memories": sum(len(e) for e in benchmark.episodes.values()),
        "queries": len(benchmark.queries),
        "corpus_scope": "each query retrieves only the memories of its own episode (metadata.episode_id)",
        "relevance": "the gold id set per scored query (PersonaBench: every alternative id); see memrepro/export.py",
    }
    put(out / "export.json", [json.dumps(manifest, indent=2)])
    return written
