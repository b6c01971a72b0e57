"""RecollectionRetriever and RFMemRetriever behind the Retriever protocol: routing, the Familiarity path's
dense top-K, traces, latency scopes, engine selection, Hydra presets, and the CLI end to end on fixtures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from memrepro.runs.folder import read_queries
from memrepro.retrievers.base import RetrievalInput
from memrepro.retrievers.rfmem.params import FamiliarityParams, GateParams, RecollectionParams
from memrepro.retrievers.rfmem.recollection import recollect_faithful
from memrepro.retrievers.rfmem.retriever import RecollectionRetriever, RFMemRetriever
from memrepro.search import build_index, search
from memrepro.types import Episode, Memory
from tests.test_cli import FAST, memrepro, only_run


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def world():
    """Two episodes of random unit vectors (one smaller than K) and queries against each."""
    rng = np.random.default_rng(7)
    sizes = {"big": 40, "small": 3}
    episodes = {e: Episode(e, tuple(Memory(f"{e}-{i}", f"text {i}", i) for i in range(n))) for e, n in sizes.items()}
    vectors = {e: unit_rows(rng.normal(size=(n, 6))) for e, n in sizes.items()}
    index = build_index(episodes, vectors)
    queries = [RetrievalInput(f"q{i}", f"question {i}", "big" if i % 3 else "small") for i in range(12)]
    query_vectors = unit_rows(rng.normal(size=(len(queries), 6)))
    # make q1 sit on a memory: its probe mean is high → Familiarity
    query_vectors[1] = vectors["big"][5]
    return episodes, vectors, index, queries, query_vectors


RFMEM_PB = dict(gate=dict(probe_k=5, probe_floor=0.3, probe_floor_ignored=True, lam=30.0, eps=0.0, theta_high=0.5,
                          theta_low=0.0, tau=0.30),
                recollection=dict(k=5, beam=3, fanout=1, alpha=0.9, rounds=10, mmr_lambda=0.9, min_sim=0.0,
                                  after_empty_round="stop"),
                familiarity=dict(min_sim=0.0))


def rfmem(engine: str = "faithful", latency_scope: str = "path_only", **blocks: dict) -> RFMemRetriever:
    """RF-Mem at the Table 2 R@5 settings, with ``blocks`` (``gate={...}``) changing fields of a block."""
    merged = {name: {**RFMEM_PB[name], **blocks.get(name, {})} for name in RFMEM_PB}
    return RFMemRetriever(gate=GateParams(**merged["gate"]), recollection=RecollectionParams(**merged["recollection"]),
                          familiarity=FamiliarityParams(**merged["familiarity"]), engine=engine,
                          latency_scope=latency_scope)


def recollection(engine: str = "faithful", **fields) -> RecollectionRetriever:
    return RecollectionRetriever(RecollectionParams(**fields), engine=engine)


def test_recollection_retriever_matches_the_reference_per_query(world) -> None:
    _, vectors, index, queries, query_vectors = world
    retriever = recollection(k=5, beam=3, fanout=2, alpha=0.5, mmr_lambda=0.9, min_sim=0.0)
    assert retriever.name == "recollection" and retriever.order == "native"
    results = retriever.retrieve(queries, query_vectors, index)
    for query, vector, got in zip(queries, query_vectors, results):
        expected = recollect_faithful(vector, vectors[query.episode_id], retriever.recollection)
        assert list(got.hits.positions) == expected.positions
        assert got.hits.scores.dtype == np.float32 and np.all(np.isfinite(got.hits.scores))
        assert got.trace["path"] == "recollection" and got.trace["rounds"] >= 1
        assert got.trace["items_per_round"] and got.trace["path_ms"] >= 0
    assert len(results[0].hits.positions) <= 3  # the small episode: K larger than the pool


def test_rfmem_routes_each_query_and_runs_the_chosen_path(world) -> None:
    _, vectors, index, queries, query_vectors = world
    retriever = rfmem()
    assert retriever.name == "rfmem" and retriever.order == "native"
    results = retriever.retrieve(queries, query_vectors, index)
    paths = [r.trace["path"] for r in results]
    assert paths[1] == "familiarity" and "recollection" in paths
    for query, vector, got in zip(queries, query_vectors, results):
        trace = got.trace
        assert {"path", "rule", "probe_mean", "probe_entropy", "probe_kept", "rounds", "items_per_round",
                "path_ms", "gate_ms", "latency_ms"} <= set(trace)
        assert trace["latency_ms"] == trace["path_ms"]  # path_only
        assert np.all(np.isfinite(got.hits.scores))
        if trace["path"] == "familiarity":
            dense = search(index, vector[None, :], [query.episode_id], k=5, min_sim=0.0)[0]
            assert list(got.hits.positions) == list(dense.positions)
            assert list(got.hits.scores) == list(dense.scores)
            assert trace["rounds"] is None
        else:
            expected = recollect_faithful(vector, vectors[query.episode_id], retriever.recollection)
            assert list(got.hits.positions) == expected.positions
            assert trace["rounds"] == expected.trace["rounds"]
    # the 3-memory episode pads the 5-slot probe (floor ignored): its mean is hugely negative → Recollection
    small = [r.trace for q, r in zip(queries, results) if q.episode_id == "small"]
    assert all(t["path"] == "recollection" and t["rule"] == "mean_low" and t["probe_kept"] == 5 for t in small)


def test_gate_thresholds_route_everything_one_way(world) -> None:
    _, _, index, queries, query_vectors = world
    always_familiar = rfmem(gate=dict(theta_high=-1.0, theta_low=-1.0, probe_floor_ignored=False,
                                      probe_floor=None))  # no padding: every mean is >= -1
    assert {r.trace["path"] for r in always_familiar.retrieve(queries, query_vectors, index)} == {"familiarity"}
    always_recollect = rfmem(gate=dict(theta_high=1.0, theta_low=1.0, probe_floor_ignored=False,
                                       probe_floor=None))  # no probe mean reaches 1 (its cosines differ)
    traces = [r.trace for r in always_recollect.retrieve(queries, query_vectors, index)]
    assert {(t["path"], t["rule"]) for t in traces} == {("recollection", "mean_low")}


def test_gate_plus_path_latency_scope(world) -> None:
    _, _, index, queries, query_vectors = world
    retriever = rfmem(latency_scope="gate_plus_path")
    for got in retriever.retrieve(queries[:4], query_vectors[:4], index):
        assert got.trace["latency_ms"] == pytest.approx(got.trace["gate_ms"] + got.trace["path_ms"])
    assert retriever.describe()["latency_scope"] == "gate_plus_path"


def test_familiarity_k_and_floor_are_separate_from_recollection(world) -> None:
    _, _, index, queries, query_vectors = world
    retriever = rfmem(gate=dict(theta_high=-1.0, theta_low=-1.0, probe_floor_ignored=False),
                      familiarity=dict(k=2, min_sim=0.99))
    got = retriever.retrieve(queries[1:2], query_vectors[1:2], index)[0]
    assert list(got.hits.positions) == [5]  # q1 is memory 5 itself; nothing else passes 0.99
    assert retriever.describe()["familiarity"] == {"k": 2, "min_sim": 0.99}


def test_empty_query_batch(world) -> None:
    _, _, index, _, _ = world
    assert rfmem().retrieve([], np.zeros((0, 6), np.float32), index) == []
    assert RecollectionRetriever().retrieve([], np.zeros((0, 6), np.float32), index) == []


def test_bad_choices_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="engine"):
        RFMemRetriever(engine="fast")
    with pytest.raises(ValueError, match="latency_scope"):
        RecollectionRetriever(latency_scope="everything")
    with pytest.raises(ValueError, match="after_empty_round"):
        recollection(after_empty_round="pause")
    with pytest.raises(ValueError, match="probe_k"):
        RFMemRetriever(gate=GateParams(probe_k=0))
    with pytest.raises(ValueError, match=r"familiarity\.k"):
        RFMemRetriever(familiarity=FamiliarityParams(k=0))
    with pytest.raises(TypeError, match="RecollectionParams"):
        RecollectionRetriever(recollection=0.3)  # type: ignore[arg-type]


# -- Hydra presets ---------------------------------------------------------------------------------------

PRESETS = ["recollection", "rfmem", "rfmem_personabench", "rfmem_personabench_table2_r5",
           "rfmem_personabench_table2_r10", "recollection_personabench_table2_r5",
           "recollection_personabench_table2_r10", "recollection_personabench", "rfmem_longmemeval",
           "recollection_longmemeval", "rfmem_personamem", "recollection_personamem"]


def _compose(*overrides: str):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    import memrepro.config  # noqa: F401  (registers the schemas)
    from memrepro.experiments import register_presets

    register_presets()
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        return instantiate(compose("config", overrides=list(overrides)).retriever)


def _compose_config(*overrides: str):
    from hydra import compose, initialize_config_dir

    import memrepro.config  # noqa: F401  (registers the schemas)
    from memrepro.experiments import register_presets

    register_presets()
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_and_accepts_overrides(preset: str) -> None:
    retriever = _compose(f"retriever={preset}", "retriever.recollection.alpha=0.3", "retriever.recollection.k=7")
    assert retriever.recollection.alpha == 0.3 and retriever.recollection.k == 7
    assert retriever.engine == "faithful"
    if isinstance(retriever, RFMemRetriever):
        tau = _compose(f"retriever={preset}", "retriever.gate.tau=0.123").gate.tau
        assert tau == 0.123


@pytest.mark.parametrize("name", ["recollection", "rfmem"])
def test_python_api_and_cli_defaults_agree(name: str) -> None:
    """``RecollectionRetriever()`` / ``RFMemRetriever()`` and ``retriever=recollection`` / ``retriever=rfmem`` are
    one algorithm: every parameter, engine and latency setting equal (one source of defaults, params.py)."""
    api = {"recollection": RecollectionRetriever, "rfmem": RFMemRetriever}[name]()
    assert _compose(f"retriever={name}").describe() == api.describe()


def test_rfmem_presets_reuse_the_recollection_block() -> None:
    """An RF-Mem preset's Recollection path is its Recollection-only preset's, whatever the gate does."""
    for rfmem_preset, recollection_preset in [
            ("rfmem_personabench_table2_r5", "recollection_personabench_table2_r5"),
            ("rfmem_personabench_table2_r10", "recollection_personabench_table2_r10"),
            ("rfmem_personabench", "recollection_personabench"), ("rfmem_personamem", "recollection_personamem")]:
        assert _compose(f"retriever={rfmem_preset}").recollection == \
            _compose(f"retriever={recollection_preset}").recollection, rfmem_preset


@pytest.mark.parametrize("variant,switch", [
    ("dbscan", {"clustering": "dbscan"}), ("spectral", {"clustering": "spectral"}), ("gated", {"mixing": "gated"}),
    ("graph_bfs", {"expansion": "graph_bfs"}), ("full_exploration", {"full_exploration": True})])
def test_variant_presets_change_only_their_switch(variant: str, switch: dict) -> None:
    """A D.8-D.9 preset is the Table 2 R@5 preset with its own switch on: the same as setting the switch there."""
    preset = _compose(f"retriever=recollection_personabench_{variant}").recollection
    overridden = _compose("retriever=recollection_personabench_table2_r5",
                          *(f"retriever.recollection.{k}={str(v).lower()}" for k, v in switch.items())).recollection
    assert preset == overridden


def test_run_sh_probe_follows_the_retrieval_k() -> None:
    """PersonaBench's run.sh probes with the retrieval K: overriding K moves the probe with it."""
    assert _compose("retriever=rfmem_personabench", "retriever.recollection.k=5").gate.probe_k == 5
    assert _compose("retriever=rfmem_personabench", "retriever.recollection.k=7").gate.probe_k == 7


def test_experiment_config_selects_dataset_encoder_and_retriever() -> None:
    cfg = _compose_config("+experiment=rfmem_table2_r5")
    assert cfg.dataset._target_.endswith("load_personabench") and cfg.encoder.model.endswith("all-mpnet-base-v2")
    retriever = _compose("+experiment=rfmem_table2_r5")
    assert retriever.describe() == _compose("retriever=rfmem_personabench_table2_r5").describe()


# -- CLI end to end on the fixtures ----------------------------------------------------------------------

@pytest.mark.parametrize("dataset,retriever,extra", [
    ("personabench", "rfmem_personabench", ("dataset.communities=[community_0]", "retriever.recollection.k=5",
                                            "dataset.allow_unverified=true")),  # fixtures at pinned paths
    ("locomo", "recollection", ("dataset.file=locomo/locomo10_two_conversations.json", "retriever.recollection.min_sim=0.0")),
])
def test_cli_end_to_end(dataset: str, retriever: str, extra: tuple[str, ...], tmp_path: Path,
                        fixtures_dir: Path) -> None:
    out = memrepro("run", f"dataset={dataset}", f"retriever={retriever}", *extra, *FAST, tmp=tmp_path,
                   data_dir=fixtures_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    folder = only_run(tmp_path)
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["retriever"]["name"] == retriever.split("_")[0]
    assert metrics["retriever"]["engine"] == "faithful"
    rows = read_queries(folder)
    assert rows and all(row["trace"]["path"] in ("familiarity", "recollection") for row in rows)
    for row in rows:
        ids = [m for m, _ in row["top"]]
        assert len(ids) == len(set(ids)) == row["n_returned"] <= metrics["retriever"]["recollection"]["k"]
        assert all(math.isfinite(s) for _, s in row["top"])
    if metrics["counts"]["n_scored"]:
        assert set(metrics["summary"]["pooled"]) == set(metrics["metric_names"])
    # routing counts (RF-Mem Table 17) and per-path mean path time are summarised from the traces
    routing = metrics["routing"]
    assert sum(v["n"] for v in routing.values()) == len(rows)
    assert all(v["mean_path_ms"] >= 0 for v in routing.values())


def test_compiled_engine_matches_the_faithful_rankings(world) -> None:
    """engine=compiled (numba): same rankings and traces as the reference here, timings aside; D.9 full
    exploration included, the D.8 constructions refused."""
    _, vectors, index, queries, query_vectors = world
    for make in (lambda engine: recollection(engine, k=5, beam=3, fanout=2, alpha=0.5, mmr_lambda=0.9,
                                             min_sim=0.0),
                 lambda engine: recollection(engine, k=5, beam=3, fanout=2, alpha=0.5, mmr_lambda=0.9, min_sim=0.0,
                                             full_exploration=True),
                 lambda engine: rfmem(engine)):
        faithful = make("faithful").retrieve(queries, query_vectors, index)
        other = make("compiled").retrieve(queries, query_vectors, index)
        assert [list(r.hits.positions) for r in other] == [list(r.hits.positions) for r in faithful]
        # probe statistics are computed from each engine's own inner products (last-bit differences); the rest of
        # the trace (path, rule, K′, rounds, items) must be equal
        inexact = ("path_ms", "gate_ms", "latency_ms", "probe_mean", "probe_entropy")
        for a, b in zip(other, faithful):
            np.testing.assert_allclose(a.hits.scores, b.hits.scores, atol=1e-5)
            assert {k: v for k, v in a.trace.items() if k not in inexact} == \
                {k: v for k, v in b.trace.items() if k not in inexact}
            for key in ("probe_mean", "probe_entropy"):
                assert (a.trace.get(key) is None) == (b.trace.get(key) is None)
                if a.trace.get(key) is not None:
                    assert a.trace[key] == pytest.approx(b.trace[key], rel=1e-5, abs=1e-6)
    with pytest.raises(ValueError, match="needs engine='faithful'"):
        recollection("compiled", clustering="dbscan")
