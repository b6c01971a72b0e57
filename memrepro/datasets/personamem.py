"""PersonaMem (Jiang et al., COLM 2025) as RF-Mem evaluates it (docs/benchmarks.md#personamem).

PersonaMem releases no retrieval gold: its metric is 4-way multiple-choice accuracy with an LLM reader
(docs/protocols.md#personamem-protocol). The benchmark therefore carries every question with ``gold=()`` and
``excluded="no_gold_evidence"`` (retrieval metrics skip them; reader accuracy has no exclusions) and keeps
what a reader needs in ``Benchmark.options["reader"]``.

Memory units follow RF-Mem's ``build_from_history`` (user block + assistant reply pairs). RF-Mem indexes the
*whole* shared context, so turns after the question's position are retrievable (the unsliced-context leak);
``slice_context=True`` is the clean switch that indexes ``context[:end_index]`` instead.

The questions CSV is available offline; the shared-contexts JSONL is not, so ``load_personamem`` raises a
MissingDataError without it while ``load_personamem_questions`` works on the CSV alone.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from memrepro.datasets.io import data_root, provenance, require_file, utf8_errors
from memrepro.errors import DataError
from memrepro.types import Benchmark, Episode, FileProvenance, Memory, Protocol, Query, Split

SIZES = ("32k", "128k", "1M")
UNITS = ("pair", "turn")
EXCLUDED_REASON = "no_gold_evidence"

# RF-Mem Table 1 columns: stored category key → display label, in the paper's column order.
RFMEM_COLUMNS: dict[str, str] = {
    "revisit_reasons": "Revisit Reasons",
    "track_evolution": "Track Evolution",
    "latest_prefs": "Latest Prefs",
    "aligned_recs": "Aligned Recs",
    "new_scenarios": "New Scenarios",
    "shared_facts": "Shared Facts",
    "new_ideas": "New Ideas",
}
PROTOCOL = Protocol(metrics=(), primary=(), category_names=RFMEM_COLUMNS)

# Raw ``question_type`` → RF-Mem column, per size. The 32k table is the one RF-Mem reports (verified
# arithmetically against its Table 1 and Table 7). The 128k / 1M spellings are third-party reports, unverified
# locally: extend these tables when a label is rejected.
RFMEM_LABELS: dict[str, dict[str, str]] = {
    "32k": {
        "recalling_the_reasons_behind_previous_updates": "revisit_reasons",
        "track_full_preference_evolution": "track_evolution",
        "recalling_facts_mentioned_by_the_user": "latest_prefs",
        "provide_preference_aligned_recommendations": "aligned_recs",
        "generalizing_to_new_scenarios": "new_scenarios",
        "recall_user_shared_facts": "shared_facts",
        "suggest_new_ideas": "new_ideas",
    },
    "128k": {
        "revisit_reasons_behind_preference_updates": "revisit_reasons",
        "track_full_preference_evolution": "track_evolution",
        "acknowledge_latest_user_preferences": "latest_prefs",
        "provide_preference_aligned_recommendations": "aligned_recs",
        "generalize_to_new_scenarios": "new_scenarios",
        "recall_user_shared_facts": "shared_facts",
        "suggest_new_ideas": "new_ideas",
    },
    "1M": {
        "revisit_reasons_behind_preference_updates": "revisit_reasons",
        "track_full_preference_updates": "track_evolution",
        "track_full_preference_evolution": "track_evolution",
        "acknowledge_latest_user_preferences": "latest_prefs",
        "provide_preference_aligned_recommendations": "aligned_recs",
        "generalize_to_new_scenarios": "new_scenarios",
        "recall_user_shared_facts": "shared_facts",
        "suggest_new_ideas": "new_ideas",
    },
}
# Content-based reading of 32k: the 129 ``recall_user_shared_facts`` rows ask to acknowledge the latest
# preference, so the two rows RF-Mem assigns by elimination swap. Other sizes already name types by content.
CONTENT_LABELS: dict[str, dict[str, str]] = {
    **RFMEM_LABELS,
    "32k": {**RFMEM_LABELS["32k"],
            "recall_user_shared_facts": "latest_prefs",
            "recalling_facts_mentioned_by_the_user": "shared_facts"},
}
LABEL_MAPS: dict[str, dict[str, dict[str, str]]] = {"rfmem": RFMEM_LABELS, "content": CONTENT_LABELS}

REQUIRED_COLUMNS = ("question_id", "question_type", "topic", "user_question_or_message", "correct_answer",
                    "all_options", "shared_context_id", "end_index_in_shared_context")
OPTIONAL_INT_COLUMNS = ("persona_id", "context_length_in_tokens", "distance_to_ref_in_blocks",
                        "distance_to_ref_in_tokens")

HOW_TO_OBTAIN_QUESTIONS = ("PersonaMem questions come from the Hugging Face dataset bowen-upenn/PersonaMem "
                           "(questions_{size}.csv); place them under <data root>/personamem/ (`make data`).")
HOW_TO_OBTAIN_CONTEXTS = ("PersonaMem contexts are not in the offline data: download shared_contexts_{size}.jsonl "
                          "from the Hugging Face dataset bowen-upenn/PersonaMem into <data root>/personamem/ "
                          "(`make data`, needs network access). The questions CSV alone loads with "
                          "load_personamem_questions().")

_KEY_PREFIX = re.compile(r'\s*\{\s*"((?:[^"\\]|\\.)*)"\s*:')


@dataclass(frozen=True)
class PersonaMemQuestion:
    """One CSV row, typed. ``options`` is the parsed list; ``all_options_raw`` is what the reader prompt quotes."""

    question_id: str
    question_type: str
    category: str
    topic: str
    text: str
    correct_answer: str
    all_options_raw: str
    options: tuple[str, ...]
    options_format: str  # "json" | "repr"
    shared_context_id: str
    end_index: int
    persona_id: int | None = None
    context_length_in_tokens: int | None = None
    distance_to_ref_in_blocks: int | None = None
    distance_to_ref_in_tokens: int | None = None
    row: int = 0  # 1-based data row (header excluded), for messages


@dataclass(frozen=True)
class PersonaMemQuestions:
    questions: tuple[PersonaMemQuestion, ...]
    file: FileProvenance
    label_map: str
    label_table: Mapping[str, str]
    counts: Mapping[str, int]


@dataclass(frozen=True)
class ContextUnit:
    """One memory unit built from a context: its text and the message indices it came from."""

    text: str
    source_indices: tuple[int, ...]
    role: str | None = None  # the role of a single-role unit; None for a user+assistant pair


def label_table(size: str, label_map: str = "rfmem") -> dict[str, str]:
    """Raw ``question_type`` → RF-Mem column key for one size and mapping."""
    if size not in SIZES:
        raise ValueError(f"PersonaMem size must be one of {', '.join(SIZES)}, got {size!r}")
    if label_map not in LABEL_MAPS:
        raise ValueError(f"label_map must be one of {', '.join(LABEL_MAPS)}, got {label_map!r}")
    return dict(LABEL_MAPS[label_map][size])


def parse_options(raw: str) -> tuple[list[Any], str]:
    """The option list and its format: JSON first, then a Python literal (303 of the 589 32k rows)."""
    try:
        return json.loads(raw), "json"
    except json.JSONDecodeError:
        return ast.literal_eval(raw), "repr"


def load_personamem_questions(data_dir: str | Path | None = None, size: str = "32k",
                              label_map: str = "rfmem") -> PersonaMemQuestions:
    """Read ``questions_<size>.csv`` only (works offline)."""
    table = label_table(size, label_map)
    root = data_root(data_dir)
    path = require_file(root / "personamem" / f"questions_{size}.csv", HOW_TO_OBTAIN_QUESTIONS.format(size=size))
    file = str(path)
    questions: list[PersonaMemQuestion] = []
    counts: Counter[str] = Counter({"questions": 0, "options_json": 0, "options_repr": 0,
                                    "queries_with_user_prefix": 0})
    seen: set[str] = set()
    with utf8_errors(path), open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        for column in REQUIRED_COLUMNS:
            if column not in header:
                raise DataError(file, "<header>", column, f"missing column (header: {', '.join(header)})")
        for row_number, row in enumerate(reader, start=1):
            question = _question(row, row_number, table, size, label_map, file)
            if question.question_id in seen:
                raise DataError(file, question.question_id, "question_id", f"duplicate (row {row_number})")
            seen.add(question.question_id)
            questions.append(question)
            counts["questions"] += 1
            counts[f"options_{question.options_format}"] += 1
            counts["queries_with_user_prefix"] += question.text.startswith("User: ")
    return PersonaMemQuestions(questions=tuple(questions), file=provenance(path, root), label_map=label_map,
                               label_table=table, counts=dict(counts))


def _question(row: dict[str | None, Any], row_number: int, table: Mapping[str, str], size: str,
              label_map: str, file: str) -> PersonaMemQuestion:
    record = str(row.get("question_id") or f"row {row_number}")
    if None in row:
        raise DataError(file, record, "<row>", f"row {row_number} has more fields than the header")
    for column in REQUIRED_COLUMNS:
        if row.get(column) is None:
            raise DataError(file, record, column, f"row {row_number} is missing this field")
    question_id = row["question_id"]
    if not question_id:
        raise DataError(file, record, "question_id", f"empty question id in row {row_number}")

    question_type = row["question_type"]
    if question_type not in table:
        raise DataError(file, question_id, "question_type",
                        f"unknown label {question_type!r} for size {size} (label_map {label_map!r}; known: "
                        f"{', '.join(sorted(table))})")

    raw_options = row["all_options"]
    try:
        options, options_format = parse_options(raw_options)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError) as exc:
        raise DataError(file, question_id, "all_options",
                        f"row {row_number}: neither JSON nor a Python list literal ({exc}): {raw_options!r:.120}"
                        ) from exc
    if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
        raise DataError(file, question_id, "all_options",
                        f"row {row_number}: expected a non-empty list of strings, got {raw_options!r:.120}")

    end_index = _int(row["end_index_in_shared_context"], file, question_id, "end_index_in_shared_context",
                     row_number)
    if end_index < 0:
        raise DataError(file, question_id, "end_index_in_shared_context",
                        f"row {row_number}: negative end index {end_index} (context[:end] would silently drop "
                        "turns from the end)")
    optional = {column: (_int(row[column], file, question_id, column, row_number) if row.get(column) else None)
                for column in OPTIONAL_INT_COLUMNS}
    return PersonaMemQuestion(
        question_id=question_id, question_type=question_type, category=table[question_type], topic=row["topic"],
        text=row["user_question_or_message"], correct_answer=row["correct_answer"], all_options_raw=raw_options,
        options=tuple(options), options_format=options_format, shared_context_id=row["shared_context_id"],
        end_index=end_index, row=row_number, **optional)


def _int(value: str, file: str, record: str, column: str, row_number: int) -> int:
    try:
        return int(value.strip())
    except ValueError as exc:
        raise DataError(file, record, column, f"row {row_number}: expected an integer, got {value!r:.40}") from exc


# ---------------------------------------------------------------------------------------------------------------
# memory units


def _normalise(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, int]]:
    """(role, text, index) of every message kept by RF-Mem: roles lower-cased, text stripped, no system, no empty."""
    kept: list[tuple[str, str, int]] = []
    for index, message in enumerate(messages):
        role = (message.get("role") or "unknown").strip().lower()
        text = (message.get("content") or "").strip()
        if text and role != "system":
            kept.append((role, text, index))
    return kept


def rfmem_pair_units(messages: Sequence[Mapping[str, Any]]) -> list[ContextUnit]:
    """RF-Mem ``build_from_history``: merge same-role runs, pair user+assistant, drop unanswered user blocks."""
    blocks: list[tuple[str, str, list[int]]] = []
    for role, text, index in _normalise(messages):
        if blocks and blocks[-1][0] == role:
            last_role, last_text, last_indices = blocks[-1]
            blocks[-1] = (last_role, last_text + "\n\n" + text, last_indices + [index])
        else:
            blocks.append((role, text, [index]))

    units: list[ContextUnit] = []
    i = 0
    while i < len(blocks):
        role, text, indices = blocks[i]
        if role == "user":
            if i + 1 < len(blocks) and blocks[i + 1][0] == "assistant":
                _, reply, reply_indices = blocks[i + 1]
                units.append(ContextUnit("User:\n" + text + "\n\nAssistant:\n" + reply,
                                         tuple(indices + reply_indices)))
                i += 2
            else:
                i += 1  # a user block without a reply is dropped, as in RF-Mem
            continue
        label = "Assistant" if role == "assistant" else role.capitalize()
        units.append(ContextUnit(f"{label}:\n" + text, tuple(indices), role))
        i += 1
    return units


def turn_units(messages: Sequence[Mapping[str, Any]]) -> list[ContextUnit]:
    """One unit per non-system, non-empty message (stripped content, its own "User: " prefix kept)."""
    return [ContextUnit(text, (index,), role) for role, text, index in _normalise(messages)]


UNIT_BUILDERS = {"pair": rfmem_pair_units, "turn": turn_units}


# ---------------------------------------------------------------------------------------------------------------
# the benchmark


def load_personamem(data_dir: str | Path | None = None, size: str = "32k", slice_context: bool = False,
                    unit: str = "pair", label_map: str = "rfmem") -> Benchmark:
    """Questions + shared contexts as a Benchmark; ``slice_context=False`` is RF-Mem's (leaky) setting."""
    if unit not in UNIT_BUILDERS:
        raise ValueError(f"unit must be one of {', '.join(UNIT_BUILDERS)}, got {unit!r}")
    question_set = load_personamem_questions(data_dir, size, label_map)
    root = data_root(data_dir)
    contexts_path = require_file(root / "personamem" / f"shared_contexts_{size}.jsonl",
                                 HOW_TO_OBTAIN_CONTEXTS.format(size=size))
    needed = {q.shared_context_id for q in question_set.questions}
    contexts, context_counts = read_contexts(contexts_path, needed)

    build = UNIT_BUILDERS[unit]
    counts: Counter[str] = Counter(question_set.counts)
    counts.update(context_counts)
    counts.update({"episodes": 0, "memories": 0, "episodes_empty": 0, "end_index_beyond_context": 0})
    episodes: dict[str, Episode] = {}
    queries: list[Query] = []
    reader: dict[str, dict[str, Any]] = {}
    for question in question_set.questions:
        context = contexts.get(question.shared_context_id)
        if context is None:
            raise DataError(str(contexts_path), question.question_id, "shared_context_id",
                            f"context {question.shared_context_id!r} (row {question.row} of "
                            f"{question_set.file.path}) is not in the contexts file")
        if question.end_index > len(context):
            counts["end_index_beyond_context"] += 1
        episode_id = f"{question.shared_context_id}@{question.end_index}" if slice_context \
            else question.shared_context_id
        if episode_id not in episodes:
            history = context[:question.end_index] if slice_context else context
            memories = tuple(Memory(id=str(position), text=u.text, position=position, speaker=u.role)
                             for position, u in enumerate(build(history)))
            episodes[episode_id] = Episode(id=episode_id, memories=memories, source=str(contexts_path))
            counts["episodes"] += 1
            counts["memories"] += len(memories)
            counts["episodes_empty"] += not memories
        queries.append(Query(id=question.question_id, text=question.text, episode_id=episode_id, gold=(),
                             category=question.category, excluded=EXCLUDED_REASON))
        reader[question.question_id] = {
            "correct_answer": question.correct_answer,
            "all_options_raw": question.all_options_raw,
            "options": list(question.options),
            "topic": question.topic,
            "question_type": question.question_type,
            "persona_id": question.persona_id,
            "shared_context_id": question.shared_context_id,
            "end_index": question.end_index,
            "distance_to_ref_in_blocks": question.distance_to_ref_in_blocks,
            "distance_to_ref_in_tokens": question.distance_to_ref_in_tokens,
        }

    return Benchmark(
        name=f"personamem_{size}",
        episodes=episodes,
        queries=tuple(queries),
        splits=(Split("all", tuple(episodes)),),
        protocol=PROTOCOL,
        files=(question_set.file, provenance(contexts_path, root)),
        loader_counts=dict(counts),
        options={"size": size, "slice_context": slice_context, "unit": unit, "label_map": label_map,
                 "label_table": dict(question_set.label_table), "reader": reader},
    )


def read_contexts(path: Path, needed: Iterable[str] | None = None) -> tuple[dict[str, list[dict[str, Any]]],
                                                                           dict[str, int]]:
    """``{shared_context_id: messages}`` from the JSONL, parsing only the lines whose key is ``needed``.

    A repeated key keeps the last line, as the official offset index does (counted in ``context_duplicate_lines``).
    """
    wanted = set(needed) if needed is not None else None
    file = str(path)
    contexts: dict[str, list[dict[str, Any]]] = {}
    seen: set[str] = set()
    counts = {"context_lines": 0, "context_duplicate_lines": 0}
    with utf8_errors(path), open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            counts["context_lines"] += 1
            prefix = _KEY_PREFIX.match(line)
            fast_key = prefix.group(1) if prefix is not None and "\\" not in prefix.group(1) else None
            if fast_key is not None and wanted is not None and fast_key not in wanted:
                counts["context_duplicate_lines"] += fast_key in seen
                seen.add(fast_key)
                continue  # not needed: skip parsing (the 1M file is large)
            key, messages = _context_line(line, line_number, file)
            counts["context_duplicate_lines"] += key in seen
            seen.add(key)
            if wanted is None or key in wanted:
                contexts[key] = messages
    return contexts, counts


def _context_line(line: str, line_number: int, file: str) -> tuple[str, list[dict[str, Any]]]:
    record = f"line {line_number}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(file, record, "<json>", f"malformed JSON at column {exc.colno}: {exc.msg}") from exc
    if not isinstance(obj, dict) or len(obj) != 1:
        raise DataError(file, record, "<root>", "expected an object with exactly one key (the shared_context_id)")
    ((key, messages),) = obj.items()
    if not isinstance(messages, list):
        raise DataError(file, key, "<messages>", f"expected a list of messages, got {type(messages).__name__}")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise DataError(file, key, f"[{index}]", f"expected a message object, got {type(message).__name__}")
        for name in ("role", "content"):
            if message.get(name) is not None and not isinstance(message[name], str):
                raise DataError(file, key, f"[{index}].{name}",
                                f"expected a string, got {type(message[name]).__name__}")
    return key, messages
