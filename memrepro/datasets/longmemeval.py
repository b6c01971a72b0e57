"""LongMemEval (Wu et al., ICLR 2025): oracle, S and M, as RF-Mem Table 3 and the official retrieval code use it.

One episode per question (its own haystack is the pool). Memory units:

* ``session`` (RF-Mem, faithful): one memory per haystack entry in file order, text = compact JSON of the
  session date and the contents of all turns (RF-Mem ``build_index``).
* ``session_user`` (official ``run_retrieval.py``): user turns only, joined with a space.
* ``turn`` (official alternative): one memory per user turn, id ``f"{session_id}_{turn_index + 1}"``.

Session ids can repeat inside one haystack (13 cleaned-S questions); memory ids stay unique by suffixing the
k-th repeat with ``#k`` while ``Memory.session`` keeps the raw id, so scoring by position still works.
Documented in docs/benchmarks.md#longmemeval and docs/protocols.md#longmemeval-protocol.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import tarfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from memrepro.datasets.io import data_root, field, provenance, read_json, sha256_file
from memrepro.errors import DataError, MissingDataError
from memrepro.types import Benchmark, Episode, FileProvenance, Memory, Protocol, Query, Split

VARIANTS = ("oracle", "s", "m")
GRANULARITIES = ("session", "session_user", "turn")
GOLD_RULES = ("rfmem", "official")
DEFAULT_SOURCES: dict[str, tuple[str, ...]] = {  # first existing wins; the first is named when none exists
    "oracle": (
        "longmemeval/longmemeval_oracle.reassembled.json",
        "longmemeval/oracle_lme_jsons",
        "longmemeval/longmemeval_oracle.json",
    ),
    "s": (
        "longmemeval/longmemeval_s_cleaned_lme_jsons_498.tar.xz",
        "longmemeval/longmemeval_s_cleaned.json",
        "longmemeval/longmemeval_s.json",
    ),
    "m": (
        "longmemeval/longmemeval_m_cleaned.json",
        "longmemeval/longmemeval_m.json",
    ),
}
QUESTION_TYPES = (  # display order of docs/benchmarks.md#longmemeval-question-types
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)
ROLES = ("user", "assistant")
HOW_TO_OBTAIN = (
    "Get it with `make data` (online), or download the files of the Hugging Face dataset "
    "`xiaowu0162/longmemeval-cleaned` (longmemeval_oracle.json, longmemeval_s_cleaned.json, "
    "longmemeval_m_cleaned.json) into <data dir>/longmemeval/ and pass source=... if the name differs."
)
_TAR_SUFFIXES = (".tar", ".tar.xz", ".txz", ".tar.gz", ".tgz", ".tar.bz2")

PROTOCOL = Protocol(
    metrics=("recall_all@5", "recall_all@10", "recall_all@50", "recall_any@5", "recall_any@10", "ndcg@10"),
    primary=("recall_all@5", "recall_all@10", "recall_all@50"),
    category_names={question_type: question_type for question_type in QUESTION_TYPES},
)


@dataclass(frozen=True)
class _Record:
    """One question object and where it came from (for error messages)."""

    file: str
    label: str  # how to name the record before its question_id is known
    raw: Any


def load_longmemeval(
    data_dir: str | Path | None = None,
    variant: str = "s",
    source: str | Path | None = None,
    granularity: str = "session",
    gold: str = "rfmem",
    limit: int | None = None,
) -> Benchmark:
    """Load one LongMemEval variant as a :class:`Benchmark` with one episode and one query per question.

    ``source`` (relative to the data root, or absolute) may be a JSON list file, a folder of per-question JSON
    files, or a tar archive of them (read in memory). ``gold="rfmem"`` (faithful) takes every haystack session
    whose id contains ``answer``; ``"official"`` drops answer sessions without a user turn marked
    ``has_answer`` (the official ``noans`` relabel). Abstention questions and questions without user-side
    evidence are kept but marked ``excluded`` (retrieval still runs for them, the averages skip them).
    ``limit`` keeps the first N questions in sorted ``question_id`` order (CI subsets).
    """
    if variant not in VARIANTS:
        raise ValueError(f"longmemeval variant must be one of {VARIANTS}, got {variant!r}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"longmemeval granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if gold not in GOLD_RULES:
        raise ValueError(f"longmemeval gold must be one of {GOLD_RULES}, got {gold!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"longmemeval limit must be a positive int or None, got {limit!r}")

    root = data_root(data_dir)
    path = _resolve_source(root, variant, source)
    records, file_provenance = _read_source(path, root)

    by_id: dict[str, _Record] = {}
    for record in records:
        question_id = field(record.raw, "question_id", str, file=record.file, record_id=record.label)
        if question_id in by_id:
            raise DataError(record.file, question_id, "question_id",
                            f"duplicate question id (also in {by_id[question_id].file})")
        by_id[question_id] = record
    kept_ids = sorted(by_id)[:limit] if limit is not None else sorted(by_id)

    counts: Counter[str] = Counter(
        {"excluded_abstention": 0, "excluded_no_user_evidence": 0, "excluded_no_gold": 0}
    )
    counts["questions_in_source"] = len(by_id)
    episodes: dict[str, Episode] = {}
    queries: list[Query] = []
    for question_id in kept_ids:
        record = by_id[question_id]
        episode, query = _question(record.raw, question_id, record.file, granularity, gold, counts)
        episodes[question_id] = episode
        queries.append(query)
    counts["questions_loaded"] = len(queries)
    counts["queries_scored"] = sum(query.scored for query in queries)
    counts["memories"] = sum(len(episode) for episode in episodes.values())

    return Benchmark(
        name=f"longmemeval_{variant}",
        episodes=episodes,
        queries=tuple(queries),
        splits=(Split(name="all", test_episode_ids=tuple(episodes)),),
        protocol=PROTOCOL,
        files=(file_provenance,),
        loader_counts=dict(sorted(counts.items())),
        options={"variant": variant, "source": file_provenance.path, "granularity": granularity,
                 "gold": gold, "limit": limit},
    )


# --------------------------------------------------------------------------------------------------- sources

def _resolve_source(root: Path, variant: str, source: str | Path | None) -> Path:
    if source is not None:
        path = Path(source).expanduser()
        path = path if path.is_absolute() else root / path
        if not path.exists():
            raise MissingDataError(str(path), HOW_TO_OBTAIN)
        return path
    candidates = [root / name for name in DEFAULT_SOURCES[variant]]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    also = ", ".join(str(c) for c in candidates[1:])
    raise MissingDataError(str(candidates[0]), HOW_TO_OBTAIN + (f"\n  Also looked for: {also}" if also else ""))


def _read_source(path: Path, root: Path) -> tuple[list[_Record], FileProvenance]:
    """All question objects of a source, plus one provenance entry that identifies the whole source."""
    if path.is_dir():
        return _read_folder(path, root)
    if path.name.endswith(_TAR_SUFFIXES):
        return _read_tar(path, root), provenance(path, root)
    document = read_json(path)
    if not isinstance(document, list):
        raise DataError(str(path), "<root>", "<json>", f"expected a list of questions, got {type(document).__name__}")
    return [_Record(str(path), f"question #{i}", raw) for i, raw in enumerate(document)], provenance(path, root)


def _read_folder(folder: Path, root: Path) -> tuple[list[_Record], FileProvenance]:
    """Per-question files; one combined provenance entry, since 500 entries would swamp every results file.

    The combined sha256 is over ``sha256sum``-style lines (``"<sha256>  <name>\\n"``) sorted by name, so it
    equals the sha256 of a name-sorted ``SHA256SUMS`` file of the folder.
    """
    files = sorted((p for p in folder.iterdir() if _is_question_file(p.name) and p.is_file()), key=lambda p: p.name)
    if not files:
        raise DataError(str(folder), "<folder>", "<files>", "no .json question files in folder")
    records: list[_Record] = []
    listing = hashlib.sha256()
    total_bytes = 0
    for file in files:
        listing.update(f"{sha256_file(file)}  {file.name}\n".encode())
        total_bytes += file.stat().st_size
        records.extend(_records_of_document(read_json(file), str(file)))
    shown = _shown_path(folder, root)
    return records, FileProvenance(path=shown, sha256=listing.hexdigest(), bytes=total_bytes)


def _read_tar(archive: Path, root: Path) -> list[_Record]:
    """Per-question files inside a tar archive, read in memory in archive order (never extracted)."""
    records: list[_Record] = []
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                name = member.name.rsplit("/", 1)[-1]
                if not member.isfile() or not _is_question_file(name):
                    continue
                handle = tar.extractfile(member)
                assert handle is not None  # regular files always have a handle
                label = f"{archive}:{member.name}"
                records.extend(_records_of_document(_parse_json(handle.read(), label), label))
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error) as exc:  # truncated / damaged archive
        raise DataError(str(archive), "<archive>", "<tar>",
                        f"unreadable tar archive ({type(exc).__name__}: {exc or 'ends early'}): truncated or damaged; "
                        f"restore it (`python -m memrepro data check` compares it with its pinned sha256)") from None
    if not records:
        raise DataError(str(archive), "<archive>", "<files>", "no .json question files in archive")
    return records


def _is_question_file(name: str) -> bool:
    return name.endswith(".json") and not name.startswith(".")  # skips macOS "._x.json" resource forks


def _records_of_document(document: Any, file: str) -> Iterator[_Record]:
    """A per-question file holds one question object (local split files) or a list of them."""
    if isinstance(document, dict):
        yield _Record(file, "question #0", document)
    elif isinstance(document, list):
        for index, raw in enumerate(document):
            yield _Record(file, f"question #{index}", raw)
    else:
        raise DataError(file, "<root>", "<json>", f"expected a question object or a list, got {type(document).__name__}")


def _parse_json(data: bytes, file: str) -> Any:
    """``read_json`` for bytes (tar members): malformed JSON names the member, line, column and offset."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DataError(file, f"byte {exc.start}", "<json>", f"not UTF-8: {exc.reason}") from exc
    except json.JSONDecodeError as exc:
        raise DataError(file, f"line {exc.lineno} column {exc.colno} (char {exc.pos})", "<json>",
                        f"malformed JSON: {exc.msg}") from exc


def _shown_path(path: Path, root: Path) -> str:
    """The path as provenance shows it: relative to the data root when under it, else as given."""
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------------------------------- questions

def _question(raw: Any, question_id: str, file: str, granularity: str, gold_rule: str,
              counts: Counter[str]) -> tuple[Episode, Query]:
    def get(key: str, expected: type | tuple[type, ...]) -> Any:
        return field(raw, key, expected, file=file, record_id=question_id)

    question_type = get("question_type", str)
    if question_type not in QUESTION_TYPES:
        raise DataError(file, question_id, "question_type",
                        f"unknown question type {question_type!r} (known: {', '.join(QUESTION_TYPES)})")
    question = get("question", str)
    get("answer", (str, int))  # int in 32/500 questions; validated only, retrieval does not use it
    question_date = get("question_date", str)
    dates = get("haystack_dates", list)
    session_ids = get("haystack_session_ids", list)
    sessions = get("haystack_sessions", list)
    answer_session_ids = get("answer_session_ids", list)
    if not len(dates) == len(session_ids) == len(sessions):
        raise DataError(file, question_id, "haystack_sessions",
                        f"parallel haystack lists differ in length: haystack_dates {len(dates)}, "
                        f"haystack_session_ids {len(session_ids)}, haystack_sessions {len(sessions)}")
    for index, value in enumerate(answer_session_ids):
        _check(value, str, file, question_id, f"answer_session_ids[{index}]")

    memories: list[Memory] = []
    gold: list[str] = []
    seen_sessions: Counter[str] = Counter()
    has_user_evidence = False
    for index, (date, session_id, turns) in enumerate(zip(dates, session_ids, sessions)):
        _check(date, str, file, question_id, f"haystack_dates[{index}]")
        _check(session_id, str, file, question_id, f"haystack_session_ids[{index}]")
        _check(turns, list, file, question_id, f"haystack_sessions[{index}]")
        checked = [_turn(turn, file, question_id, f"haystack_sessions[{index}][{t}]") for t, turn in enumerate(turns)]
        repeat = seen_sessions[session_id]
        seen_sessions[session_id] += 1
        session_key = session_id if repeat == 0 else f"{session_id}#{repeat}"
        is_answer_session = "answer" in session_id
        user_evidence = any(role == "user" and has_answer for role, _, has_answer in checked)
        has_user_evidence = has_user_evidence or user_evidence
        if is_answer_session and not user_evidence:
            counts["answer_sessions_without_user_evidence"] += 1

        if granularity == "turn":
            for turn_index, (role, content, has_answer) in enumerate(checked):
                if role != "user":
                    continue
                memory_id = f"{session_key}_{turn_index + 1}"
                memories.append(Memory(id=memory_id, text=content, position=len(memories), session=session_id,
                                       speaker="user", time=date))
                if is_answer_session and has_answer:
                    gold.append(memory_id)
            continue
        if granularity == "session":
            text = json.dumps({"date": date, "conversation": [content for _, content, _ in checked]},
                              separators=(",", ":"))
        else:  # session_user
            text = " ".join(content for role, content, _ in checked if role == "user")
        memories.append(Memory(id=session_key, text=text, position=len(memories), session=session_id, time=date))
        if is_answer_session and (gold_rule == "rfmem" or user_evidence):
            gold.append(session_key)

    repeated = sum(n - 1 for n in seen_sessions.values())
    if repeated:
        counts["questions_with_repeated_session_ids"] += 1
        counts["repeated_session_occurrences"] += repeated
    if set(answer_session_ids) != {sid for sid in session_ids if "answer" in sid}:
        counts["answer_session_ids_differ_from_haystack_rule"] += 1

    excluded: str | None = None
    if "_abs" in question_id:
        excluded = "abstention"
    elif not has_user_evidence:
        excluded = "no_user_evidence"
    elif not gold:
        excluded = "no_gold"
    if excluded is not None:
        counts[f"excluded_{excluded}"] += 1

    episode = Episode(id=question_id, memories=tuple(memories), source=file)
    query = Query(id=question_id, text=question, episode_id=question_id, gold=tuple(gold), category=question_type,
                  time=question_date, excluded=excluded)
    return episode, query


def _turn(turn: Any, file: str, question_id: str, where: str) -> tuple[str, str, bool]:
    """(role, content, has_answer) of one turn; ``has_answer`` is only present in evidence sessions."""
    _check(turn, dict, file, question_id, where)
    for key in ("role", "content"):
        if key not in turn:
            raise DataError(file, question_id, f"{where}.{key}", "missing field")
    role = _check(turn["role"], str, file, question_id, f"{where}.role")
    if role not in ROLES:
        raise DataError(file, question_id, f"{where}.role", f"expected one of {ROLES}, got {role!r}")
    content = _check(turn["content"], str, file, question_id, f"{where}.content")
    has_answer = turn.get("has_answer", False)
    _check(has_answer, bool, file, question_id, f"{where}.has_answer")
    return role, content, has_answer


def _check(value: Any, expected: type, file: str, question_id: str, where: str) -> Any:
    if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
        raise DataError(file, question_id, where,
                        f"expected {expected.__name__}, got {type(value).__name__}: {value!r:.80}")
    return value
