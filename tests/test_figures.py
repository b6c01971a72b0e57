"""Sensitivity figures (RF-Mem paper Figs. 14-17) from fake complete run folders: selection, duplicates, drawing."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import mark_complete, run_record

from memrepro.runs.folder import COMPLETE
from memrepro.tables.figures import (
    figure_alpha_depth,
    figure_alpha_tau,
    figure_beam_fanout,
    figure_k_sensitivity,
    heatmap_grid,
    sweep_frame,
)
from memrepro.tables.runs import complete_runs

MPNET, MINILM = "all-mpnet-base-v2", "all-MiniLM-L6-v2"
_ids = itertools.count()


def make_run(results: Path, *, dataset: str = "personabench", retriever: str = "rfmem", encoder: str = MPNET,
             settings: dict[str, Any] | None = None, pooled: dict[str, float] | None = None,
             created: str = "2026-01-01T00:00:00+0000", dataset_options: dict[str, Any] | None = None,
             complete: bool = True) -> Path:
    """A run folder laid out like ``memrepro.runs.folder``: config.yaml, metrics.json and (by default) COMPLETE."""
    run_id = f"{next(_ids):016x}"
    folder = results / "runs" / dataset / retriever / encoder / run_id
    folder.mkdir(parents=True)
    config = {
        "dataset": {"_target_": f"fake.{dataset}", "data_dir": "data", "noise": "0.0",
                    **(dataset_options or {})},
        "retriever": {"_target_": f"fake.{retriever}", "engine": "faithful", "k": 10, "beam": 3, "fanout": 1,
                      "alpha": 0.5, "tau": 0.2, "rounds": 10, "chunk_bytes": 268435456,
                      "latency_scope": "path_only", **(settings or {})},
        "encoder": {"_target_": "fake.Encoder", "model": f"sentence-transformers/{encoder}", "path": None,
                    "query_prefix": "", "document_prefix": "", "device": "auto", "batch_size": 64},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    metrics = run_record(run_id, dataset, summary={"pooled": dict(pooled or {})}, provenance={"created": created})
    (folder / "metrics.json").write_text(json.dumps(metrics))
    if complete:
        mark_complete(folder)
    return folder


def recall(alpha: float, tau: float, shift: float = 0.0) -> float:
    """A distinct fixture value for every (alpha, tau) point."""
    return round(0.3 + alpha / 4 + tau + shift, 6)


ALPHAS, TAUS = (0.1, 0.5, 0.9), (0.15, 0.3)


@pytest.fixture()
def grid_results(tmp_path: Path) -> Path:
    """A full 3x2 alpha x tau RF-Mem sweep for two encoders on PersonaBench, plus unrelated runs."""
    results = tmp_path / "results"
    for encoder, shift in ((MPNET, 0.0), (MINILM, -0.1)):
        for alpha, tau in itertools.product(ALPHAS, TAUS):
            make_run(results, encoder=encoder, settings={"alpha": alpha, "tau": tau},
                     pooled={"pb_recall@5": recall(alpha, tau, shift), "pb_recall@10": recall(alpha, tau, shift + .1)})
    make_run(results, retriever="recollection", settings={"alpha": 0.5}, pooled={"pb_recall@5": 0.9})
    make_run(results, dataset="locomo", settings={"alpha": 0.5, "tau": 0.15}, pooled={"pb_recall@5": 0.9})
    make_run(results, settings={"alpha": 0.5, "tau": 0.15}, pooled={"pb_recall@5": 0.99}, complete=False)
    return results


def frame_of(results: Path, **kw: Any):
    args = {"dataset": "personabench", "retriever": "rfmem", "vary": ("alpha", "tau"),
            "metrics": ("pb_recall@5", "pb_recall@10")} | kw
    return sweep_frame(complete_runs(results), **args)


# ------------------------------------------------------------------------------------------------ sweep_frame


def test_sweep_frame_selects_dataset_retriever_and_complete_runs(grid_results: Path) -> None:
    frame = frame_of(grid_results)
    assert list(frame.columns) == ["encoder", "alpha", "tau", "pb_recall@5", "pb_recall@10", "folder"]
    assert len(frame) == 12  # 2 encoders x 3 alphas x 2 taus; recollection, locomo and incomplete runs left out
    assert list(frame["encoder"]) == [MINILM] * 6 + [MPNET] * 6  # sorted by encoder, then alpha, then tau
    mpnet = frame[frame["encoder"] == MPNET]
    assert list(zip(mpnet["alpha"], mpnet["tau"])) == list(itertools.product(ALPHAS, TAUS))
    for _, row in frame.iterrows():
        shift = 0.0 if row["encoder"] == MPNET else -0.1
        assert row["pb_recall@5"] == recall(row["alpha"], row["tau"], shift)
        assert row["pb_recall@10"] == recall(row["alpha"], row["tau"], shift + 0.1)
        assert f"/personabench/rfmem/{row['encoder']}/" in row["folder"]
    assert frame.attrs["dataset"] == "personabench" and frame.attrs["retriever"] == "rfmem"
    assert frame.attrs["dropped"] == []


def test_where_filters_with_tolerance(grid_results: Path) -> None:
    frame = frame_of(grid_results, vary=("alpha",), where={"tau": 0.30000000001})  # within 1e-9 of 0.3
    assert len(frame) == 6 and list(frame.columns) == ["encoder", "alpha", "pb_recall@5", "pb_recall@10", "folder"]
    assert list(frame.loc[frame["encoder"] == MPNET, "pb_recall@5"]) == [recall(a, 0.3) for a in ALPHAS]
    assert frame.attrs["where"] == {"tau": 0.30000000001}
    assert len(frame_of(grid_results, vary=("alpha",), where={"tau": 0.3 + 1e-6})) == 0  # outside the tolerance
    assert len(frame_of(grid_results, vary=("alpha",), where={"tau": 0.3, "beam": 4})) == 0


def test_nothing_matching_gives_an_empty_frame_with_the_columns(grid_results: Path) -> None:
    frame = frame_of(grid_results, dataset="longmemeval_s")
    assert frame.empty and list(frame.columns) == ["encoder", "alpha", "tau", "pb_recall@5", "pb_recall@10",
                                                   "folder"]


def test_duplicates_prefer_faithful_then_newest(tmp_path: Path) -> None:
    results = tmp_path / "results"
    point = {"alpha": 0.5, "tau": 0.2}
    make_run(results, settings={**point, "engine": "compiled"}, pooled={"pb_recall@5": 0.1},
             created="2026-12-31T00:00:00+0000")
    make_run(results, settings={**point, "engine": "faithful"}, pooled={"pb_recall@5": 0.2},
             created="2026-01-01T00:00:00+0000")
    newest = make_run(results, settings={**point, "engine": "faithful"}, pooled={"pb_recall@5": 0.3},
                      created="2026-06-01T00:00:00+0000")
    make_run(results, settings={"alpha": 0.5 + 1e-12, "tau": 0.2, "engine": "compiled"},  # same point (tolerance)
             pooled={"pb_recall@5": 0.4}, created="2027-01-01T00:00:00+0000")
    frame = frame_of(results, metrics=("pb_recall@5",))
    assert len(frame) == 1
    assert frame.loc[0, "pb_recall@5"] == 0.3 and frame.loc[0, "folder"] == str(newest)
    assert len(frame.attrs["dropped"]) == 3

    # Without a faithful run the newest compiled one wins.
    results2 = tmp_path / "results2"
    make_run(results2, settings={**point, "engine": "compiled"}, pooled={"pb_recall@5": 0.1},
             created="2026-01-01T00:00:00+0000")
    make_run(results2, settings={**point, "engine": "compiled"}, pooled={"pb_recall@5": 0.5},
             created="2026-01-02T00:00:00+0000")
    assert frame_of(results2, metrics=("pb_recall@5",)).loc[0, "pb_recall@5"] == 0.5


def test_duplicates_are_kept_apart_per_encoder(tmp_path: Path) -> None:
    results = tmp_path / "results"
    make_run(results, encoder=MPNET, pooled={"pb_recall@5": 0.1})
    make_run(results, encoder=MINILM, pooled={"pb_recall@5": 0.2})
    frame = frame_of(results, metrics=("pb_recall@5",))
    assert list(zip(frame["encoder"], frame["pb_recall@5"])) == [(MINILM, 0.2), (MPNET, 0.1)]


def test_mixed_fixed_settings_raise_naming_the_keys(grid_results: Path) -> None:
    make_run(grid_results, settings={"alpha": 0.1, "tau": 0.15, "beam": 4, "k": 5}, pooled={"pb_recall@5": 0.5})
    with pytest.raises(ValueError, match=r"differ in \['beam', 'k'\]") as error:
        frame_of(grid_results)
    assert "beam: 3, 4" in str(error.value) and "k: 5, 10" in str(error.value)
    # Pinning the odd setting (or varying it) selects one consistent group again.
    assert len(frame_of(grid_results, where={"beam": 3})) == 12
    assert len(frame_of(grid_results, vary=("alpha", "tau", "beam", "k"))) == 13


def test_ignored_keys_do_not_split_but_dataset_options_do(tmp_path: Path) -> None:
    results = tmp_path / "results"
    make_run(results, settings={"alpha": 0.1, "chunk_bytes": 1, "latency_scope": "full"}, pooled={"pb_recall@5": .1})
    make_run(results, settings={"alpha": 0.9}, pooled={"pb_recall@5": 0.9})
    assert list(frame_of(results, vary=("alpha",), metrics=("pb_recall@5",))["pb_recall@5"]) == [0.1, 0.9]
    make_run(results, settings={"alpha": 0.5}, pooled={"pb_recall@5": 0.5}, dataset_options={"noise": "0.5"})
    with pytest.raises(ValueError, match=r"dataset\.noise"):
        frame_of(results, vary=("alpha",), metrics=("pb_recall@5",))
    assert len(frame_of(results, vary=("alpha",), metrics=("pb_recall@5",), where={"dataset.noise": "0.0"})) == 2


def test_the_published_gold_named_or_absent_is_one_setting(tmp_path: Path) -> None:
    """Runs written before ``dataset.gold_labels`` existed lack it; ``original`` (the default) is the same data, so
    they stay points of one sweep; the corrected gold is another setting."""
    results = tmp_path / "results"
    make_run(results, settings={"alpha": 0.1}, pooled={"pb_recall@5": 0.1})
    make_run(results, settings={"alpha": 0.9}, pooled={"pb_recall@5": 0.9},
             dataset_options={"gold_labels": "original"})
    assert list(frame_of(results, vary=("alpha",), metrics=("pb_recall@5",))["pb_recall@5"]) == [0.1, 0.9]
    make_run(results, settings={"alpha": 0.5}, pooled={"pb_recall@5": 0.5},
             dataset_options={"gold_labels": "corrected"})
    with pytest.raises(ValueError, match=r"dataset\.gold_labels"):
        frame_of(results, vary=("alpha",), metrics=("pb_recall@5",))


def test_unknown_metric_or_setting_is_an_error(grid_results: Path) -> None:
    with pytest.raises(ValueError, match="pb_recall@50"):
        frame_of(grid_results, metrics=("pb_recall@50",))
    with pytest.raises(ValueError, match="no setting"):
        frame_of(grid_results, vary=("alpha", "gamma"))


# ------------------------------------------------------------------------------------------------ figures


def assert_png_pdf(paths: list[Path], stem: Path) -> None:
    assert paths == [stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".pdf")]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[0].stat().st_size > 5000
    assert paths[1].read_bytes()[:5] == b"%PDF-" and paths[1].stat().st_size > 5000
    assert not [p for p in stem.parent.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_heatmap_grid_is_the_fixture_matrix(grid_results: Path) -> None:
    frame = frame_of(grid_results)
    grid = heatmap_grid(frame, "pb_recall@10", encoder=MINILM)
    assert list(grid.columns) == list(ALPHAS) and list(grid.index) == list(TAUS)
    expected = [[recall(a, t, 0.0) for a in ALPHAS] for t in TAUS]  # MiniLM: shift -0.1, @10: +0.1
    np.testing.assert_array_equal(grid.to_numpy(), np.array(expected))
    with pytest.raises(ValueError, match="encoders"):
        heatmap_grid(frame, "pb_recall@10")  # two encoders, none named


def test_figure_alpha_tau_writes_deterministic_png_and_pdf(grid_results: Path, tmp_path: Path) -> None:
    frame = frame_of(grid_results)
    stem = tmp_path / "figs" / "fig14_personabench"
    paths = figure_alpha_tau(frame, ("pb_recall@5", "pb_recall@10"), stem, "Figure 14 (ours)")
    assert_png_pdf(paths, stem)
    first = [p.read_bytes() for p in paths]
    assert b"CreationDate" not in first[1] and b"Software" not in first[0]
    again = figure_alpha_tau(frame, ("pb_recall@5", "pb_recall@10"), stem, "Figure 14 (ours)")
    assert [p.read_bytes() for p in again] == first  # re-rendering unchanged results: byte-identical PNG and PDF


def test_heatmap_with_a_missing_point_shows_the_gap(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for alpha, tau in itertools.product(ALPHAS, TAUS):
        if (alpha, tau) != (0.5, 0.3):  # this point was never run
            make_run(results, settings={"alpha": alpha, "tau": tau}, pooled={"pb_recall@5": recall(alpha, tau)})
    frame = frame_of(results, metrics=("pb_recall@5",))
    assert len(frame) == 5
    grid = heatmap_grid(frame, "pb_recall@5")
    assert math.isnan(grid.loc[0.3, 0.5])
    assert grid.loc[0.15, 0.5] == recall(0.5, 0.15) and grid.loc[0.3, 0.9] == recall(0.9, 0.3)
    assert int(grid.isna().to_numpy().sum()) == 1
    stem = tmp_path / "gap"
    assert_png_pdf(figure_alpha_tau(frame, ("pb_recall@5",), stem, "gap"), stem)


def lme_frame(results: Path, vary: tuple[str, ...]):
    return sweep_frame(complete_runs(results), dataset="longmemeval_s", retriever="recollection", vary=vary,
                       metrics=("recall_all@5", "recall_all@10", "recall_all@50"))


def test_figure_beam_fanout(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for beam, fanout in itertools.product((2, 4), (1, 2, 3)):
        if (beam, fanout) != (4, 3):
            make_run(results, dataset="longmemeval_s", retriever="recollection", encoder=MINILM,
                     settings={"beam": beam, "fanout": fanout},
                     pooled={f"recall_all@{n}": n / 100 + beam / 10 + fanout / 1000 for n in (5, 10, 50)})
    frame = lme_frame(results, ("beam", "fanout"))
    assert len(frame) == 5
    row = frame[(frame["beam"] == 4) & (frame["fanout"] == 2)].iloc[0]
    assert row["recall_all@50"] == pytest.approx(0.5 + 0.4 + 0.002)
    stem = tmp_path / "fig15"
    paths = figure_beam_fanout(frame, ("recall_all@5", "recall_all@10", "recall_all@50"), stem, "Figure 15")
    assert_png_pdf(paths, stem)
    first = [p.read_bytes() for p in paths]
    assert [p.read_bytes() for p in figure_beam_fanout(frame, ("recall_all@5", "recall_all@10", "recall_all@50"),
                                                        stem, "Figure 15")] == first


def test_figure_alpha_depth(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for alpha, k in itertools.product((0.2, 0.8), (10, 50)):
        make_run(results, dataset="longmemeval_s", retriever="recollection", encoder=MINILM,
                 settings={"alpha": alpha, "k": k, "rounds": k},
                 pooled={f"recall_all@{n}": alpha / 2 + n / 1000 + k / 10000 for n in (5, 10, 50)})
    with pytest.raises(ValueError, match=r"\['rounds'\]"):  # rounds follows k here: it must be declared
        lme_frame(results, ("alpha", "k"))
    frame = lme_frame(results, ("alpha", "k", "rounds"))
    assert list(zip(frame["alpha"], frame["k"])) == [(0.2, 10), (0.2, 50), (0.8, 10), (0.8, 50)]
    assert list(frame["recall_all@10"]) == pytest.approx([0.1 + 0.01 + 0.001, 0.1 + 0.01 + 0.005,
                                                          0.4 + 0.01 + 0.001, 0.4 + 0.01 + 0.005])
    stem = tmp_path / "fig16"
    assert_png_pdf(figure_alpha_depth(frame, ("recall_all@5", "recall_all@10", "recall_all@50"), stem, "Fig 16"),
                   stem)
    # One fixed depth (pinned with `where`, no k column) gives one panel per encoder.
    pinned = sweep_frame(complete_runs(results), dataset="longmemeval_s", retriever="recollection",
                         vary=("alpha",), metrics=("recall_all@5",), where={"k": 50, "rounds": 50})
    assert list(pinned["recall_all@5"]) == pytest.approx([0.1 + 0.005 + 0.005, 0.4 + 0.005 + 0.005])
    stem2 = tmp_path / "fig16_k50"
    assert_png_pdf(figure_alpha_depth(pinned, ("recall_all@5",), stem2, "Fig 16, K=50"), stem2)


def test_figure_k_sensitivity(tmp_path: Path) -> None:
    results = tmp_path / "results"
    values = {"familiarity": {5: 0.30, 10: 0.40}, "recollection": {5: 0.35, 10: 0.45, 20: 0.5},
              "rfmem": {5: 0.38, 10: 0.48}}
    for method, by_k in values.items():
        for k, value in by_k.items():
            make_run(results, retriever=method, settings={"k": k}, pooled={"pb_recall": value})
    frames = {m: sweep_frame(complete_runs(results), dataset="personabench", retriever=m, vary=("k",),
                             metrics=("pb_recall",)) for m in values}
    for method, frame in frames.items():
        assert dict(zip(frame["k"], frame["pb_recall"])) == values[method]
    stem = tmp_path / "fig17"
    paths = figure_k_sensitivity(frames, "pb_recall", stem, "Figure 17 (ours)")
    assert_png_pdf(paths, stem)
    first = [p.read_bytes() for p in paths]
    assert [p.read_bytes() for p in figure_k_sensitivity(frames, "pb_recall", stem, "Figure 17 (ours)")] == first
    with pytest.raises(ValueError, match="empty"):
        figure_k_sensitivity({**frames, "dense": frames["rfmem"].iloc[0:0]}, "pb_recall", stem, "x")
    with pytest.raises(ValueError, match="no method"):
        figure_k_sensitivity({}, "pb_recall", stem, "x")


def test_empty_frames_raise(grid_results: Path, tmp_path: Path) -> None:
    empty = frame_of(grid_results, dataset="nowhere")
    stem = tmp_path / "never"
    for draw in (figure_alpha_tau, figure_beam_fanout, figure_alpha_depth):
        with pytest.raises(ValueError, match="empty"):
            draw(empty, ("pb_recall@5",), stem, "x")
    assert not stem.parent.joinpath("never.png").exists()


def test_a_figure_with_a_wrong_frame_says_which_column_is_missing(grid_results: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="beam"):
        figure_beam_fanout(frame_of(grid_results), ("pb_recall@5",), tmp_path / "x", "x")


def test_a_lone_preset_run_is_not_drawn_as_a_sweep() -> None:
    import pandas as pd

    from memrepro.tables.rfmem_figures import _swept

    frame = pd.DataFrame({"encoder": ["minilm"] * 3 + ["mpnet"], "alpha": [0.1, 0.5, 0.9, 0.8],
                          "recall_all@5": [0.8, 0.81, 0.79, 0.76]})
    frame.attrs["dataset"] = "longmemeval_s"
    kept = _swept(frame, ("alpha",))
    assert list(kept["encoder"].unique()) == ["minilm"] and kept.attrs == frame.attrs
    assert _swept(frame.iloc[:0], ("alpha",)).empty
