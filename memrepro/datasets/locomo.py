"""LoCoMo (Maharana et al., ACL 2024) as ConvMemory evaluates it.

memory = one turn, id = ``dia_id``, text = ``"{speaker}: {text}"`` (no caption, no date); sessions come from the
``session_<N>`` *lists* (conv-26 has 16 orphan date keys without a list); a query per QA whose evidence names at
least one turn of its conversation, category 5 included. Splits: 5 seeds at conversation level.
Documented in docs/benchmarks.md#locomo and docs/protocols.md#locomo-protocol.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

from memrepro.datasets.io import data_root, field, provenance, read_json, require_file
from memrepro.errors import DataError
from memrepro.types import Benchmark, Episode, Memory, Protocol, Query, Split

DEFAULT_FILE = "locomo/locomo10.json"
SPLIT_SEEDS = (7, 11, 23, 31, 47)
DEV_FRACTION = 0.5
CATEGORY_NAMES = {  # official code's codes; the paper's column order is 4, 1, 2, 3, 5
    "1": "multi-hop",
    "2": "temporal",
    "3": "open-domain",
    "4": "single-hop",
    "5": "adversarial",
}
EVIDENCE_RULES = ("exact", "normalised")
HOW_TO_OBTAIN = (
    "Get it with `python -m memrepro data download` (online), or copy locomo10.json from "
    "github.com/snap-research/locomo (commit 3eb6f2c5, data/locomo10.json) to <data dir>/locomo/locomo10.json."
)
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"D(\d+):(\d+)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_DATE_KEY = re.compile(r"^session_\d+_date_time$")
_OTHER_KEYS = ("speaker_a", "speaker_b")

PROTOCOL = Protocol(
    # recall_list@k is ConvMemory's recall (gold-list denominator); recall@k (ir-measures, set) is kept beside it.
    metrics=("recall_list@10", "mrr", "hit@1", "hit@10", "recall_list@5", "hit@5", "recall_list@20", "hit@20",
             "recall@10", "ndcg@10"),
    primary=("recall_list@10", "mrr", "hit@1", "hit@10"),
    category_names=CATEGORY_NAMES,
)


def load_locomo(
    data_dir: str | Path | None = None,
    file: str = DEFAULT_FILE,
    evidence_rule: str = "exact",
    seeds: tuple[int, ...] | list[int] = SPLIT_SEEDS,
) -> Benchmark:
    """Load LoCoMo from ``<data_dir>/<file>``.

    ``evidence_rule="exact"`` (ConvMemory, faithful; 1,977 queries on the original file) keeps evidence strings
    that are exactly a ``dia_id`` of the conversation, in order, duplicates kept. ``"normalised"`` (clean; changes
    the query universe) splits on ``[;\\s]+``, strips parentheses, rewrites ``D(\\d+):(\\d+)`` as
    ``D{int}:{int}``, drops ids that do not exist and de-duplicates. Every dropped or repaired item is counted in
    ``Benchmark.loader_counts``.
    """
    if evidence_rule not in EVIDENCE_RULES:
        raise ValueError(f"locomo evidence_rule must be one of {EVIDENCE_RULES}, got {evidence_rule!r}")
    root = data_root(data_dir)
    path = require_file(root / file, HOW_TO_OBTAIN)
    raw = read_json(path)
    source = str(path)
    if not isinstance(raw, list):
        raise DataError(source, "<root>", "<json>", f"expected a list of conversations, got {type(raw).__name__}")

    episodes: dict[str, Episode] = {}
    queries: list[Query] = []
    counts: Counter[str] = Counter()
    warnings: list[str] = []
    for index, sample in enumerate(raw):
        sample_id = field(sample, "sample_id", str, file=source, record_id=f"conversation #{index}")
        if sample_id in episodes:
            raise DataError(source, sample_id, "sample_id", "duplicate conversation id")
        episode = _episode(sample, sample_id, source, warnings)
        episodes[sample_id] = episode
        qa_list = field(sample, "qa", list, file=source, record_id=sample_id)
        known = set(episode.ids)
        for qa_index, qa in enumerate(qa_list):
            query = _query(qa, f"{sample_id}::qa{qa_index}", sample_id, known, evidence_rule, source, counts)
            if query is not None:
                queries.append(query)

    counts["qa_total"] = sum(len(s["qa"]) for s in raw)
    counts["queries_kept"] = len(queries)
    return Benchmark(
        name="locomo",
        episodes=episodes,
        queries=tuple(queries),
        splits=tuple(conversation_split(sorted(episodes), seed) for seed in seeds),
        protocol=PROTOCOL,
        files=(provenance(path, root),),
        loader_counts=dict(sorted(counts.items())),
        options={"file": file, "evidence_rule": evidence_rule, "seeds": list(seeds)},
        warnings=tuple(warnings),
    )


def conversation_split(sample_ids: list[str], seed: int, dev_fraction: float = DEV_FRACTION) -> Split:
    """ConvMemory's ``choose_split``: shuffle the sorted ids with ``random.Random(seed)``; the first
    ``max(1, int(n * dev_fraction))`` are dev (training), the rest test."""
    order = sorted(sample_ids)
    random.Random(seed).shuffle(order)
    n_dev = max(1, int(len(order) * dev_fraction))
    return Split(name=f"seed{seed}", seed=seed, dev_episode_ids=tuple(order[:n_dev]),
                 test_episode_ids=tuple(order[n_dev:]))


def _episode(sample: dict, sample_id: str, source: str, warnings: list[str] | None = None) -> Episode:
    conversation = field(sample, "conversation", dict, file=source, record_id=sample_id)
    session_numbers = _session_numbers(conversation, sample_id, source, warnings)
    memories: list[Memory] = []
    for number in session_numbers:
        date = conversation.get(f"session_{number}_date_time")
        for turn_index, turn in enumerate(conversation[f"session_{number}"]):
            record = f"{sample_id} session_{number}[{turn_index}]"
            dia_id = field(turn, "dia_id", str, file=source, record_id=record)
            speaker = field(turn, "speaker", str, file=source, record_id=dia_id)
            text = field(turn, "text", str, file=source, record_id=dia_id)
            memories.append(Memory(id=dia_id, text=f"{speaker}: {text}", position=len(memories),
                                   session=f"session_{number}", speaker=speaker,
                                   time=date if isinstance(date, str) else None, turn=turn_number(dia_id)))
    if not memories:
        raise DataError(source, sample_id, "conversation", "the conversation has no turns (every session_<N> list is "
                        "empty); restore the file or remove the conversation")
    return Episode(id=sample_id, memories=tuple(memories), source=source)


def turn_number(dia_id: str) -> float | None:
    """The turn of a ``dia_id`` (``D<s>:<t>`` → t): the last number in the id, as ConvMemory v2 reads it."""
    numbers = _NUMBER.findall(dia_id)
    return float(numbers[-1]) if numbers else None


def _session_numbers(conversation: dict, sample_id: str, source: str, warnings: list[str] | None = None) -> list[int]:
    """The numbers of the ``session_<N>`` lists, checked for structure: every key is known (``speaker_a``,
    ``speaker_b``, ``session_<N>``, ``session_<N>_date_time``), every ``session_<N>`` is a list and they run
    are errors; a gap in 1..max is a warning (printed in the run summary), since the official loader reads what
    exists. A renamed, retyped or missing session would otherwise drop its turns without a word (orphan
    ``session_<N>_date_time`` keys without a list are the original file's own, and allowed)."""
    numbers = []
    for key, value in conversation.items():
        match = _SESSION_KEY.match(key)
        if match:
            if not isinstance(value, list):
                raise DataError(source, sample_id, f"conversation.{key}",
                                f"expected a list of turns, got {type(value).__name__}: {value!r:.60}")
            numbers.append(int(match.group(1)))
        elif key not in _OTHER_KEYS and not _DATE_KEY.match(key):
            raise DataError(source, sample_id, f"conversation.{key}",
                            "unexpected key (a renamed session_<N>?); known keys: speaker_a, speaker_b, session_<N>, "
                            "session_<N>_date_time")
    numbers.sort()
    if not numbers:
        raise DataError(source, sample_id, "conversation", "no session_<N> lists: the conversation is empty")
    missing = sorted(set(range(1, numbers[-1] + 1)) - set(numbers))
    if missing and warnings is not None:  # the official loader reads whatever session_<N> lists exist: loud, not fatal
        warnings.append(f"{source}: record {sample_id!r}: sessions run to session_{numbers[-1]} but "
                        f"{', '.join(f'session_{n}' for n in missing[:5])}{' …' if len(missing) > 5 else ''} "
                        f"{'has' if len(missing) == 1 else 'have'} no list of turns (read as the official loader does)")
    return numbers


def _query(qa: dict, query_id: str, episode_id: str, known: set[str], rule: str, source: str,
           counts: Counter[str]) -> Query | None:
    question = field(qa, "question", str, file=source, record_id=query_id)
    evidence = field(qa, "evidence", list, file=source, record_id=query_id)
    category = field(qa, "category", int, file=source, record_id=query_id)
    if str(category) not in CATEGORY_NAMES:
        raise DataError(source, query_id, "category", f"unknown LoCoMo category {category!r} (known: 1-5)")
    for item in evidence:
        if not isinstance(item, str):
            raise DataError(source, query_id, "evidence", f"expected a list of strings, found {item!r}")
    if not evidence:
        counts["dropped_empty_evidence"] += 1
        return None
    gold = _exact_gold(evidence, known) if rule == "exact" else _normalised_gold(evidence, known)
    if not gold:
        counts["dropped_no_valid_evidence"] += 1
        return None
    if rule == "exact" and len(gold) < len(evidence):
        counts["kept_with_evidence_dropped"] += 1
    if rule == "normalised" and list(gold) != evidence:
        counts["evidence_repaired"] += 1
    if len(set(gold)) < len(gold):
        counts["kept_with_duplicate_evidence"] += 1
    return Query(id=query_id, text=question, episode_id=episode_id, gold=gold, category=str(category))


def _exact_gold(evidence: list[str], known: set[str]) -> tuple[str, ...]:
    return tuple(item for item in evidence if item in known)


def _normalised_gold(evidence: list[str], known: set[str]) -> tuple[str, ...]:
    gold: list[str] = []
    for item in evidence:
        for token in re.split(r"[;\s]+", item):
            match = _DIA_ID.fullmatch(token.strip("()"))
            if match:
                dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
                if dia_id in known and dia_id not in gold:
                    gold.append(dia_id)
    return tuple(gold)
