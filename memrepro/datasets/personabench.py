"""PersonaBench (Tan et al., ACL 2025) as RF-Mem evaluates it (docs/benchmarks.md#personabench).

One episode per evaluable person: the official and RF-Mem code evaluate only the first 3 people of each
community's ``eval_info_all.json`` (the other 7 have QA but no documents). The corpus is read from the ``_all``
files of one noise level, in RF-Mem's unit order (conversation segments contact by contact, then user–AI
segments, then purchases), and each unit's text is RF-Mem's compact JSON of the segment. Gold comes from the
gold file of the *same* noise level, because noise levels renumber segment ids.

All QA are returned as queries (RF-Mem retrieves and routes all 263); Subjective ones carry
``excluded="subjective"`` so metrics skip them (230 scored at noise 0.0).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, Sequence

from memrepro.datasets.io import data_root, field, provenance, read_json, require_file
from memrepro.errors import DataError
from memrepro.types import Benchmark, Episode, FileProvenance, Memory, Protocol, Query, Split

NOISE_LEVELS = ("0.0", "0.3", "0.5", "0.7")
COMMUNITIES = ("community_0", "community_1")
QUESTION_TYPES = ("Basic information", "Preference", "Social", "Subjective")
DIFFICULTIES = ("easy", "hard")
SUBDIR = Path("personabench") / "eval_data" / "eval_data_v1" / "synthetic_data"

# Display order = the paper's column order; Subjective is not a column (excluded from metrics).
CATEGORY_NAMES = {
    "Basic_information_easy": "Basic Info",
    "Social_easy": "Social Info",
    "Preference_easy": "Pref Easy",
    "Preference_hard": "Pref Hard",
}
# pb_recall scores the whole returned list (RF-Mem: "Recall@5" is a K=5 run); pb_recall@k scores its first k,
# which for a dense ranking equals the K=k run (a floor of 0.0 aside).
PROTOCOL = Protocol(metrics=("pb_recall@5", "pb_recall@10", "pb_recall", "pb_ndcg@5", "pb_ndcg@10", "pb_ndcg"),
                    primary=("pb_recall@5", "pb_recall@10", "pb_recall"), category_names=CATEGORY_NAMES)

# RF-Mem unit order and the key under which each source nests its segments.
SOURCES = (
    ("conversation", "conversation_data_all.json"),
    ("user_ai", "user_ai_interaction_data_all.json"),
    ("purchase", "purchase_history_data_all.json"),
)
TEXT_EXCLUDED_KEYS = ("segment_id", "session")

HOW_TO_OBTAIN = (
    "PersonaBench data comes from github.com/SalesforceAIResearch/personabench (folder eval_data/); place it so "
    "that personabench/eval_data/eval_data_v1/synthetic_data/<community>/ exists under the data root "
    "(`make data`)."
)


def noise_label(noise: float | str) -> str:
    """The folder spelling of a noise level ("0.0", "0.3", "0.5", "0.7"); anything else is rejected."""
    if isinstance(noise, bool):
        raise ValueError(f"PersonaBench noise must be one of {', '.join(NOISE_LEVELS)}, got {noise!r}")
    if isinstance(noise, str):
        label = noise.strip()
    elif isinstance(noise, (int, float)):
        label = f"{float(noise):.1f}"
        if abs(float(noise) - float(label)) > 1e-9:
            label = repr(noise)
    else:
        raise ValueError(f"PersonaBench noise must be one of {', '.join(NOISE_LEVELS)} (float or string), "
                         f"got {type(noise).__name__} {noise!r}")
    if label not in NOISE_LEVELS:
        raise ValueError(f"PersonaBench noise must be one of {', '.join(NOISE_LEVELS)}, got {noise!r}")
    return label


def category_key(question_type: str, difficulty: str) -> str:
    """The official category key: type + "_" + (difficulty if Preference else "easy"), spaces → "_"."""
    level = difficulty if question_type == "Preference" else "easy"
    return "_".join(question_type.split(" ") + level.split(" "))


def strip_keys(value: Any, keys: Sequence[str] = TEXT_EXCLUDED_KEYS) -> Any:
    """``value`` without ``keys`` at any nesting level, other keys in their original order (RF-Mem remove_key)."""
    if isinstance(value, dict):
        return {k: strip_keys(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [strip_keys(item, keys) for item in value]
    return value


def segment_text(segment: dict[str, Any]) -> str:
    """RF-Mem's unit text: compact JSON, default ASCII escaping, without ``segment_id`` and ``session``."""
    return json.dumps(strip_keys(segment), separators=(",", ":"))


def load_personabench(data_dir: str | Path | None = None, noise: float | str = NOISE_LEVELS[0],
                      communities: Sequence[str] = COMMUNITIES, people_per_community: int = 3) -> Benchmark:
    """Load the evaluable people of ``communities`` at one noise level (corpus and gold of that level)."""
    level = noise_label(noise)
    if isinstance(communities, str):
        communities = (communities,)
    if people_per_community < 1:
        raise ValueError(f"people_per_community must be >= 1, got {people_per_community}")
    root = data_root(data_dir)
    files: list[FileProvenance] = []
    episodes: dict[str, Episode] = {}
    queries: list[Query] = []
    first_asked: dict[str, tuple[Path, str]] = {}  # query id -> (file, person and qa index) of its first question
    counts: Counter[str] = Counter({key: 0 for key in (
        "people", "queries", "scored", "excluded_subjective", "excluded_no_gold", "gold_entries_unused",
        *(f"{kind}_segments" for kind, _ in SOURCES))})

    for community in communities:
        base = root / SUBDIR / community
        eval_path = require_file(base / "eval_info" / "eval_info_all.json", HOW_TO_OBTAIN)
        gold_path = require_file(base / "eval_info" / f"qa_gt_context_all_noise_{level}.json", HOW_TO_OBTAIN)
        source_paths = [require_file(base / "private_data" / f"noise_{level}" / name, HOW_TO_OBTAIN)
                        for _, name in SOURCES]
        for path in (eval_path, gold_path, *source_paths):
            files.append(provenance(path, root))

        people = _read_people(eval_path)[:people_per_community]
        gold_by_qid = _read_gold(gold_path)
        segments_by_source = [_read_segment_file(path) for path in source_paths]
        used_gold: set[str] = set()

        for person_name, qa_list in people:
            episode_id = f"{community}/{person_name}"
            if episode_id in episodes:
                raise DataError(str(eval_path), person_name, "Name", "person listed twice")
            memories: list[Memory] = []
            for (kind, _), path, by_person in zip(SOURCES, source_paths, segments_by_source):
                if person_name not in by_person:
                    raise DataError(str(path), person_name, "Name",
                                    f"evaluable person {person_name!r} (one of the first {people_per_community} "
                                    f"of {eval_path.name}) has no entry here; only the first 3 people per "
                                    "community have documents")
                for segment, record in _iter_segments(by_person[person_name], kind, path, person_name):
                    memories.append(_memory(segment, len(memories), path, record))
                    counts[f"{kind}_segments"] += 1
            episode = Episode(id=episode_id, memories=tuple(memories), source=str(source_paths[0].parent))
            episodes[episode_id] = episode
            corpus_ids = set(episode.ids)

            for qa_index, qa in enumerate(qa_list):
                query = _query(qa, qa_index, episode_id, corpus_ids, gold_by_qid, eval_path, gold_path, level)
                where = f"{episode_id} qa[{qa_index}]"
                if query.id in first_asked:  # a query id keys its gold and its result rows: one id, one question
                    path, first = first_asked[query.id]
                    raise DataError(str(eval_path), query.id, "q_id",
                                    f"duplicate query id at {where}, first at {first}"
                                    f"{'' if path == eval_path else f' in {path}'}; give each question its own "
                                    "q_id or restore the file (`python -m memrepro data check`)")
                first_asked[query.id] = (eval_path, where)
                used_gold.add(query.id)
                queries.append(query)
                counts["queries"] += 1
                counts[f"excluded_{query.excluded}" if query.excluded else "scored"] += 1
        counts["people"] += len(people)
        counts["gold_entries_unused"] += len(set(gold_by_qid) - used_gold)

    counts["memories"] = sum(len(e) for e in episodes.values())
    episode_ids = tuple(episodes)
    return Benchmark(
        name="personabench",
        episodes=episodes,
        queries=tuple(queries),
        splits=(Split("all", episode_ids),),
        protocol=PROTOCOL,
        files=tuple(files),
        loader_counts=dict(counts),
        options={"noise": level, "communities": tuple(communities),
                 "people_per_community": people_per_community,
                 "unit": "segment (RF-Mem compact JSON without segment_id/session)"},
    )


def _read_people(path: Path) -> list[tuple[str, list[Any]]]:
    """[(Name, qa list)] in file order."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(str(path), "<root>", "<root>", f"expected a list of people, got {type(data).__name__}")
    people: list[tuple[str, list[Any]]] = []
    for index, person in enumerate(data):
        record = f"person {index}"
        name = field(person, "Name", str, file=str(path), record_id=record)
        info = field(person, "Eval_Info", dict, file=str(path), record_id=name)
        people.append((name, field(info, "qa", list, file=str(path), record_id=name)))
    return people


def _read_gold(path: Path) -> dict[str, dict[str, list[str]]]:
    """q_id → {answer part: [alternative segment ids]} (dict order kept: it is the combination order)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(str(path), "<root>", "<root>", f"expected a list of gold entries, got {type(data).__name__}")
    gold: dict[str, dict[str, list[str]]] = {}
    for index, entry in enumerate(data):
        q_id = field(entry, "q_id", str, file=str(path), record_id=f"entry {index}")
        parts = field(entry, "segment_id", dict, file=str(path), record_id=q_id)
        if q_id in gold:
            raise DataError(str(path), q_id, "q_id", "duplicate gold entry")
        for part, alternatives in parts.items():
            if not isinstance(alternatives, list) or not alternatives \
                    or not all(isinstance(a, str) for a in alternatives):
                raise DataError(str(path), q_id, f"segment_id.{part}",
                                f"expected a non-empty list of segment ids, got {alternatives!r:.80}")
        gold[q_id] = parts
    return gold


def _read_segment_file(path: Path) -> dict[str, list[Any]]:
    """Name → Data of one ``_all`` file."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(str(path), "<root>", "<root>", f"expected a list of people, got {type(data).__name__}")
    by_person: dict[str, list[Any]] = {}
    for index, person in enumerate(data):
        name = field(person, "Name", str, file=str(path), record_id=f"person {index}")
        if name in by_person:
            raise DataError(str(path), name, "Name", "person listed twice")
        by_person[name] = field(person, "Data", list, file=str(path), record_id=name)
    return by_person


def _iter_segments(person_data: list[Any], kind: str, path: Path,
                   person: str) -> Iterator[tuple[dict[str, Any], str]]:
    """(segment, record label) in RF-Mem order; conversation data nests segments per contact."""
    if kind != "conversation":
        for index, segment in enumerate(person_data):
            yield segment, f"{person} / Data[{index}]"
        return
    for contact_index, contact in enumerate(person_data):
        record = f"{person} / Data[{contact_index}]"
        for index, segment in enumerate(field(contact, "Conversations", list, file=str(path), record_id=record)):
            yield segment, f"{record} / Conversations[{index}]"


def _memory(segment: Any, position: int, path: Path, record: str) -> Memory:
    segment_id = field(segment, "segment_id", str, file=str(path), record_id=record)
    session = field(segment, "session", str, file=str(path), record_id=segment_id)
    time = field(segment, "time", str, file=str(path), record_id=segment_id)
    return Memory(id=segment_id, text=segment_text(segment), position=position, session=session, time=time)


def _query(qa: Any, qa_index: int, episode_id: str, corpus_ids: set[str],
           gold_by_qid: dict[str, dict[str, list[str]]], eval_path: Path, gold_path: Path, level: str) -> Query:
    record = f"{episode_id} qa[{qa_index}]"
    q_id = field(qa, "q_id", str, file=str(eval_path), record_id=record)
    question = field(qa, "question", str, file=str(eval_path), record_id=q_id)
    question_type = field(qa, "type", str, file=str(eval_path), record_id=q_id)
    difficulty = field(qa, "difficulty", str, file=str(eval_path), record_id=q_id)
    if question_type not in QUESTION_TYPES:
        raise DataError(str(eval_path), q_id, "type",
                        f"unknown question type {question_type!r} (known: {', '.join(QUESTION_TYPES)})")
    if difficulty not in DIFFICULTIES:
        raise DataError(str(eval_path), q_id, "difficulty",
                        f"unknown difficulty {difficulty!r} (known: {', '.join(DIFFICULTIES)})")

    parts = gold_by_qid.get(q_id)
    alternatives: tuple[tuple[str, ...], ...] | None = None
    gold: tuple[str, ...] = ()
    if parts:
        alternatives = tuple(tuple(ids) for ids in parts.values())
        for part, ids in parts.items():
            for segment_id in ids:
                if segment_id not in corpus_ids:
                    raise DataError(str(gold_path), q_id, f"segment_id.{part}",
                                    f"gold id {segment_id!r} is not in the corpus of {episode_id} at noise {level}; "
                                    "corpus and gold must come from the same noise level")
        gold = tuple(dict.fromkeys(i for ids in alternatives for i in ids))

    excluded = "subjective" if question_type == "Subjective" else (None if parts else "no_gold")
    return Query(id=q_id, text=question, episode_id=episode_id, gold=gold,
                 category=category_key(question_type, difficulty),
                 gold_alternatives=alternatives, excluded=excluded)
