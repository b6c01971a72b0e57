"""LoCoMo loader: the spec's exact-schema fixture, the bad inputs it must survive, and the real file."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from memrepro.datasets.locomo import conversation_split, load_locomo
from memrepro.errors import DataError, MissingDataError


@pytest.fixture
def fixture_root(fixtures_dir: Path) -> Path:
    return fixtures_dir


def write(tmp_path: Path, data) -> Path:
    (tmp_path / "locomo").mkdir()
    target = tmp_path / "locomo" / "locomo10.json"
    target.write_text(data if isinstance(data, str) else json.dumps(data))
    return tmp_path


def fixture_data(fixtures_dir: Path) -> list:
    return json.loads((fixtures_dir / "locomo" / "locomo10.json").read_text())


def test_fixture_queries_and_memories(fixture_root: Path) -> None:
    bench = load_locomo(fixture_root)
    episode = bench.episodes["conv-26"]
    assert [m.id for m in episode.memories] == ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1", "D2:2"]
    assert episode.memories[0].text == "Caroline: Hey Mel!"
    assert episode.memories[3].text == "Melanie: I painted that lake sunrise last year!"  # no caption
    assert episode.memories[-1].time == "1:14 pm on 25 May, 2023"
    assert [q.id for q in bench.queries] == ["conv-26::qa0", "conv-26::qa1", "conv-26::qa2", "conv-26::qa3"]
    assert bench.queries[0].gold == ("D1:3",) and bench.queries[0].category == "2"
    assert bench.queries[-1].category == "5" and bench.queries[-1].gold == ("D2:1",)  # category 5 kept
    assert bench.loader_counts["dropped_empty_evidence"] == 1
    assert bench.loader_counts["dropped_no_valid_evidence"] == 1
    assert bench.files[0].path == "locomo/locomo10.json" and len(bench.files[0].sha256) == 64


def test_normalised_rule_repairs_malformed_evidence(fixture_root: Path) -> None:
    bench = load_locomo(fixture_root, evidence_rule="normalised")
    assert bench.queries[-1].id == "conv-26::qa5"
    assert bench.queries[-1].gold == ("D1:4", "D2:1")
    assert bench.loader_counts["evidence_repaired"] == 1


def test_split_rule_is_convmemory_choose_split() -> None:
    ids = [f"conv-{i}" for i in (26, 30, 41, 42, 43, 44, 47, 48, 49, 50)]
    split = conversation_split(list(reversed(ids)), 23)  # input order must not matter
    assert split.dev_episode_ids == ("conv-48", "conv-49", "conv-44", "conv-47", "conv-42")
    assert set(split.test_episode_ids) == {"conv-26", "conv-30", "conv-41", "conv-43", "conv-50"}
    assert len(conversation_split(["a"], 7).dev_episode_ids) == 1  # max(1, ...)


def test_missing_file_names_path_env_and_source(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as info:
        load_locomo(tmp_path)
    message = str(info.value)
    assert str(tmp_path / "locomo" / "locomo10.json") in message
    assert "MEMREPRO_DATA_DIR" in message and "snap-research/locomo" in message


def test_malformed_json_names_file_and_position(tmp_path: Path) -> None:
    root = write(tmp_path, '[{"qa": [}]')
    with pytest.raises(DataError) as info:
        load_locomo(root)
    assert "locomo10.json" in str(info.value) and "line 1 column 10" in str(info.value)


def test_missing_field_names_record_and_field(tmp_path: Path, fixtures_dir: Path) -> None:
    data = fixture_data(fixtures_dir)
    del data[0]["qa"][1]["question"]
    with pytest.raises(DataError) as info:
        load_locomo(write(tmp_path, data))
    assert info.value.record == "conv-26::qa1" and info.value.field == "question"


def test_mistyped_field_names_record_and_field(tmp_path: Path, fixtures_dir: Path) -> None:
    data = fixture_data(fixtures_dir)
    data[0]["conversation"]["session_2"][0]["text"] = 7
    with pytest.raises(DataError) as info:
        load_locomo(write(tmp_path, data))
    assert info.value.record == "D2:1" and info.value.field == "text" and "expected str" in str(info.value)


def test_duplicate_memory_ids_are_an_error(tmp_path: Path, fixtures_dir: Path) -> None:
    data = fixture_data(fixtures_dir)
    data[0]["conversation"]["session_2"][1]["dia_id"] = "D2:1"
    with pytest.raises(DataError, match="duplicate memory id 'D2:1'"):
        load_locomo(write(tmp_path, data))


def test_unknown_category_is_an_error(tmp_path: Path, fixtures_dir: Path) -> None:
    data = fixture_data(fixtures_dir)
    data[0]["qa"][0]["category"] = 9
    with pytest.raises(DataError, match="unknown LoCoMo category 9"):
        load_locomo(write(tmp_path, data))


def test_orphan_session_keys_and_sessions_out_of_key_order(tmp_path: Path, fixtures_dir: Path) -> None:
    data = fixture_data(fixtures_dir)
    conversation = data[0]["conversation"]
    conversation["session_10"] = [{"speaker": "Melanie", "dia_id": "D10:1", "text": "late"}]
    conversation["session_10_date_time"] = "1:00 pm on 1 July, 2023"
    bench = load_locomo(write(tmp_path, data))
    ids = bench.episodes["conv-26"].ids
    assert ids[-1] == "D10:1" and len(ids) == 7  # numeric session order; session_3 has only a date key


@pytest.mark.real_data
def test_real_locomo_counts(real_data_dir: Path) -> None:
    bench = load_locomo(real_data_dir)
    assert len(bench.episodes) == 10
    assert sum(len(e) for e in bench.episodes.values()) == 5882
    assert bench.loader_counts["qa_total"] == 1986
    assert len(bench.queries) == 1977
    assert Counter(q.category for q in bench.queries) == {"1": 281, "2": 320, "3": 89, "4": 841, "5": 446}
    assert bench.files[0].sha256 == "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
    conv50 = {q.id: q for q in bench.queries}["conv-50::qa5"]
    assert conv50.gold == ("D4:5", "D4:5", "D5:5")  # duplicates kept (list-denominator recall)
    expected = {  # protocols.md §1.2
        7: (938, [144, 153, 44, 388, 209]),
        11: (1135, [158, 172, 50, 496, 259]),
        23: (937, [136, 147, 38, 394, 222]),
        31: (990, [120, 179, 45, 426, 220]),
        47: (955, [129, 150, 45, 407, 224]),
    }
    total = 0
    for split in bench.splits:
        queries = bench.split_queries(split)
        by_category = Counter(q.category for q in queries)
        assert (len(queries), [by_category[str(c)] for c in range(1, 6)]) == expected[split.seed]
        assert not set(split.dev_episode_ids) & set(split.test_episode_ids)
        total += len(queries)
    assert total == 4955


@pytest.mark.real_data
def test_corrected_file_gives_different_seed_counts(real_data_dir: Path) -> None:
    bench = load_locomo(real_data_dir, file="locomo/corrected/locomo10.json")
    assert [len(bench.split_queries(s)) for s in bench.splits] == [939, 1134, 938, 990, 954]
