"""ConvMemory v1: the official model's shape and initial weights, the feature set, the merge, equivalence with the
official package (``convmemory==0.7.0``, a test extra), the training loss, resumable training, and the resolution
order of trained models (explicit path → published → recipe hash → trained on demand)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from memrepro.datasets.locomo import load_locomo
from memrepro.models.convmemory_v1 import (PARAMETERS_MPNET, ConvMemoryV1, QueryInputs, V1Architecture,
                                          candidate_local_windows, ce_lite_scores, features, fuse, lexical_features,
                                          router_scores, sliding_windows, zscore_np)
from memrepro.models.encoder import FakeEncoder
from memrepro.retrievers.base import RetrievalInput
from memrepro.retrievers.convmemory_v1 import ConvMemoryV1Retriever, v1_rerank
from memrepro.search import Hits, build_index, search
from memrepro.artifacts.per_seed import CheckpointMismatchError, MissingArtifactError, TrainingContext
from memrepro.training.state import PARTIAL
from memrepro.training.convmemory_v1 import (TrainItem, V1Models, V1Recipe, item_loss, load_v1, save_v1,
                                             train_v1)

TWO = "locomo/locomo10_two_conversations.json"


def official(name: str = "convmemory", minversion: str = "0.7.0") -> None:
    """The package-equivalence tests need the official package (the `test` extra); they skip cleanly without it."""
    import importlib.metadata

    pytest.importorskip(name)
    if importlib.metadata.version(name) != minversion:
        pytest.skip(f"{name}=={minversion} expected, found {importlib.metadata.version(name)}")


def _random_inputs(n: int = 137, d: int = 768, pool: int = 50, seed: int = 0) -> QueryInputs:
    rng = np.random.default_rng(seed)
    memories = rng.normal(size=(n, d)).astype(np.float32)
    memories /= np.linalg.norm(memories, axis=1, keepdims=True)
    query = rng.normal(size=d).astype(np.float32)
    query /= np.linalg.norm(query)
    words = "alpha beta gamma camping trip dog the a of melanie caroline painted sunset lake".split()
    texts = [f"Caroline: {' '.join(rng.choice(words, 8))}" for _ in range(n)]
    raw = memories @ query
    return QueryInputs("When did Melanie paint the camping dog?", query, memories, texts,
                       np.argsort(-raw, kind="stable")[:pool], raw)


def _perturbed_model(d: int = 768, seed: int = 5) -> ConvMemoryV1:
    """Untrained gates make the window score nearly the base cosine; perturbing every weight exercises all paths."""
    torch.manual_seed(23)
    model = ConvMemoryV1(V1Architecture(dim=d))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return model.eval()


def test_parameter_count_is_the_official_one() -> None:
    model = ConvMemoryV1(V1Architecture(dim=768))
    assert sum(p.numel() for p in model.parameters()) == PARAMETERS_MPNET == 3_648_118
    assert model.scorer.input_dim == 768 * 4 + 4 + 5  # vectors, 4 scalars, router + 4 lexical


def test_windows_match_the_official_definitions() -> None:
    assert sliding_windows(7, 5).tolist() == [[0, 1, 2, 3, 4], [1, 2, 3, 4, 5], [2, 3, 4, 5, 6]]
    assert sliding_windows(3, 5).tolist() == [[0, 1, 2]]
    # centred on each candidate, clipped at both ends, de-duplicated in candidate order
    assert candidate_local_windows(10, np.array([0, 9, 5, 1, 6]), 5).tolist() == [
        [0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [3, 4, 5, 6, 7], [4, 5, 6, 7, 8]]


def test_lexical_features_golden() -> None:
    # query tokens (lower-case, alphanumeric, > 1 char, stopwords out): {melanie, paint, dog}; bigrams 2
    rows = lexical_features("When did Melanie paint the dog?", ["Melanie: I paint my dog", "Caroline: hi", ""])
    assert np.allclose(rows[0], [3 / 3, 3 / 4, 1 / 2, np.log1p(3) / np.log1p(3)])  # "my" is not a stopword
    assert np.allclose(rows[1], [0, 0, 0, 0]) and np.allclose(rows[2], [0, 0, 0, 0])


def test_router_and_zscore_follow_the_official_formulas() -> None:
    inputs = _random_inputs(n=70, d=16)
    scores = router_scores(inputs.memory_vectors, inputs.query_vector, np.array([0, 33, 69]), 32)
    block = inputs.memory_vectors[32:64].mean(axis=0)
    assert scores[1] == pytest.approx(float(block @ inputs.query_vector / (np.linalg.norm(block) + 1e-8)), rel=1e-5)
    assert np.allclose(zscore_np(np.array([1.0, 1.0])), [0.0, 0.0])  # std < 1e-8: centred only
    z = zscore_np(np.array([1.0, 2.0, 3.0]))
    assert z.dtype == np.float32 and np.allclose(z, (np.array([1, 2, 3]) - 2) / np.std([1, 2, 3]))


def test_feature_columns_in_official_order() -> None:
    model = _perturbed_model(d=16)
    inputs = _random_inputs(n=40, d=16, pool=12)
    rows = features(model, inputs, sliding_windows(40, 5)).detach().numpy()
    q, m = inputs.query_vector, inputs.memory_vectors[inputs.candidates]
    assert rows.shape == (12, 16 * 4 + 4 + 5)
    assert np.allclose(rows[:, :16], q) and np.allclose(rows[:, 16:32], m)
    assert np.allclose(rows[:, 32:48], q * m) and np.allclose(rows[:, 48:64], np.abs(q - m))
    assert np.allclose(rows[:, 64], zscore_np(inputs.raw_scores[inputs.candidates]), atol=1e-6)
    assert np.allclose(rows[:, 66], np.linspace(0, 1, 12))  # raw rank
    assert np.allclose(rows[:, 67], inputs.candidates / 39)  # chronological position
    assert np.allclose(rows[:, 69:], lexical_features(inputs.query_text,
                                                      [inputs.memory_texts[i] for i in inputs.candidates]))


def test_merge_is_a_full_permutation_with_the_dense_tail() -> None:
    model = _perturbed_model(d=16)
    inputs = _random_inputs(n=40, d=16, pool=12)
    order = np.argsort(-inputs.raw_scores, kind="stable")
    dense = Hits(order, inputs.raw_scores[order].astype(np.float32))
    hits = v1_rerank(model, inputs, dense, "candidate_local")
    assert sorted(hits.positions.tolist()) == list(range(40))
    assert set(hits.positions[:12].tolist()) == set(order[:12].tolist())
    assert hits.positions[12:].tolist() == order[12:].tolist()
    fused = fuse(inputs.raw_scores[inputs.candidates], ce_lite_scores(model, inputs, "candidate_local"), 0.025)
    assert np.all(np.diff(hits.scores[:12]) <= 0) and np.allclose(np.sort(fused)[::-1], hits.scores[:12])


@pytest.mark.parametrize("mode", ["full", "candidate_local"])
def test_equivalence_with_the_official_package(mode: str) -> None:
    """Same weights, same inputs: the official ``ConvMemoryReranker`` gives the same scores and the same order."""
    official()
    from convmemory.models import build_default_components
    from convmemory.reranker import ConvMemoryReranker, RerankConfig

    ours = _perturbed_model()
    conv_model, scorer = build_default_components(768)
    conv_model.load_state_dict(ours.conv_model.state_dict())
    scorer.load_state_dict(ours.scorer.state_dict())
    inputs = _random_inputs()
    ids = [f"D1:{i}" for i in range(len(inputs.memory_vectors))]
    reranker = ConvMemoryReranker(conv_model.eval(), scorer.eval(), RerankConfig(
        window_size=5, stride=1, candidate_top_n=50, raw_weight=0.025, dca_router_block_size=32,
        lexical_features=True, window_mode=mode))
    theirs = reranker.rerank_embeddings(inputs.query_vector, inputs.memory_vectors, ids, inputs.memory_texts,
                                        query=inputs.query_text, candidate_indices=inputs.candidates)
    by_id = {r.memory_id: r.score for r in theirs}
    ours_scores = ce_lite_scores(ours, inputs, mode)
    assert np.abs(ours_scores - np.array([by_id[ids[i]] for i in inputs.candidates])).max() < 1e-5
    order = np.argsort(-inputs.raw_scores, kind="stable")
    hits = v1_rerank(ours, inputs, Hits(order, inputs.raw_scores[order]), mode)
    assert [ids[i] for i in hits.positions] == [r.memory_id for r in theirs]  # pool order and the raw-order tail


def test_same_initial_weights_as_the_official_builder() -> None:
    official()
    from convmemory.models import build_default_components

    torch.manual_seed(23)
    ours = ConvMemoryV1(V1Architecture(dim=768))
    torch.manual_seed(23)
    conv_model, scorer = build_default_components(768)
    for a, b in zip([*ours.conv_model.state_dict().values(), *ours.scorer.state_dict().values()],
                    [*conv_model.state_dict().values(), *scorer.state_dict().values()]):
        assert torch.equal(a, b)


def test_saved_checkpoint_loads_in_the_official_package(tmp_path: Path) -> None:
    official()
    from convmemory.api import ConvMemory

    model = _perturbed_model()
    save_v1(model, tmp_path / "ckpt", {"note": "test"}, embedding_model="sentence-transformers/all-mpnet-base-v2")
    package = ConvMemory.from_pretrained(tmp_path / "ckpt", embedding_model=False)
    inputs = _random_inputs()
    ids = [f"D1:{i}" for i in range(len(inputs.memory_vectors))]
    theirs = package.reranker.rerank_embeddings(inputs.query_vector, inputs.memory_vectors, ids,
                                                inputs.memory_texts, query=inputs.query_text,
                                                candidate_indices=inputs.candidates)
    loaded, _ = load_v1(tmp_path / "ckpt")
    order = np.argsort(-inputs.raw_scores, kind="stable")
    hits = v1_rerank(loaded, inputs, Hits(order, inputs.raw_scores[order]), "candidate_local")
    assert [ids[i] for i in hits.positions] == [r.memory_id for r in theirs]


def test_item_loss_golden() -> None:
    """The official loss on a hand-checkable case: pairwise over teacher top/bottom, gold listwise, first rank."""
    model = _perturbed_model(d=16)
    inputs = _random_inputs(n=30, d=16, pool=8)
    ids = tuple(f"D1:{i}" for i in range(30))
    gold = (ids[inputs.candidates[2]], ids[inputs.candidates[5]], ids[inputs.candidates[2]], "D9:9")
    item = TrainItem("q", inputs, gold, ids)
    teacher = np.linspace(1.0, 0.0, 8).astype(np.float32)
    recipe = V1Recipe(pairwise_top_k=2, pairwise_bottom_k=3)
    s = model.scorer(features(model, inputs, sliding_windows(30, 5))).detach().double().numpy()
    t = teacher.astype(np.float64)
    top, bottom = [0, 1], [7, 6, 5]
    pair = np.mean([np.logaddexp(0, -(s[i] - s[j])) / (1 + np.exp(-(t[i] - t[j]) / 0.1))
                    for i in top for j in bottom])
    lse = np.log(np.exp(s).sum())
    gold_term = lse - np.log(np.exp(s[[2, 5, 2]]).sum())  # duplicates count, unknown ids drop
    first = lse - s[2]  # best gold by teacher score
    expected = pair + 0.35 * gold_term + 0.05 * first
    assert float(item_loss(model, item, teacher, recipe).detach()) == pytest.approx(expected, rel=1e-5)
    gold_only = V1Recipe(pairwise_top_k=2, pairwise_bottom_k=3, pairwise_weight=0.0)
    assert float(item_loss(model, item, teacher, gold_only).detach()) == pytest.approx(expected - pair, rel=1e-5)


def test_recipe_validation() -> None:
    with pytest.raises(ValueError, match=r"V1Recipe.teacher='oracle' is not allowed: expected one of"):
        V1Recipe(teacher="oracle")
    with pytest.raises(ValueError, match="needs teacher_model"):
        V1Recipe(teacher="cross_encoder")
    with pytest.raises(ValueError, match=r"V1Recipe.gold_weight=-1 is not allowed"):
        V1Recipe(gold_weight=-1)
    with pytest.raises(ValueError, match=r"V1Recipe.pairwise_top_k=0 is not allowed"):
        V1Recipe(pairwise_top_k=0)


# ---------------------------------------------------------------------------------------------------------------
# training on demand, resumable, and the resolution order (tiny fixture, fake 16-d encoder: seconds)


@pytest.fixture()
def context(fixtures_dir: Path, tmp_path: Path) -> TrainingContext:
    bench = load_locomo(fixtures_dir, file=TWO, seeds=(7,))
    encoder = FakeEncoder(dim=16, seed=0)
    vectors = {e: encoder.encode([m.text for m in ep.memories], "document") for e, ep in bench.episodes.items()}
    qv = dict(zip([q.id for q in bench.queries], encoder.encode([q.text for q in bench.queries], "query")))
    index = build_index(bench.episodes, vectors)
    return TrainingContext(bench, index, qv, encoder.identity, tmp_path / "models", progress=False,
                           checkpoint_every_s=0.0)


def _weights(model: ConvMemoryV1) -> list[torch.Tensor]:
    return [t.clone() for t in model.official_state()["scorer"].values()]


def test_training_on_demand_then_found_by_recipe_hash(context: TrainingContext, capsys) -> None:
    split = context.benchmark.splits[0]
    models = V1Models()
    models.bind(context)
    first = models(split)
    out = capsys.readouterr().out
    assert "training convmemory_v1 for split seed7" in out and "questions, about" in out
    folder = models.folder(split)
    info = json.loads((folder / "memrepro_training.json").read_text())
    queries = {q.id: q.episode_id for q in context.benchmark.queries}
    assert info["train_query_ids"] and all(queries[q] in split.dev_episode_ids for q in info["train_query_ids"])
    assert info["steps"] == len(info["train_query_ids"]) and info["identity"] == models.identity()
    again = V1Models()
    again.bind(context)
    second = again(split)  # found, not retrained
    assert "training" not in capsys.readouterr().out
    assert all(torch.equal(a, b) for a, b in zip(_weights(first), _weights(second)))
    assert again.resolved[split.name] == f"recipe {models.identity_hash()}"


class KilledTraining:
    """One split's v1 training run twice: whole into ``clean``, and killed at its second step into ``killed``
    (what a Ctrl-C or an OOM kill leaves: the partial state and no model)."""

    def __init__(self, context: TrainingContext, tmp_path: Path) -> None:
        self.split = context.benchmark.splits[0]
        self.models = V1Models()
        self.models.bind(context)
        self.items = self.models.items(self.split)
        assert len(self.items) >= 2
        self.clean, self.killed = tmp_path / "a" / "seed7", tmp_path / "b" / "seed7"
        self.train(self.clean)
        calls = {"n": 0}

        def teacher_that_dies(item: TrainItem) -> np.ndarray:
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt
            return item.inputs.raw_scores[item.inputs.candidates]

        with pytest.raises(KeyboardInterrupt):
            self.train(self.killed, teacher_that_dies)
        self.state = self.killed.parent / f"seed7{PARTIAL}"

    def train(self, folder: Path, teacher=None) -> dict:
        models = self.models
        return train_v1(self.items, teacher or models.teacher_for(self.split), folder, models.recipe, 7,
                        models.architecture(), {"identity": models.identity()}, progress=False)

    def same_weights(self) -> bool:
        a, _ = load_v1(self.clean)
        b, _ = load_v1(self.killed)
        return all(torch.allclose(x, y, atol=1e-6) for x, y in zip(_weights(a), _weights(b)))


def test_training_resumes_after_an_interruption(context: TrainingContext, tmp_path: Path) -> None:
    run = KilledTraining(context, tmp_path)
    assert run.state.is_file() and not run.killed.exists()
    log = run.train(run.killed)
    assert log["steps"] == len(run.items) and not run.state.exists()
    assert run.same_weights()


def test_resolution_order_and_refusals(context: TrainingContext, tmp_path: Path) -> None:
    split = context.benchmark.splits[0]
    trained = V1Models()
    trained.bind(context)
    trained(split)
    folder = trained.folder(split)
    # 1. an explicit path wins and is verified against the run's recipe
    explicit = V1Models(path=str(folder).replace("seed7", "seed{seed}"))
    explicit.bind(context)
    explicit(split)
    assert explicit.resolved[split.name].startswith("path ")
    other = V1Models(recipe={"gold_weight": 0.5}, path=str(folder))
    other.bind(context)
    with pytest.raises(CheckpointMismatchError) as info:
        other(split)
    assert str(folder) in str(info.value) and "recipe" in str(info.value) and "0.35" in str(info.value)
    with pytest.raises(MissingArtifactError, match="no checkpoint at"):
        missing = V1Models(path=str(tmp_path / "nowhere"))
        missing.bind(context)
        missing(split)
    # 3./4. no checkpoint for this recipe and training on demand off: refused, naming where it looked
    off = V1Models(recipe={"epochs": 2}, train_on_demand=False)
    off.bind(context)
    with pytest.raises(MissingArtifactError, match="python -m memrepro train"):
        off(split)


def test_retriever_runs_per_split_and_never_sees_gold(context: TrainingContext) -> None:
    retriever = ConvMemoryV1Retriever(V1Models(), window_mode="candidate_local")
    retriever.bind_training(context)
    split = context.benchmark.splits[0]
    retriever.for_split(split)
    queries = list(context.benchmark.split_queries(split))
    inputs = [RetrievalInput(q.id, q.text, q.episode_id) for q in queries]
    vectors = np.stack([context.query_vectors[q.id] for q in queries])
    results = retriever.retrieve(inputs, vectors, context.index)
    dense = search(context.index, vectors, [q.episode_id for q in queries])
    for result, d, q in zip(results, dense, queries):
        n = len(context.benchmark.episodes[q.episode_id])
        assert sorted(result.hits.positions.tolist()) == list(range(n))  # a full permutation
        assert result.trace["pool"] == min(500, n) and d.positions.size == n
    assert retriever.describe()["recipe_hash"] == retriever.models.identity_hash()


def test_a_cross_encoder_trained_on_v1_has_one_identity_for_every_split(context: TrainingContext) -> None:
    """The cascade's cross-encoder is keyed by v1's recipe hash, not by which splits v1 has resolved so far."""
    from memrepro.training.cross_encoder import TrainedCrossEncoders

    stage = ConvMemoryV1Retriever(V1Models())
    ce = TrainedCrossEncoders(record_stage=stage)
    ce.bind(context)
    before = ce.identity_hash()
    stage.for_split(context.benchmark.splits[0])  # trains v1 for the split: describe() now names it
    assert "resolved" in stage.describe() and ce.identity_hash() == before
    assert ce.identity()["recipe"]["record_stage"]["model"] == f"recipe:{stage.models.identity_hash()}"


def test_a_damaged_checkpoint_is_refused_with_its_path(context: TrainingContext) -> None:
    split = context.benchmark.splits[0]
    models = V1Models()
    models.bind(context)
    models(split)
    weights = models.folder(split) / "model.pt"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the weights
    weights.write_bytes(bytes(data))
    again = V1Models()
    again.bind(context)
    with pytest.raises(CheckpointMismatchError, match="damaged checkpoint") as info:
        again(split)
    assert str(models.folder(split)) in str(info.value)


def test_a_damaged_training_state_is_not_resumed_from(context: TrainingContext, tmp_path: Path, capsys) -> None:
    """One flipped byte in the saved state: training restarts and ends where an uninterrupted run ends."""
    run = KilledTraining(context, tmp_path)
    data = bytearray(run.state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    run.state.write_bytes(bytes(data))
    run.train(run.killed)
    assert f"ignoring {run.state}: damaged training state" in capsys.readouterr().out
    assert run.same_weights()


def test_the_v1_training_forecast_counts_a_cross_encoder_teacher() -> None:
    """The teacher scores every question's pool (500 pairs): the forecast said 5 min for what took 73."""
    teacher = {"teacher": "cross_encoder", "teacher_model": "some/cross-encoder"}
    assert V1Models().seconds_per_unit() == V1Models.SECONDS_PER_UNIT
    assert V1Models(recipe=teacher).seconds_per_unit() == V1Models.SECONDS_PER_UNIT + 4.0
    assert V1Models(recipe=teacher, pool=250).seconds_per_unit() == V1Models.SECONDS_PER_UNIT + 2.0


def test_the_training_forecast_knows_a_no_text_arm_is_cheap(context: TrainingContext) -> None:
    """The one line printed before on-demand training: a no-text arm's pairs are a few tokens (measured ~6× faster)."""
    from memrepro.training.cross_encoder import TrainedCrossEncoders

    split = context.benchmark.splits[0]
    full, scalar = TrainedCrossEncoders(), TrainedCrossEncoders()
    scalar.use_arm("scalar_only")
    for ce in (full, scalar):
        ce.bind(context)
    assert scalar.seconds_per_unit() * 5 < full.seconds_per_unit()
    records = len(context.dev_queries(split, None))
    import torch

    threads = torch.get_num_threads()
    try:
        for n in (1, 2):  # the one-thread figure spread over torch's threads
            torch.set_num_threads(n)
            assert full.estimate(split) == (f"{records} records, about {max(1, round(records * 1.5 / n / 60))} min "
                                            f"on {n} CPU thread{'s' if n > 1 else ''}")
    finally:
        torch.set_num_threads(threads)
