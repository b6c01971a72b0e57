"""LongMemEval loader and metrics: the spec's tiny fixture (§4.8) as list / folder / tar, golden metric values,
and the counts of the real files (datasets.md §4, protocols.md §2)."""

from __future__ import annotations

import hashlib
import io
import json
import random
import statistics
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrepro.datasets.longmemeval import PROTOCOL, QUESTION_TYPES, load_longmemeval
from memrepro.errors import DataError, MissingDataError
from memrepro.evaluation.longmemeval_metrics import (
    official_session_of,
    recall_all_at_k,
    recall_any_at_k,
    sessions_from_turn_ranking,
)

TINY_LIST = "longmemeval/longmemeval_tiny.json"
TINY_FOLDER = "longmemeval/lme_jsons"
TINY_IDS = ("0862e8bf_abs", "1c0ddc50", "e47becba", "gpt4_2655b836")  # sorted question_id order


# --------------------------------------------------------------------------------------------------- helpers

def tiny_records(fixtures_dir: Path) -> list[dict[str, Any]]:
    return json.loads((fixtures_dir / TINY_LIST).read_text(encoding="utf-8"))


def write_list(tmp_path: Path, records: list[Any], name: str = "lme.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def write_tar(tmp_path: Path, members: dict[str, bytes], name: str = "lme.tar.xz") -> Path:
    path = tmp_path / name
    with tarfile.open(path, "w:xz") as tar:
        for member_name, data in members.items():
            info = tarfile.TarInfo(member_name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def tiny_tar(tmp_path: Path, fixtures_dir: Path) -> Path:
    folder = fixtures_dir / TINY_FOLDER
    return write_tar(tmp_path, {f"lme_jsons_tiny/{p.name}": p.read_bytes() for p in sorted(folder.iterdir())})


@pytest.fixture(scope="module")
def tiny(fixtures_dir: Path):
    return load_longmemeval(fixtures_dir, variant="oracle", source=TINY_LIST)


def query(benchmark, question_id: str):
    return next(q for q in benchmark.queries if q.id == question_id)


# --------------------------------------------------------------------------------------------------- fixture

def test_tiny_counts_and_order(tiny) -> None:
    assert tuple(q.id for q in tiny.queries) == TINY_IDS
    assert tuple(tiny.episodes) == TINY_IDS
    assert [q.id for q in tiny.queries if q.scored] == ["e47becba", "gpt4_2655b836"]
    counts = tiny.loader_counts
    assert counts["excluded_abstention"] == 1
    assert counts["excluded_no_user_evidence"] == 1
    assert counts["excluded_no_gold"] == 0
    assert counts["questions_in_source"] == counts["questions_loaded"] == 4
    assert counts["queries_scored"] == 2
    assert counts["memories"] == 7
    assert counts["questions_with_repeated_session_ids"] == 1
    assert tiny.splits[0].name == "all" and tiny.splits[0].test_episode_ids == TINY_IDS
    assert tiny.name == "longmemeval_oracle"
    assert tiny.protocol == PROTOCOL
    assert tuple(tiny.protocol.category_names) == QUESTION_TYPES
    assert tiny.options == {"variant": "oracle", "source": TINY_LIST, "granularity": "session", "gold": "rfmem",
                            "limit": None}


def test_tiny_first_record_repeated_session_id(tiny) -> None:
    """File index 0: the filler session id repeats; both copies stay, the second as ``#1``."""
    episode = tiny.episodes["e47becba"]
    assert episode.ids == ("sharegpt_yywfIrx_0", "answer_280352e9", "ultrachat_218093", "sharegpt_yywfIrx_0#1")
    assert [m.session for m in episode.memories] == [
        "sharegpt_yywfIrx_0", "answer_280352e9", "ultrachat_218093", "sharegpt_yywfIrx_0"]
    assert [m.position for m in episode.memories] == [0, 1, 2, 3]
    assert episode.memories[3].time == "2023/05/22 (Mon) 08:00"
    assert episode.memories[0].text == (
        '{"date":"2023/05/20 (Sat) 02:21","conversation":["Help me plan a trip.","Sure..."]}')
    assert episode.memories[1].text == (
        '{"date":"2023/05/20 (Sat) 02:57","conversation":["I\'m updating my resume.","Happy to help.",'
        '"I graduated with a degree in Business Administration.","Great!"]}')
    q = query(tiny, "e47becba")
    assert q.gold == ("answer_280352e9",)
    assert q.text == "What degree did I graduate with?"
    assert q.category == "single-session-user"
    assert q.time == "2023/05/30 (Tue) 23:40"
    assert q.episode_id == "e47becba" and q.excluded is None


def test_tiny_last_record_int_answer(tiny) -> None:
    q = query(tiny, "gpt4_2655b836")
    assert q.gold == ("answer_4be1b6b4_1",)
    assert q.category == "temporal-reasoning" and q.scored
    assert tiny.episodes["gpt4_2655b836"].memories[0].text == (
        '{"date":"2023/05/29 (Mon) 09:00","conversation":["I bought X today.","Cool."]}')


def test_tiny_exclusions(tiny, fixtures_dir: Path) -> None:
    abstention = query(tiny, "0862e8bf_abs")
    assert abstention.excluded == "abstention" and abstention.gold == ("answer_c6fd8ebd_abs",)
    no_user = query(tiny, "1c0ddc50")
    assert no_user.excluded == "no_user_evidence" and no_user.gold == ("answer_9b2f1c3a",)
    official = load_longmemeval(fixtures_dir, variant="oracle", source=TINY_LIST, gold="official")
    assert query(official, "1c0ddc50").gold == ()  # relabelled noans, but the first reason wins
    assert query(official, "1c0ddc50").excluded == "no_user_evidence"
    assert query(official, "e47becba").gold == ("answer_280352e9",)
    assert [q.id for q in official.queries if q.scored] == ["e47becba", "gpt4_2655b836"]


def test_list_folder_and_tar_give_the_same_benchmark(tiny, fixtures_dir: Path, tmp_path: Path) -> None:
    folder = load_longmemeval(fixtures_dir, variant="oracle", source=TINY_FOLDER)
    archive = tiny_tar(tmp_path, fixtures_dir)
    from_tar = load_longmemeval(fixtures_dir, variant="oracle", source=str(archive))
    for other in (folder, from_tar):
        assert other.queries == tiny.queries
        assert {k: e.memories for k, e in other.episodes.items()} == {k: e.memories for k, e in tiny.episodes.items()}

    files = sorted((fixtures_dir / TINY_FOLDER).iterdir(), key=lambda p: p.name)
    lines = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in files)
    (provenance,) = folder.files
    assert provenance.path == TINY_FOLDER
    assert provenance.sha256 == hashlib.sha256(lines.encode()).hexdigest()
    assert provenance.bytes == sum(p.stat().st_size for p in files)
    (tar_provenance,) = from_tar.files
    assert tar_provenance.path == str(archive)  # outside the data root: shown as given
    assert tar_provenance.sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert folder.episodes["e47becba"].source.endswith("4_e47becba.json")
    assert from_tar.episodes["e47becba"].source == f"{archive}:lme_jsons_tiny/4_e47becba.json"


def test_session_user_text(fixtures_dir: Path) -> None:
    bench = load_longmemeval(fixtures_dir, variant="oracle", source=TINY_LIST, granularity="session_user")
    episode = bench.episodes["e47becba"]
    assert episode.ids == ("sharegpt_yywfIrx_0", "answer_280352e9", "ultrachat_218093", "sharegpt_yywfIrx_0#1")
    assert episode.memories[1].text == "I'm updating my resume. I graduated with a degree in Business Administration."
    assert query(bench, "e47becba").gold == ("answer_280352e9",)


def test_turn_granularity(fixtures_dir: Path) -> None:
    bench = load_longmemeval(fixtures_dir, variant="oracle", source=TINY_LIST, granularity="turn")
    episode = bench.episodes["e47becba"]
    assert episode.ids == ("sharegpt_yywfIrx_0_1", "answer_280352e9_1", "answer_280352e9_3", "ultrachat_218093_1",
                           "sharegpt_yywfIrx_0#1_1")
    assert [m.session for m in episode.memories] == [
        "sharegpt_yywfIrx_0", "answer_280352e9", "answer_280352e9", "ultrachat_218093", "sharegpt_yywfIrx_0"]
    assert episode.memories[2].text == "I graduated with a degree in Business Administration."
    assert all(m.speaker == "user" for m in episode.memories)
    assert query(bench, "e47becba").gold == ("answer_280352e9_3",)
    assert query(bench, "gpt4_2655b836").gold == ("answer_4be1b6b4_1_1",)
    assert query(bench, "1c0ddc50").gold == () and query(bench, "1c0ddc50").excluded == "no_user_evidence"
    assert bench.loader_counts["memories"] == 5 + 1 + 1 + 1


def test_non_ascii_is_escaped_like_rfmem(fixtures_dir: Path, tmp_path: Path) -> None:
    records = tiny_records(fixtures_dir)
    records[0]["haystack_sessions"][0][0]["content"] = "Un café à Zürich"
    bench = load_longmemeval(tmp_path, variant="oracle", source=str(write_list(tmp_path, records)))
    text = bench.episodes["e47becba"].memories[0].text
    assert text == '{"date":"2023/05/20 (Sat) 02:21","conversation":["Un caf\\u00e9 \\u00e0 Z\\u00fcrich","Sure..."]}'


def test_limit_keeps_first_sorted_ids(fixtures_dir: Path) -> None:
    bench = load_longmemeval(fixtures_dir, variant="oracle", source=TINY_LIST, limit=2)
    assert tuple(bench.episodes) == TINY_IDS[:2]
    assert bench.loader_counts["questions_in_source"] == 4 and bench.loader_counts["questions_loaded"] == 2
    assert bench.options["limit"] == 2


# --------------------------------------------------------------------------------------------------- bad input

def test_unknown_question_type(fixtures_dir: Path, tmp_path: Path) -> None:
    records = tiny_records(fixtures_dir)
    records[2]["question_type"] = "single-session-gossip"
    path = write_list(tmp_path, records)
    with pytest.raises(DataError) as info:
        load_longmemeval(tmp_path, variant="oracle", source=path.name)
    assert (info.value.file, info.value.record, info.value.field) == (str(path), "1c0ddc50", "question_type")
    assert "single-session-gossip" in str(info.value)


@pytest.mark.parametrize("key", ["question", "question_date", "haystack_dates", "answer", "answer_session_ids"])
def test_missing_field_names_the_record(fixtures_dir: Path, tmp_path: Path, key: str) -> None:
    records = tiny_records(fixtures_dir)
    del records[2][key]
    path = write_list(tmp_path, records)
    with pytest.raises(DataError) as info:
        load_longmemeval(tmp_path, variant="oracle", source=path.name)
    assert (info.value.file, info.value.record, info.value.field) == (str(path), "1c0ddc50", key)
    assert "missing field" in str(info.value)


def test_missing_question_id_names_the_position(fixtures_dir: Path, tmp_path: Path) -> None:
    records = tiny_records(fixtures_dir)
    del records[1]["question_id"]
    with pytest.raises(DataError) as info:
        load_longmemeval(tmp_path, variant="oracle", source=str(write_list(tmp_path, records)))
    assert (info.value.record, info.value.field) == ("question #1", "question_id")


@pytest.mark.parametrize(("mutate", "where"), [
    (lambda r: r.__setitem__("answer", ["x"]), "answer"),
    (lambda r: r.__setitem__("answer", True), "answer"),
    (lambda r: r["haystack_sessions"][1].__setitem__(2, "just text"), "haystack_sessions[1][2]"),
    (lambda r: r["haystack_sessions"][1][2].__setitem__("has_answer", "yes"), "haystack_sessions[1][2].has_answer"),
    (lambda r: r["haystack_sessions"][1][2].pop("content"), "haystack_sessions[1][2].content"),
    (lambda r: r["haystack_sessions"][1][2].__setitem__("role", "system"), "haystack_sessions[1][2].role"),
    (lambda r: r["haystack_session_ids"].__setitem__(0, 7), "haystack_session_ids[0]"),
])
def test_mistyped_fields(fixtures_dir: Path, tmp_path: Path, mutate, where: str) -> None:
    records = tiny_records(fixtures_dir)
    mutate(records[0])
    with pytest.raises(DataError) as info:
        load_longmemeval(tmp_path, variant="oracle", source=str(write_list(tmp_path, records)))
    assert (info.value.record, info.value.field) == ("e47becba", where)


def test_unequal_haystack_lists(fixtures_dir: Path, tmp_path: Path) -> None:
    records = tiny_records(fixtures_dir)
    records[0]["haystack_dates"].pop()
    with pytest.raises(DataError) as info:
        load_longmemeval(tmp_path, variant="oracle", source=str(write_list(tmp_path, records)))
    assert (info.value.record, info.value.field) == ("e47becba", "haystack_sessions")
    assert "haystack_dates 3" in str(info.value) and "haystack_sessions 4" in str(info.value)


def test_duplicate_question_id(fixtures_dir: Path, tmp_path: Path) -> None:
    records = tiny_records(fixtures_dir)
    records.append(records[0])
    with pytest.raises(DataError, match="duplicate question id"):
        load_longmemeval(tmp_path, variant="oracle", source=str(write_list(tmp_path, records)))


def test_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[{"question_id": "x",\n  "question_type": }]', encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_longmemeval(tmp_path, variant="oracle", source="bad.json")
    assert info.value.file == str(path) and info.value.record.startswith("line 2 column")
    assert "malformed JSON" in str(info.value)


def test_malformed_json_in_tar_names_the_member(tmp_path: Path) -> None:
    archive = write_tar(tmp_path, {"lme/1_a.json": b'{"question_id": "a",}'})
    with pytest.raises(DataError) as info:
        load_longmemeval(tmp_path, variant="oracle", source=archive.name)
    assert info.value.file == f"{archive}:lme/1_a.json" and info.value.record.startswith("line 1 column")


def test_not_a_list(tmp_path: Path) -> None:
    (tmp_path / "obj.json").write_text('{"question_id": "a"}', encoding="utf-8")
    with pytest.raises(DataError, match="expected a list of questions"):
        load_longmemeval(tmp_path, variant="oracle", source="obj.json")


def test_missing_default_file(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as info:
        load_longmemeval(tmp_path, variant="s")
    message = str(info.value)
    assert info.value.path == str(tmp_path / "longmemeval/longmemeval_s_cleaned_lme_jsons_498.tar.xz")
    for needle in ("MEMREPRO_DATA_DIR", "xiaowu0162/longmemeval-cleaned", "make data", "longmemeval_s_cleaned.json"):
        assert needle in message


def test_missing_explicit_source(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as info:
        load_longmemeval(tmp_path, variant="oracle", source="longmemeval/nope.json")
    assert info.value.path == str(tmp_path / "longmemeval/nope.json")


def test_default_source_fallback_to_folder(fixtures_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "longmemeval" / "oracle_lme_jsons"
    folder.mkdir(parents=True)
    for path in (fixtures_dir / TINY_FOLDER).iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    bench = load_longmemeval(tmp_path, variant="oracle")
    assert bench.options["source"] == "longmemeval/oracle_lme_jsons"
    assert tuple(bench.episodes) == TINY_IDS


@pytest.mark.parametrize("kwargs", [{"variant": "l"}, {"granularity": "sentence"}, {"gold": "any"}, {"limit": 0}])
def test_bad_options(fixtures_dir: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        load_longmemeval(fixtures_dir, **{"variant": "oracle", "source": TINY_LIST, **kwargs})


# --------------------------------------------------------------------------------------------------- metrics

def test_recall_all_golden() -> None:
    ranked = ["a", "b", "c", "d"]
    assert recall_all_at_k(ranked, {"b", "d"}, 2) == 0.0
    assert recall_all_at_k(ranked, {"b", "d"}, 4) == 1.0
    assert recall_all_at_k(ranked, ["b", "b"], 2) == 1.0
    assert recall_all_at_k(ranked, {"b", "z"}, 50) == 0.0
    assert recall_all_at_k(ranked, {"a", "d"}, 50) == 1.0  # shorter list than k: used whole
    assert recall_all_at_k(ranked, set(), 5) == 0.0
    assert recall_all_at_k([], {"a"}, 5) == 0.0


def test_recall_any_golden() -> None:
    ranked = ["a", "b", "c", "d"]
    assert recall_any_at_k(ranked, {"b", "z"}, 1) == 0.0
    assert recall_any_at_k(ranked, {"b", "z"}, 2) == 1.0
    assert recall_any_at_k(ranked, set(), 4) == 0.0
    assert recall_any_at_k([], {"a"}, 4) == 0.0


def test_metric_k_must_be_positive() -> None:
    with pytest.raises(ValueError):
        recall_all_at_k(["a"], {"a"}, 0)
    with pytest.raises(ValueError):
        sessions_from_turn_ranking(["a"], {"a": "s"}, 0)


def test_sessions_from_turn_ranking_golden() -> None:
    session_of = {"t1": "s1", "t2": "s1", "t3": "s2", "t4": "s3", "t5": "s2"}
    ranked = ["t1", "t2", "t3", "t4", "t5"]
    assert sessions_from_turn_ranking(ranked, session_of, 1) == ["s1"]
    assert sessions_from_turn_ranking(ranked, session_of, 2) == ["s1", "s2"]  # grows past t2 to t3
    assert sessions_from_turn_ranking(ranked, session_of, 3) == ["s1", "s2", "s3"]
    assert sessions_from_turn_ranking(ranked, session_of, 10) == ["s1", "s2", "s3"]
    with pytest.raises(ValueError, match="t9"):
        sessions_from_turn_ranking(["t9"], session_of, 1)


def test_official_session_of_relabels_non_evidence_turns(fixtures_dir: Path) -> None:
    bench = load_longmemeval(fixtures_dir, variant="oracle", source=TINY_LIST, granularity="turn")
    mapping = official_session_of(bench.episodes["e47becba"].memories, query(bench, "e47becba").gold)
    assert mapping == {"sharegpt_yywfIrx_0_1": "sharegpt_yywfIrx_0", "answer_280352e9_1": "noans_280352e9",
                       "answer_280352e9_3": "answer_280352e9", "ultrachat_218093_1": "ultrachat_218093",
                       "sharegpt_yywfIrx_0#1_1": "sharegpt_yywfIrx_0"}


def _official_evaluate(rankings: list[int], correct_docs: list[str], corpus_ids: list[str], k: int):
    """The official ``eval_utils.evaluate_retrieval`` recall part, restated for comparison."""
    recalled = {corpus_ids[i] for i in rankings[:k]}
    return float(any(d in recalled for d in correct_docs)), float(all(d in recalled for d in correct_docs))


def _official_turn2session(rankings: list[int], correct_docs: list[str], corpus_ids: list[str], k: int):
    """The official ``eval_utils.evaluate_retrieval_turn2session``, restated for comparison."""
    def strip(doc_id: str) -> str:
        return "_".join(doc_id.split("_")[:-1])
    correct = list({strip(x) for x in correct_docs})
    sessions = [strip(x) for x in corpus_ids]
    effective_k = k
    while effective_k <= len(sessions) and len({sessions[i] for i in rankings[:effective_k]}) < k:
        effective_k += 1
    return _official_evaluate(rankings, correct, sessions, effective_k)


@st.composite
def turn_corpora(draw):
    n_sessions = draw(st.integers(1, 6))
    turns_per = draw(st.lists(st.integers(1, 4), min_size=n_sessions, max_size=n_sessions))
    corpus_ids = [f"s{s}_{t + 1}" for s in range(n_sessions) for t in range(turns_per[s])]
    ranking = draw(st.permutations(range(len(corpus_ids))))
    gold = draw(st.lists(st.sampled_from(corpus_ids), min_size=1, max_size=4))
    k = draw(st.integers(1, 8))
    return corpus_ids, list(ranking), gold, k


@settings(max_examples=300, deadline=None)
@given(turn_corpora())
def test_turn_to_session_matches_official(case) -> None:
    corpus_ids, ranking, gold, k = case
    expected_any, expected_all = _official_turn2session(ranking, gold, corpus_ids, k)
    session_of = {turn_id: turn_id.rsplit("_", 1)[0] for turn_id in corpus_ids}
    sessions = sessions_from_turn_ranking([corpus_ids[i] for i in ranking], session_of, k)
    assert len(sessions) == min(k, len(set(session_of.values())))
    gold_sessions = {session_of[t] for t in gold}
    assert recall_any_at_k(sessions, gold_sessions, k) == expected_any
    assert recall_all_at_k(sessions, gold_sessions, k) == expected_all


@settings(max_examples=300, deadline=None)
@given(turn_corpora())
def test_session_recall_matches_official(case) -> None:
    corpus_ids, ranking, gold, k = case
    expected_any, expected_all = _official_evaluate(ranking, gold, corpus_ids, k)
    ranked = [corpus_ids[i] for i in ranking]
    assert recall_any_at_k(ranked, gold, k) == expected_any
    assert recall_all_at_k(ranked, gold, k) == expected_all


# --------------------------------------------------------------------------------------------------- real data

ORACLE_TYPES = {"single-session-user": 70, "single-session-assistant": 56, "single-session-preference": 30,
                "multi-session": 133, "knowledge-update": 78, "temporal-reasoning": 133}
S_TYPES = {**ORACLE_TYPES, "single-session-assistant": 55, "temporal-reasoning": 132}
ABSTENTION_BY_TYPE = {"single-session-user": 6, "multi-session": 12, "knowledge-update": 6, "temporal-reasoning": 6}


def _need(root: Path, relative: str) -> None:
    if not (root / relative).exists():
        pytest.skip(f"{relative} not under {root}")


@pytest.fixture(scope="module")
def oracle(real_data_dir: Path):
    _need(real_data_dir, "longmemeval/longmemeval_oracle.reassembled.json")
    return load_longmemeval(real_data_dir, variant="oracle")


@pytest.fixture(scope="module")
def cleaned_s(real_data_dir: Path):
    _need(real_data_dir, "longmemeval/longmemeval_s_cleaned_lme_jsons_498.tar.xz")
    return load_longmemeval(real_data_dir, variant="s")


@pytest.mark.real_data
def test_real_oracle_counts(oracle) -> None:
    assert len(oracle.queries) == 500
    assert sum(q.scored for q in oracle.queries) == 419
    counts = oracle.loader_counts
    assert (counts["excluded_abstention"], counts["excluded_no_user_evidence"], counts["excluded_no_gold"]) == (30, 51, 0)
    assert counts["answer_sessions_without_user_evidence"] == 145
    assert counts.get("answer_session_ids_differ_from_haystack_rule", 0) == 0
    assert Counter(q.category for q in oracle.queries) == ORACLE_TYPES
    assert Counter(q.category for q in oracle.queries if q.excluded == "abstention") == ABSTENTION_BY_TYPE
    assert {q.category for q in oracle.queries if q.excluded == "no_user_evidence"} == {"single-session-assistant"}
    sizes = Counter(len(e) for e in oracle.episodes.values())
    assert sizes == {1: 176, 2: 250, 3: 41, 4: 19, 5: 11, 6: 3} and sum(len(e) for e in oracle.episodes.values()) == 948
    # every memory is gold in the oracle (rfmem rule)
    assert all(set(q.gold) == set(oracle.episodes[q.id].ids) for q in oracle.queries)
    assert oracle.episodes["e47becba"].memories[0].time is not None
    assert query(oracle, "e47becba").time != "2023/05/30 (Tue) 23:40"  # dates are re-sampled per split


@pytest.mark.real_data
def test_real_oracle_folder_and_official_gold(oracle, real_data_dir: Path) -> None:
    _need(real_data_dir, "longmemeval/oracle_lme_jsons")
    folder = load_longmemeval(real_data_dir, source="longmemeval/oracle_lme_jsons")
    assert folder.queries == oracle.queries
    sums = real_data_dir / "longmemeval/oracle_lme_jsons.SHA256SUMS"
    if sums.exists():  # the combined hash is the sha256 of a name-sorted SHA256SUMS listing
        assert folder.files[0].sha256 == hashlib.sha256(sums.read_bytes()).hexdigest()
    official = load_longmemeval(real_data_dir, variant="oracle", gold="official")
    shrunk = [q for q, o in zip(oracle.queries, official.queries) if q.gold != o.gold]
    assert len(shrunk) == 113 and sum(q.scored for q in shrunk) == 32
    assert sum(q.scored for q in official.queries) == 419


@pytest.mark.real_data
def test_real_cleaned_s_counts(cleaned_s) -> None:
    assert len(cleaned_s.queries) == 498
    assert sum(q.scored for q in cleaned_s.queries) == 418
    counts = cleaned_s.loader_counts
    assert (counts["excluded_abstention"], counts["excluded_no_user_evidence"]) == (30, 50)
    assert Counter(q.category for q in cleaned_s.queries) == S_TYPES
    sizes = [len(e) for e in cleaned_s.episodes.values()]
    assert sum(sizes) == 23_744 and round(statistics.mean(sizes), 2) == 47.68
    assert (min(sizes), max(sizes)) == (38, 58)
    assert counts["questions_with_repeated_session_ids"] == 13
    assert counts.get("answer_session_ids_differ_from_haystack_rule", 0) == 0
    assert "sharegpt_vyHqfrX_0#1" in cleaned_s.episodes["18bc8abd"].ids
    assert "8c64ce26_3#1" in cleaned_s.episodes["gpt4_c27434e8_abs"].ids
    for q in cleaned_s.queries:  # no repeated id is an evidence session
        assert q.gold and all("#" not in g for g in q.gold)
    assert query(cleaned_s, "e47becba").time == "2023/05/30 (Tue) 23:40"
    texts = cleaned_s.episodes["e47becba"].memories
    assert all(m.text.startswith('{"date":"') and m.text.isascii() for m in texts)


@pytest.mark.real_data
def test_real_cleaned_s_limit(real_data_dir: Path, cleaned_s) -> None:
    subset = load_longmemeval(real_data_dir, variant="s", limit=5)
    assert tuple(subset.episodes) == tuple(sorted(cleaned_s.episodes))[:5]
    assert all(subset.episodes[k].memories == cleaned_s.episodes[k].memories for k in subset.episodes)


@pytest.mark.real_data
def test_real_cleaned_s_turns(real_data_dir: Path, cleaned_s) -> None:
    turns = load_longmemeval(real_data_dir, variant="s", granularity="turn")
    assert sum(q.scored for q in turns.queries) == 418
    assert all(q.gold for q in turns.queries if q.scored)
    rng = random.Random(0)
    for question_id in rng.sample(sorted(turns.episodes), 20):  # turn sessions follow the session pool order
        sessions = [m.session for m in cleaned_s.episodes[question_id].memories]
        turn_sessions = [m.session for m in turns.episodes[question_id].memories]
        assert list(dict.fromkeys(turn_sessions)) == [s for s in dict.fromkeys(sessions) if s in set(turn_sessions)]
