"""PersonaMem loader: the spec fixture (§5.6), RF-Mem unit construction (§5.3), every gotcha (§5.5) and the
real 32k questions CSV (the contexts file is not in the offline data)."""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memrepro.datasets.personamem import (EXCLUDED_REASON, PROTOCOL, RFMEM_COLUMNS, label_table, load_personamem,
                                          load_personamem_questions, read_contexts, rfmem_pair_units, turn_units)
from memrepro.errors import DataError, MissingDataError

CTX = "ctx0000000000000000000000000000000000000000000000000000000000000a"
Q0 = "acd74206-37dc-4756-94a8-b99a395d9a21"
Q1 = "0b1c2d3e-0000-4000-8000-000000000001"
UNIT_0 = ("User:\nUser: I've been creating digital music remixes.\n\n"
          "User: I produced an electronic track blending Pacific Islander music. (10/09/2023)"
          "\n\nAssistant:\nAssistant: That sounds wonderful!")
UNIT_1 = "User:\nUser: Lately I love producing music with software.\n\nAssistant:\nAssistant: Great!"


@pytest.fixture()
def fixture_copy(fixtures_dir: Path, tmp_path: Path) -> Path:
    shutil.copytree(fixtures_dir / "personamem", tmp_path / "personamem")
    return tmp_path


@pytest.fixture()
def fixture_context(fixtures_dir: Path) -> list[dict[str, Any]]:
    line = (fixtures_dir / "personamem" / "shared_contexts_32k.jsonl").read_text(encoding="utf-8")
    return json.loads(line)[CTX]


def rewrite_csv(root: Path, change, name: str = "questions_32k.csv") -> None:
    """Apply ``change(rows)`` to the fixture CSV's rows (dicts) and write it back as ``name``."""
    source = root / "personamem" / "questions_32k.csv"
    with open(source, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header, rows = reader.fieldnames, list(reader)
    change(rows)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header)
    writer.writeheader()
    writer.writerows(rows)
    (root / "personamem" / name).write_text(buffer.getvalue(), encoding="utf-8")


# ------------------------------------------------------------------------------------------------------------
# questions


def test_fixture_questions(fixtures_dir: Path) -> None:
    loaded = load_personamem_questions(fixtures_dir)
    assert [q.question_id for q in loaded.questions] == [Q0, Q1]
    first, last = loaded.questions
    assert (first.question_type, first.category, first.topic, first.correct_answer) == (
        "recall_user_shared_facts", "shared_facts", "musicRecommendation", "(c)")
    assert first.text == "I recently attended an event blending modern beats with Pacific sounds."
    assert first.options_format == "json"
    assert first.options[3] == "(d) It's great to see such approaches in art exhibitions."
    assert (first.shared_context_id, first.end_index, first.persona_id) == (CTX, 4, 0)
    assert (first.distance_to_ref_in_blocks, first.distance_to_ref_in_tokens) == (1, 80)
    assert first.context_length_in_tokens == 120
    assert (last.question_type, last.category, last.correct_answer, last.end_index) == (
        "suggest_new_ideas", "new_ideas", "(a)", 5)
    assert last.options_format == "repr"
    assert last.options == ("(a) Have you considered learning a new instrument?",
                            "(b) Keep remixing, since you've done it before.", "(c) Try more MIDI remixes.",
                            "(d) Produce another electronic track.")
    assert last.all_options_raw.startswith("['(a) Have you")  # the reader prompt quotes the raw literal
    assert loaded.counts == {"questions": 2, "options_json": 1, "options_repr": 1, "queries_with_user_prefix": 0}
    assert loaded.file.path == "personamem/questions_32k.csv" and len(loaded.file.sha256) == 64


def test_malformed_option_list(fixture_copy: Path) -> None:
    rewrite_csv(fixture_copy, lambda rows: rows[1].update({"all_options": "['(a) unterminated', '(b)"}))
    with pytest.raises(DataError) as caught:
        load_personamem_questions(fixture_copy)
    assert (caught.value.record, caught.value.field) == (Q1, "all_options")
    assert "row 2" in str(caught.value)


def test_option_list_that_is_not_a_list_of_strings(fixture_copy: Path) -> None:
    rewrite_csv(fixture_copy, lambda rows: rows[0].update({"all_options": '{"a": 1}'}))
    with pytest.raises(DataError) as caught:
        load_personamem_questions(fixture_copy)
    assert (caught.value.record, caught.value.field) == (Q0, "all_options")


def test_negative_end_index(fixture_copy: Path) -> None:
    rewrite_csv(fixture_copy, lambda rows: rows[1].update({"end_index_in_shared_context": "-3"}))
    with pytest.raises(DataError) as caught:
        load_personamem_questions(fixture_copy)
    assert (caught.value.record, caught.value.field) == (Q1, "end_index_in_shared_context")
    assert "negative" in str(caught.value)


def test_non_integer_end_index(fixture_copy: Path) -> None:
    rewrite_csv(fixture_copy, lambda rows: rows[0].update({"end_index_in_shared_context": "4.5"}))
    with pytest.raises(DataError, match="expected an integer"):
        load_personamem_questions(fixture_copy)


def test_unknown_label(fixture_copy: Path) -> None:
    rewrite_csv(fixture_copy, lambda rows: rows[0].update({"question_type": "acknowledge_latest_user_preferences"}))
    with pytest.raises(DataError) as caught:
        load_personamem_questions(fixture_copy)  # a 128k spelling is unknown in the 32k table
    assert (caught.value.record, caught.value.field) == (Q0, "question_type")
    assert "acknowledge_latest_user_preferences" in str(caught.value)


def test_label_aliases_per_size(fixture_copy: Path) -> None:
    rewrite_csv(fixture_copy, lambda rows: (rows[0].update({"question_type": "acknowledge_latest_user_preferences"}),
                                            rows[1].update({"question_type": "generalize_to_new_scenarios"})),
                name="questions_128k.csv")
    loaded = load_personamem_questions(fixture_copy, size="128k")
    assert [q.category for q in loaded.questions] == ["latest_prefs", "new_scenarios"]
    assert label_table("1M")["track_full_preference_updates"] == "track_evolution"
    for size in ("32k", "128k", "1M"):
        assert set(label_table(size).values()) == set(RFMEM_COLUMNS)


def test_content_label_map_swaps_the_two_fact_rows(fixtures_dir: Path) -> None:
    rfmem, content = label_table("32k", "rfmem"), label_table("32k", "content")
    assert (rfmem["recall_user_shared_facts"], rfmem["recalling_facts_mentioned_by_the_user"]) == (
        "shared_facts", "latest_prefs")
    assert (content["recall_user_shared_facts"], content["recalling_facts_mentioned_by_the_user"]) == (
        "latest_prefs", "shared_facts")
    assert {k: v for k, v in rfmem.items() if content[k] != v} == {
        "recall_user_shared_facts": "shared_facts", "recalling_facts_mentioned_by_the_user": "latest_prefs"}
    assert load_personamem_questions(fixtures_dir, label_map="content").questions[0].category == "latest_prefs"


def test_bad_arguments(fixtures_dir: Path) -> None:
    with pytest.raises(ValueError, match="size"):
        load_personamem_questions(fixtures_dir, size="64k")
    with pytest.raises(ValueError, match="label_map"):
        load_personamem_questions(fixtures_dir, label_map="paper")
    with pytest.raises(ValueError, match="unit"):
        load_personamem(fixtures_dir, unit="session")


def test_missing_column_and_duplicate_id(fixture_copy: Path) -> None:
    path = fixture_copy / "personamem" / "questions_32k.csv"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("shared_context_id,end_index", "context_id,end_index", 1), encoding="utf-8")
    with pytest.raises(DataError, match="missing column"):
        load_personamem_questions(fixture_copy)
    path.write_text(text, encoding="utf-8")
    rewrite_csv(fixture_copy, lambda rows: rows[1].update({"question_id": Q0}))
    with pytest.raises(DataError, match="duplicate"):
        load_personamem_questions(fixture_copy)


def test_questions_file_missing(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError, match="questions_32k.csv"):
        load_personamem_questions(tmp_path)


# ------------------------------------------------------------------------------------------------------------
# memory units (RF-Mem build_from_history)


def test_rfmem_units_unsliced(fixture_context: list[dict[str, Any]]) -> None:
    units = rfmem_pair_units(fixture_context)
    assert [u.text for u in units] == [UNIT_0, UNIT_1]
    assert [u.source_indices for u in units] == [(1, 2, 3), (5, 6)]  # the system cards (0 and 4) are never indexed


def test_rfmem_units_sliced(fixture_context: list[dict[str, Any]]) -> None:
    assert [u.text for u in rfmem_pair_units(fixture_context[:4])] == [UNIT_0]
    assert [u.text for u in rfmem_pair_units(fixture_context[:6])] == [UNIT_0]  # trailing user block dropped


def test_rfmem_units_rules() -> None:
    messages = [
        {"role": "Assistant", "content": "  Assistant: hello  "},          # lone assistant block
        {"role": "USER", "content": "User: a"},
        {"role": "system", "content": "new session"},                      # dropped before merging
        {"role": "user", "content": "User: b"},
        {"role": "user", "content": "   "},                                 # empty: dropped
        {"role": "assistant", "content": "Assistant: c"},
        {"role": "assistant", "content": "Assistant: d"},                   # merged into the reply
        {"role": "tool", "content": "result"},                              # another role
        {"role": None, "content": "orphan"},                                # no role → "unknown"
        {"role": "user", "content": "User: unanswered"},                    # dropped
    ]
    assert [u.text for u in rfmem_pair_units(messages)] == [
        "Assistant:\nAssistant: hello",
        "User:\nUser: a\n\nUser: b\n\nAssistant:\nAssistant: c\n\nAssistant: d",
        "Tool:\nresult",
        "Unknown:\norphan",
    ]
    assert [u.role for u in rfmem_pair_units(messages)] == ["assistant", None, "tool", "unknown"]


def test_turn_units(fixture_context: list[dict[str, Any]]) -> None:
    units = turn_units(fixture_context)
    assert [u.source_indices for u in units] == [(1,), (2,), (3,), (5,), (6,)]
    assert units[0].text == "User: I've been creating digital music remixes." and units[0].role == "user"
    assert units[-1].text == "Assistant: Great!" and units[-1].role == "assistant"


# ------------------------------------------------------------------------------------------------------------
# benchmark


def test_fixture_benchmark_faithful(fixtures_dir: Path) -> None:
    bench = load_personamem(fixtures_dir)
    assert bench.name == "personamem_32k"
    assert list(bench.episodes) == [CTX]  # unsliced: one episode per shared context (the leak)
    episode = bench.episodes[CTX]
    assert episode.ids == ("0", "1")
    assert (episode.memories[0].text, episode.memories[-1].text) == (UNIT_0, UNIT_1)
    assert [q.id for q in bench.queries] == [Q0, Q1]
    first, last = bench.queries
    assert (first.text, first.episode_id, first.gold, first.category, first.excluded) == (
        "I recently attended an event blending modern beats with Pacific sounds.", CTX, (), "shared_facts",
        EXCLUDED_REASON)
    assert (last.episode_id, last.category, last.scored) == (CTX, "new_ideas", False)
    assert bench.protocol == PROTOCOL
    assert list(bench.protocol.category_names.values()) == [
        "Revisit Reasons", "Track Evolution", "Latest Prefs", "Aligned Recs", "New Scenarios", "Shared Facts",
        "New Ideas"]
    reader = bench.options["reader"]
    assert reader[Q0]["correct_answer"] == "(c)" and reader[Q0]["topic"] == "musicRecommendation"
    assert reader[Q1]["options"][0] == "(a) Have you considered learning a new instrument?"
    assert reader[Q1]["all_options_raw"].startswith("['(a)")
    assert bench.options["label_map"] == "rfmem" and bench.options["label_table"]["suggest_new_ideas"] == "new_ideas"
    assert (bench.options["slice_context"], bench.options["unit"]) == (False, "pair")
    assert [f.path for f in bench.files] == ["personamem/questions_32k.csv", "personamem/shared_contexts_32k.jsonl"]
    assert bench.loader_counts["episodes"] == 1 and bench.loader_counts["memories"] == 2
    assert bench.splits[0].test_episode_ids == (CTX,)


def test_fixture_benchmark_sliced(fixtures_dir: Path) -> None:
    bench = load_personamem(fixtures_dir, slice_context=True)
    assert list(bench.episodes) == [f"{CTX}@4", f"{CTX}@5"]
    assert [m.text for m in bench.episodes[f"{CTX}@4"].memories] == [UNIT_0]
    assert [m.text for m in bench.episodes[f"{CTX}@5"].memories] == [UNIT_0]
    assert [q.episode_id for q in bench.queries] == [f"{CTX}@4", f"{CTX}@5"]


def test_sliced_trailing_user_block_dropped(fixture_copy: Path) -> None:
    rewrite_csv(fixture_copy, lambda rows: rows[1].update({"end_index_in_shared_context": "6"}))
    bench = load_personamem(fixture_copy, slice_context=True)
    assert [m.text for m in bench.episodes[f"{CTX}@6"].memories] == [UNIT_0]


def test_turn_unit_benchmark(fixtures_dir: Path) -> None:
    episode = load_personamem(fixtures_dir, unit="turn").episodes[CTX]
    assert episode.ids == ("0", "1", "2", "3", "4")
    assert [m.speaker for m in episode.memories] == ["user", "user", "assistant", "user", "assistant"]


def test_end_index_beyond_context_is_counted(fixture_copy: Path) -> None:
    rewrite_csv(fixture_copy, lambda rows: rows[1].update({"end_index_in_shared_context": "99"}))
    bench = load_personamem(fixture_copy, slice_context=True)
    assert bench.loader_counts["end_index_beyond_context"] == 1
    assert len(bench.episodes[f"{CTX}@99"]) == 2


def test_missing_contexts_file(fixture_copy: Path) -> None:
    path = fixture_copy / "personamem" / "shared_contexts_32k.jsonl"
    path.unlink()
    with pytest.raises(MissingDataError) as caught:
        load_personamem(fixture_copy)
    message = str(caught.value)
    assert caught.value.path == str(path)
    assert str(path) in message and "not in the offline data" in message
    assert "bowen-upenn/PersonaMem" in message and "make data" in message


def test_context_missing_from_file(fixture_copy: Path) -> None:
    rewrite_csv(fixture_copy, lambda rows: rows[1].update({"shared_context_id": "ctx-unknown"}))
    with pytest.raises(DataError) as caught:
        load_personamem(fixture_copy)
    assert (caught.value.record, caught.value.field) == (Q1, "shared_context_id")


def test_contexts_file_shape_errors(tmp_path: Path) -> None:
    path = tmp_path / "contexts.jsonl"
    path.write_text('{"a": [], "b": []}\n', encoding="utf-8")
    with pytest.raises(DataError, match="exactly one key"):
        read_contexts(path)
    path.write_text('{"a": [{"role": "user", "content": 3}]}\n', encoding="utf-8")
    with pytest.raises(DataError, match="content"):
        read_contexts(path)
    path.write_text('{"a": [{"role": "user", "content": "x"}]\n', encoding="utf-8")
    with pytest.raises(DataError, match="malformed JSON"):
        read_contexts(path)


def test_contexts_reader_skips_unneeded_lines_and_keeps_the_last_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "contexts.jsonl"
    path.write_text('{"a": [{"role": "user", "content": "first"}]}\n'
                    '{"b": not even json}\n'
                    '\n'
                    '{"a": [{"role": "user", "content": "second"}]}\n', encoding="utf-8")
    contexts, counts = read_contexts(path, {"a"})
    assert contexts == {"a": [{"role": "user", "content": "second"}]}
    assert counts == {"context_lines": 3, "context_duplicate_lines": 1}


# ------------------------------------------------------------------------------------------------------------
# real data (questions only: the contexts are not in the offline data)

REAL_TYPE_COUNTS = {
    "recalling_the_reasons_behind_previous_updates": 99,
    "track_full_preference_evolution": 139,
    "recalling_facts_mentioned_by_the_user": 17,
    "provide_preference_aligned_recommendations": 55,
    "generalizing_to_new_scenarios": 57,
    "recall_user_shared_facts": 129,
    "suggest_new_ideas": 93,
}


@pytest.mark.real_data
def test_real_questions_32k(real_data_dir: Path) -> None:
    if not (real_data_dir / "personamem" / "questions_32k.csv").is_file():
        pytest.skip("PersonaMem questions_32k.csv not present")
    loaded = load_personamem_questions(real_data_dir)
    questions = loaded.questions
    assert len(questions) == 589
    assert (loaded.counts["options_json"], loaded.counts["options_repr"]) == (286, 303)
    assert loaded.counts["queries_with_user_prefix"] == 64
    assert Counter(q.question_type for q in questions) == REAL_TYPE_COUNTS
    assert Counter(q.category for q in questions) == {
        "revisit_reasons": 99, "track_evolution": 139, "latest_prefs": 17, "aligned_recs": 55,
        "new_scenarios": 57, "shared_facts": 129, "new_ideas": 93}
    assert Counter(q.correct_answer for q in questions) == {"(a)": 143, "(b)": 146, "(c)": 158, "(d)": 142}
    assert all(len(q.options) == 4 for q in questions)
    assert all(q.options[i].startswith(f"({letter}) ") for q in questions for i, letter in enumerate("abcd"))
    assert len({q.shared_context_id for q in questions}) == 37
    assert (min(q.end_index for q in questions), max(q.end_index for q in questions)) == (96, 237)
    assert len({q.persona_id for q in questions}) == 20
    assert Counter(q.topic for q in questions)["movieRecommendation"] == 104
    assert questions[0].question_id == Q0 and questions[0].end_index == 182
    assert questions[-1].question_id == "d766ed84-99de-42b4-9458-2c8fc449b1f6"
    assert loaded.file.sha256 == "23f306a8d28b7ffcf133fe7dad09ade06fcb862fc7c3f19691362a5cd69409bd"


@pytest.mark.real_data
def test_real_contexts_absent_message(real_data_dir: Path) -> None:
    if (real_data_dir / "personamem" / "shared_contexts_32k.jsonl").is_file():
        pytest.skip("contexts present: nothing to check")
    if not (real_data_dir / "personamem" / "questions_32k.csv").is_file():
        pytest.skip("PersonaMem questions_32k.csv not present")
    with pytest.raises(MissingDataError, match="shared_contexts_32k.jsonl"):
        load_personamem(real_data_dir)
