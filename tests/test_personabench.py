"""PersonaBench loader and metrics: the spec fixture (§6.7), every gotcha (§6.6), hand-computed metric values
(protocols §3.2) and the real-data counts (RF-Mem Table 9) when the data is present."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrepro.datasets.personabench import (PROTOCOL, category_key, load_personabench, noise_label, segment_text,
                                            strip_keys)
from memrepro.errors import DataError, MissingDataError
from memrepro.evaluation.personabench_metrics import (gold_combinations, personabench_ndcg, personabench_recall,
                                                      personabench_scores)

COMMUNITY = Path("personabench/eval_data/eval_data_v1/synthetic_data/community_0")
FIXTURE_EPISODE = "community_0/Jennifer Moran"


def load_fixture(root: Path, **kwargs: Any):
    return load_personabench(root, communities=("community_0",), **kwargs)


@pytest.fixture()
def fixture_copy(fixtures_dir: Path, tmp_path: Path) -> Path:
    """A writable copy of the fixture data root, for the gotcha tests that edit one file."""
    shutil.copytree(fixtures_dir / "personabench", tmp_path / "personabench")
    return tmp_path


def edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    result = change(data)
    path.write_text(json.dumps(data if result is None else result), encoding="utf-8")


def rename_person(root: Path, new_name: str) -> None:
    """Rename Jennifer Moran in every file of the fixture community."""
    files = [root / COMMUNITY / "eval_info" / "eval_info_all.json",
             *sorted((root / COMMUNITY / "private_data" / "noise_0.0").glob("*_all.json"))]
    for path in files:
        path.write_text(path.read_text(encoding="utf-8").replace("Jennifer Moran", new_name), encoding="utf-8")


# ------------------------------------------------------------------------------------------------------------
# fixture


def test_fixture_episode_and_memories(fixtures_dir: Path) -> None:
    bench = load_fixture(fixtures_dir)
    assert list(bench.episodes) == [FIXTURE_EPISODE]
    episode = bench.episodes[FIXTURE_EPISODE]
    assert episode.ids == ("000000000000", "000000000001", "000000000002")  # conversation, user-AI, purchase
    first, last = episode.memories[0], episode.memories[-1]
    assert first.text == ('{"time":"2024/Oct/14/09:14 AM","target_name":"Samuel Mills","conversation":'
                          '[{"role":"Jennifer Moran","content":"Hi Samuel! Yoga class was great today, friend."},'
                          '{"role":"Samuel Mills","content":"Glad to hear!"}]}')
    assert (first.position, first.session, first.time) == (0, "conversation---session---1", "2024/Oct/14/09:14 AM")
    assert last.text == ('{"time":"2024/Oct/20/08:17 AM","purchase_history":[{"title":"Harvard University Alumni '
                         'Hoodie","description":"Official alumni apparel.","brand":"Harvard","categories":'
                         '["Clothing","Alumni"]}]}')
    assert (last.position, last.session, last.time) == (2, "purchase_history---session---1", "2024/Oct/20/08:17 AM")
    assert episode.memories[1].text.startswith('{"time":"2024/Oct/16/09:25 AM","user_ai_interaction":[')


def test_fixture_queries(fixtures_dir: Path) -> None:
    bench = load_fixture(fixtures_dir)
    assert [q.id for q in bench.queries] == ["000000000", "000000001", "000000002", "000000003"]
    assert [q.category for q in bench.queries] == ["Basic_information_easy", "Preference_hard", "Social_easy",
                                                   "Subjective_easy"]
    first, last = bench.queries[0], bench.queries[-1]
    assert (first.text, first.episode_id, first.gold, first.gold_alternatives, first.excluded) == (
        "Where did I go to school?", FIXTURE_EPISODE, ("000000000002",), (("000000000002",),), None)
    assert last.excluded == "subjective" and not last.scored
    assert last.gold == ("000000000001",)  # Subjective is still retrieved, with its gold kept
    assert [q.scored for q in bench.queries] == [True, True, True, False]


def test_fixture_combination_example(fixtures_dir: Path) -> None:
    query = load_fixture(fixtures_dir).queries[1]
    assert query.id == "000000001"
    assert query.gold_alternatives == (("000000000000", "000000000001"), ("000000000001",))
    assert query.gold == ("000000000000", "000000000001")
    assert gold_combinations(query.gold_alternatives) == [frozenset({"000000000000", "000000000001"}),
                                                          frozenset({"000000000001"})]


def test_fixture_bookkeeping(fixtures_dir: Path) -> None:
    bench = load_fixture(fixtures_dir)
    counts = bench.loader_counts
    assert (counts["queries"], counts["scored"]) == (4, 3)
    assert (counts["excluded_subjective"], counts["excluded_no_gold"]) == (1, 0)
    assert (counts["conversation_segments"], counts["user_ai_segments"], counts["purchase_segments"]) == (1, 1, 1)
    assert [s.name for s in bench.splits] == ["all"] and bench.splits[0].test_episode_ids == (FIXTURE_EPISODE,)
    assert bench.protocol == PROTOCOL
    assert list(bench.protocol.category_names.values()) == ["Basic Info", "Social Info", "Pref Easy", "Pref Hard"]
    assert bench.options["noise"] == "0.0"
    assert len(bench.files) == 5
    assert all(len(f.sha256) == 64 and f.bytes > 0 for f in bench.files)
    assert bench.files[0].path == str(COMMUNITY / "eval_info" / "eval_info_all.json")


# ------------------------------------------------------------------------------------------------------------
# gotchas


@pytest.mark.parametrize("noise, label", [(0.0, "0.0"), ("0.0", "0.0"), (0, "0.0"), (0.3, "0.3"), ("0.7", "0.7")])
def test_noise_labels(noise: float | str, label: str) -> None:
    assert noise_label(noise) == label


@pytest.mark.parametrize("noise", [0.4, "0.30", "0", 1.0, 0.31, True, None])
def test_noise_rejected(noise: Any) -> None:
    with pytest.raises(ValueError, match="0.0, 0.3, 0.5, 0.7"):
        noise_label(noise)


def test_noise_level_without_files_names_the_path(fixtures_dir: Path) -> None:
    with pytest.raises(MissingDataError, match="qa_gt_context_all_noise_0.3.json"):
        load_fixture(fixtures_dir, noise=0.3)


def test_wrong_noise_pairing_is_refused(fixture_copy: Path) -> None:
    """A gold file from another noise level names ids the corpus does not have (noise renumbers segments)."""
    gold_path = fixture_copy / COMMUNITY / "eval_info" / "qa_gt_context_all_noise_0.0.json"
    edit_json(gold_path, lambda gold: gold[1]["segment_id"].update({"cycling": ["000000000317"]}))
    with pytest.raises(DataError) as caught:
        load_fixture(fixture_copy)
    assert caught.value.record == "000000001"
    assert "000000000317" in str(caught.value) and "same noise level" in str(caught.value)


def test_person_name_with_spaces_and_dots(fixture_copy: Path) -> None:
    rename_person(fixture_copy, "Mr. Nicholas Richmond MD")
    bench = load_fixture(fixture_copy)
    assert list(bench.episodes) == ["community_0/Mr. Nicholas Richmond MD"]
    assert len(bench.episodes["community_0/Mr. Nicholas Richmond MD"]) == 3
    assert {q.episode_id for q in bench.queries} == {"community_0/Mr. Nicholas Richmond MD"}


def test_int_and_list_answers_load(fixture_copy: Path) -> None:
    edit_json(fixture_copy / COMMUNITY / "eval_info" / "eval_info_all.json",
              lambda people: people[0]["Eval_Info"]["qa"][0].update({"answer": 39}))
    assert len(load_fixture(fixture_copy).queries) == 4


def test_unknown_question_type(fixture_copy: Path) -> None:
    edit_json(fixture_copy / COMMUNITY / "eval_info" / "eval_info_all.json",
              lambda people: people[0]["Eval_Info"]["qa"][2].update({"type": "Opinion"}))
    with pytest.raises(DataError) as caught:
        load_fixture(fixture_copy)
    assert (caught.value.record, caught.value.field) == ("000000002", "type")


def test_unknown_difficulty(fixture_copy: Path) -> None:
    edit_json(fixture_copy / COMMUNITY / "eval_info" / "eval_info_all.json",
              lambda people: people[0]["Eval_Info"]["qa"][1].update({"difficulty": "medium"}))
    with pytest.raises(DataError, match="difficulty"):
        load_fixture(fixture_copy)


def test_query_without_gold_entry_is_excluded(fixture_copy: Path) -> None:
    edit_json(fixture_copy / COMMUNITY / "eval_info" / "qa_gt_context_all_noise_0.0.json", lambda gold: gold[1:])
    bench = load_fixture(fixture_copy)
    query = bench.queries[0]
    assert (query.id, query.excluded, query.gold, query.gold_alternatives) == ("000000000", "no_gold", (), None)
    assert bench.loader_counts["excluded_no_gold"] == 1 and bench.loader_counts["scored"] == 2


def test_malformed_gold_alternatives(fixture_copy: Path) -> None:
    edit_json(fixture_copy / COMMUNITY / "eval_info" / "qa_gt_context_all_noise_0.0.json",
              lambda gold: gold[0]["segment_id"].update({"Harvard University": "000000000002"}))
    with pytest.raises(DataError) as caught:
        load_fixture(fixture_copy)
    assert caught.value.record == "000000000"


def test_person_without_documents_is_refused(fixture_copy: Path) -> None:
    """Only the first 3 people have documents; asking for a 4th fails loudly instead of giving an empty pool."""
    def add_person(people: list[Any]) -> None:
        people.append({"Name": "Elena Fischer", "Eval_Info": {"qa": []}})
    edit_json(fixture_copy / COMMUNITY / "eval_info" / "eval_info_all.json", add_person)
    assert len(load_fixture(fixture_copy, people_per_community=1).episodes) == 1
    with pytest.raises(DataError, match="Elena Fischer"):
        load_fixture(fixture_copy, people_per_community=2)


def test_missing_community(fixtures_dir: Path) -> None:
    with pytest.raises(MissingDataError, match="community_1"):
        load_personabench(fixtures_dir)


def test_unit_text_strips_keys_at_every_level_and_escapes_non_ascii() -> None:
    segment = {"session": "s", "time": "t", "segment_id": "1",
               "conversation": [{"role": "A", "content": "caf\u00e9 \u2019", "session": "nested",
                                 "meta": {"segment_id": "x", "keep": [{"session": 1, "b": 2}]}}]}
    assert strip_keys(segment) == {"time": "t", "conversation": [{"role": "A", "content": "caf\u00e9 \u2019",
                                                                  "meta": {"keep": [{"b": 2}]}}]}
    assert segment_text(segment) == ('{"time":"t","conversation":[{"role":"A","content":"caf\\u00e9 \\u2019",'
                                     '"meta":{"keep":[{"b":2}]}}]}')


@pytest.mark.parametrize("question_type, difficulty, key", [
    ("Basic information", "easy", "Basic_information_easy"),
    ("Basic information", "hard", "Basic_information_easy"),
    ("Social", "hard", "Social_easy"),
    ("Preference", "easy", "Preference_easy"),
    ("Preference", "hard", "Preference_hard"),
    ("Subjective", "hard", "Subjective_easy"),
])
def test_category_key_rule(question_type: str, difficulty: str, key: str) -> None:
    assert category_key(question_type, difficulty) == key


# ------------------------------------------------------------------------------------------------------------
# metrics (hand-computed)

FIXTURE_001 = (("000000000000", "000000000001"), ("000000000001",))
L2, L3, L4, L5 = (1 / math.log2(n) for n in (3, 4, 5, 6))  # gains at 0-based positions 1..4; position 0 gains 1


def test_metric_fixture_example() -> None:
    # combination {0, 1}: recall 1/2; combination {1}: recall 1, NDCG 1 (hit at the only position)
    assert personabench_scores(["000000000001"], FIXTURE_001) == (1.0, 1.0)
    assert personabench_recall(["000000000000"], FIXTURE_001) == 0.5
    assert personabench_ndcg(["000000000000"], FIXTURE_001) == 1.0  # ideal over min(2, k=1) = 1 position


def test_metric_two_hits_late() -> None:
    returned = ["x", "000000000000", "000000000001"]
    # {0, 1}: DCG = L2 + L3, ideal over min(2, 3) = 2 positions = 1 + L2; {1}: DCG = L3, ideal 1
    assert personabench_recall(returned, FIXTURE_001) == 1.0
    assert personabench_ndcg(returned, FIXTURE_001) == pytest.approx((L2 + L3) / (1 + L2))
    assert personabench_ndcg(returned, FIXTURE_001) == pytest.approx(0.693426, abs=1e-6)


def test_metric_k_is_the_returned_length() -> None:
    gold = (("a",), ("b",), ("c",))
    assert personabench_scores(["a"], gold) == (pytest.approx(1 / 3), 1.0)  # ideal over min(3, 1) = 1 position
    assert personabench_scores(["z", "a"], gold) == (pytest.approx(1 / 3), pytest.approx(L2 / (1 + L2)))
    assert personabench_scores(["a", "b", "c", "z", "y"], gold) == (1.0, 1.0)


def test_metric_empty_and_degenerate() -> None:
    assert personabench_scores([], FIXTURE_001) == (0.0, 0.0)
    assert personabench_scores(["x", "y"], FIXTURE_001) == (0.0, 0.0)
    assert personabench_scores(["a"], ()) == (0.0, 0.0)  # no parts: one empty combination, scored 0
    assert personabench_scores(["a"], (("a",), ())) == (0.0, 0.0)  # a part with no alternative: no combination


def test_metric_repeated_returned_id_is_faithful() -> None:
    """The official DCG walks the list as is: a repeated gold id adds gain twice (frozen rankings never repeat)."""
    assert personabench_scores(["a", "a"], (("a",),)) == (1.0, pytest.approx(1 + L2))


def test_metric_accepts_the_raw_gold_mapping() -> None:
    raw = {"yoga": ["000000000000", "000000000001"], "cycling": ["000000000001"]}
    returned = ["x", "000000000000", "000000000001"]
    assert personabench_scores(returned, raw) == personabench_scores(returned, FIXTURE_001)


def test_metric_guards() -> None:
    with pytest.raises(ValueError, match="combinations"):
        personabench_recall(["a"], [[f"{p}-{i}" for i in range(10)] for p in range(6)])  # 10^6 combinations
    assert personabench_recall(["0-0"], [[f"{p}-{i}" for i in range(4)] for p in range(5)]) == 0.2  # spec max: 1,024
    with pytest.raises(TypeError):
        personabench_recall(["a"], ["ab", "c"])  # type: ignore[list-item]


def reference_scores(returned: list[str], parts: list[list[str]]) -> tuple[float, float]:
    """Direct transcription of RF-Mem ``calculate_retrieval_scores`` for one query."""
    best_recall = best_ndcg = 0.0
    k = len(returned)
    for combination in itertools.product(*parts):
        gold = set(combination)
        recall = len(set(returned[:k]) & gold) / len(gold) if gold else 0.0
        dcg = sum(1 / math.log2(i + 2) for i, s in enumerate(returned[:k]) if s in gold)
        idcg = sum(1 / math.log2(i + 2) for i in range(min(len(gold), k)))
        best_recall = max(best_recall, recall)
        best_ndcg = max(best_ndcg, dcg / idcg if idcg > 0 else 0.0)
    return best_recall, best_ndcg


ids = st.sampled_from(list("abcdefgh"))


@settings(max_examples=300, deadline=None)
@given(returned=st.lists(ids, max_size=8, unique=True),
       parts=st.lists(st.lists(ids, min_size=1, max_size=4), min_size=1, max_size=5))
def test_metric_matches_reference(returned: list[str], parts: list[list[str]]) -> None:
    recall, ndcg = personabench_scores(returned, parts)
    ref_recall, ref_ndcg = reference_scores(returned, parts)
    assert recall == pytest.approx(ref_recall, abs=1e-12)
    assert ndcg == pytest.approx(ref_ndcg, abs=1e-12)


# ------------------------------------------------------------------------------------------------------------
# real data (RF-Mem Table 9; datasets.md §6.4-6.5)

REAL_PEOPLE = {  # episode id: (queries, corpus)
    "community_0/Jennifer Moran": (48, 110),
    "community_0/David Hess": (43, 90),
    "community_0/Nicholas Torres": (42, 64),
    "community_1/Kelly Simon": (46, 85),
    "community_1/Mrs. Nicole Mcdonald DDS": (44, 84),
    "community_1/Mr. Nicholas Richmond MD": (40, 94),
}


@pytest.mark.real_data
def test_real_noise_0(real_data_dir: Path) -> None:
    if not (real_data_dir / "personabench").is_dir():
        pytest.skip("PersonaBench data not present")
    bench = load_personabench(real_data_dir)
    assert list(bench.episodes) == list(REAL_PEOPLE)
    assert {e: len(bench.episodes[e]) for e in bench.episodes} == {e: c for e, (_, c) in REAL_PEOPLE.items()}
    assert dict(Counter(q.episode_id for q in bench.queries)) == {e: n for e, (n, _) in REAL_PEOPLE.items()}
    assert sum(len(e) for e in bench.episodes.values()) == 527
    counts = bench.loader_counts
    assert (counts["conversation_segments"], counts["user_ai_segments"], counts["purchase_segments"]) == (422, 92, 13)
    assert (len(bench.queries), counts["scored"], counts["excluded_subjective"], counts["excluded_no_gold"]) == (
        263, 230, 33, 0)
    assert Counter(q.category for q in bench.queries if q.scored) == {
        "Basic_information_easy": 110, "Social_easy": 53, "Preference_easy": 26, "Preference_hard": 41}
    assert Counter(q.category for q in bench.queries if not q.scored) == {"Subjective_easy": 33}
    assert all(q.gold and q.gold_alternatives for q in bench.queries)
    assert max(math.prod(len(p) for p in q.gold_alternatives) for q in bench.queries) <= 1024
    assert len(bench.files) == 10
    first = bench.queries[0]
    assert (first.id, first.text, first.episode_id) == ("000000000", "Where did I go to school?",
                                                        "community_0/Jennifer Moran")
    assert bench.queries[-1].episode_id == "community_1/Mr. Nicholas Richmond MD"
    memory = bench.episodes["community_0/Jennifer Moran"].memories[0]
    assert memory.id == "000000000000"
    assert memory.text.startswith('{"time":"2024/Oct/14/09:14 AM","target_name":"Samuel Mills"')


@pytest.mark.real_data
@pytest.mark.parametrize("noise, total", [(0.3, 751), (0.5, 1054), (0.7, 1916)])
def test_real_noise_levels(real_data_dir: Path, noise: float, total: int) -> None:
    if not (real_data_dir / "personabench").is_dir():
        pytest.skip("PersonaBench data not present")
    bench = load_personabench(real_data_dir, noise=noise)
    assert sum(len(e) for e in bench.episodes.values()) == total
    assert (len(bench.queries), bench.loader_counts["scored"]) == (263, 230)
    assert bench.options["noise"] == f"{noise:.1f}"


@pytest.mark.real_data
def test_real_every_perfect_ranking_scores_one(real_data_dir: Path) -> None:
    """Returning the best combination's ids first must give recall 1 and NDCG 1 for every scored query."""
    if not (real_data_dir / "personabench").is_dir():
        pytest.skip("PersonaBench data not present")
    bench = load_personabench(real_data_dir)
    for query in bench.queries:
        combination = list(dict.fromkeys(part[0] for part in query.gold_alternatives))
        assert personabench_scores(combination, query.gold_alternatives) == (1.0, 1.0)
