"""The ConvMemory tables from declared conditions: each row is an entry of the experiment list, shown with the run
whose composed settings equal the entry's; deltas, significance marks, cost ratios and reproduction cells."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import composed_run_config, mark_complete, run_record

from memrepro.experiments import load_experiments
from memrepro.runs.identity import algorithm_versions
from memrepro.tables.conditions import stale_runs, table_rows
from memrepro.tables.convmemory import (FULLPOOL_REASON, ROW_NAMES, _short, ablation_table, calibration_table,
                                         cost_notes, main_table, recipe_notes, reproduction_cells, row_label, select)
from memrepro.tables.naming import MAX_LABEL
from memrepro.tables.runs import Run, complete_runs

M = "convmemory.headline_locomo.methods."
LOCOMO = ["dataset=locomo", "encoder=mpnet"]
UNITS = [f"q{i}" for i in range(60)]
BASE = [0.5 if i % 2 else 0.25 for i in range(60)]
V1_MRR = [v + 0.25 for v in BASE]  # +0.25 on every question
V1_LABEL = {"model": "per-seed retrained, dense-cosine teacher", "recipe_hash": "abc"}
CE_LABEL = {"cross_encoder": "seed47 (fine-tuned by memrepro from MiniLM)"}
CONDITIONS = [
    {"name": "dense", "overrides": [*LOCOMO, "retriever=dense"],
     "paper": [{"table": "convmemory_locomo", "reference": M + "raw_dense_mpnet", "label": "raw dense (MPNet)",
                "missing": "not run"},
               {"table": "convmemory_calibration", "reference": "convmemory_v1_seed23.methods.raw_dense",
                "label": "raw dense", "missing": "not run"}]},
    {"name": "v1", "overrides": [*LOCOMO, "retriever=convmemory_v1"],
     "paper": {"table": "convmemory_locomo", "reference": M + "convmemory_v1"}},
    {"name": "v1_ce_teacher", "overrides": [*LOCOMO, "retriever=convmemory_v1",
                                            "retriever.model.recipe.teacher=cross_encoder"],
     "paper": {"table": "convmemory_locomo", "reference": M + "convmemory_v1"}},  # never run: no row
    {"name": "cascade_v1", "overrides": [*LOCOMO, "retriever=cascade", "cross_encoder=trained"],
     "paper": {"table": "convmemory_locomo", "reference": M + "convmemory_v1_plus_v2"}},
    {"name": "cascade_dense", "overrides": [*LOCOMO, "retriever=cascade", "first_stage=dense",
                                            "cross_encoder=trained"],
     "paper": [{"table": "convmemory_locomo"}, {"table": "convmemory_ablation"}]},
    {"name": "arms_dense", "sweep": True,
     "overrides": [*LOCOMO, "retriever=cascade", "first_stage=dense", "cross_encoder=trained",
                   "arm=scalar_only,no_memory_text"],
     "paper": {"table": "convmemory_ablation"}},
    {"name": "cascade_dense_head_lr", "overrides": [*LOCOMO, "retriever=cascade", "first_stage=dense",
                                                    "cross_encoder=trained_head_lr"],
     "paper": {"table": "convmemory_locomo"}},
    {"name": "pool_seed7", "overrides": [*LOCOMO, "retriever=fullpool_trained", "dataset.seeds=[7]"],
     "paper": {"table": "convmemory_locomo", "row": "pool"}},
    {"name": "pool", "overrides": [*LOCOMO, "retriever=fullpool_trained"],
     "paper": {"table": "convmemory_locomo", "reference": M + "mxbai_rerank_large_v1_top500"}},
    {"name": "pool_trained", "overrides": [*LOCOMO, "retriever=fullpool_trained", "cross_encoder=trained"],
     "paper": {"table": "convmemory_locomo", "reference": M + "mxbai_rerank_large_v1_top500"}},
    {"name": "pool_published", "overrides": [*LOCOMO, "retriever=fullpool"],
     "paper": {"table": "convmemory_locomo", "reference": M + "mxbai_rerank_large_v1_top500",
               "label": "full-pool cross-encoder (top-500), published model",
               "missing": "not run: mixedbread-ai/mxbai-rerank-large-v1 weights are not available offline"}},
    {"name": "v1_published", "overrides": [*LOCOMO, "retriever=convmemory_v1_published"],
     "paper": {"table": "convmemory_locomo", "reference": M + "convmemory_v1",
               "label": "ConvMemory v1, published checkpoint (leaks on 4 of 5 seeds)",
               "missing": "not run: Purdy0228/ConvMemory-LoCoMo-MPNet is not available offline"}},
]


def _run(root: Path, overrides: list[str], mrr: list[float], batch1_ms: float | None = None,
         described: dict[str, Any] | None = None, condition: str | None = None) -> Path:
    """A complete run folder whose config.yaml is the composition of ``overrides`` (as a real run records it)."""
    config = composed_run_config(overrides)
    config["condition"] = condition
    name = overrides[-1].split("=")[1] if overrides[-1].startswith("retriever=") else "x"
    folder = root / "runs" / "locomo" / name / "all-mpnet-base-v2" / f"{abs(hash(tuple(overrides))):016x}"[:16]
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    values = {"mrr": sum(mrr) / len(mrr), "hit@1": 0.2, "recall_list@10": 0.5, "hit@10": 0.6}
    metrics = run_record(dataset="locomo", n_total=len(UNITS),
                         summary={"split_mean": values, "split_std": {k: 0.01 for k in values}, "pooled": values},
                         latency={"batch1": {"n": 10, "mean_ms": batch1_ms} if batch1_ms else {"n": 0},
                                  "batched_amortized_ms_per_query": (batch1_ms or 1.0) / 2},
                         retriever={"name": name, **(described or {})}, encoder={"label": "mpnet"},
                         provenance={"created": "2026-12-01T08:00:00+0000",
                                     "algorithm_versions": algorithm_versions(config["retriever"])})
    (folder / "metrics.json").write_text(json.dumps(metrics))
    rows = [{"split": "7", "seed": 23, "query_id": q, "excluded": None, "metrics": {**values, "mrr": v}}
            for q, v in zip(UNITS, mrr)]
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    mark_complete(folder)
    return folder


def _write_runs(root: Path) -> None:
    v1_described = {**CE_LABEL, "first_stage": {"name": "convmemory_v1", **V1_LABEL}}
    _run(root, [*LOCOMO, "retriever=dense"], BASE)
    _run(root, [*LOCOMO, "retriever=convmemory_v1"], V1_MRR, batch1_ms=100.0, described=V1_LABEL)
    _run(root, [*LOCOMO, "cross_encoder=trained", "retriever=cascade"],
         [v - 0.25 * (i % 3 == 0) for i, v in enumerate(V1_MRR)], batch1_ms=170.0, described=v1_described)
    over_dense = [v + 0.25 * (i % 3 == 0) for i, v in enumerate(BASE)]
    _run(root, [*LOCOMO, "first_stage=dense", "cross_encoder=trained", "retriever=cascade"], over_dense,
         batch1_ms=80.0, described=CE_LABEL)
    _run(root, [*LOCOMO, "first_stage=dense", "cross_encoder=trained", "arm=scalar_only", "retriever=cascade"],
         over_dense, described=CE_LABEL)
    _run(root, [*LOCOMO, "first_stage=dense", "cross_encoder=trained_head_lr", "retriever=cascade"], BASE,
         batch1_ms=100.0, described=CE_LABEL)
    _run(root, [*LOCOMO, "cross_encoder=trained", "retriever=fullpool_trained"], BASE, batch1_ms=2000.0,
         described=CE_LABEL)
    _run(root, [*LOCOMO, "dataset.seeds=[7]", "retriever=fullpool_trained"], BASE, batch1_ms=4000.0,
         described=CE_LABEL)
    # not declared (another recipe): in no paper table
    _run(root, [*LOCOMO, "cross_encoder=trained", "cross_encoder.recipe.lr=0.001", "retriever=cascade"], BASE)
    # launched as condition "v1" with settings the declaration no longer has: reported, not shown for it
    _run(root, [*LOCOMO, "retriever.window_mode=full", "retriever=convmemory_v1"], BASE, condition="v1")


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("convmemory")
    listing = root / "experiments.yaml"
    listing.write_text(yaml.safe_dump({"experiments": CONDITIONS}, sort_keys=False))
    _write_runs(root)
    declared_list = load_experiments(listing)
    runs = complete_runs(root)
    rows = table_rows("convmemory_locomo", runs, declared_list)
    warnings = stale_runs(runs, declared_list)
    selected = select(runs, declared_list)
    return {"selected": selected, "rows": rows, "warnings": warnings, "declared": declared_list}


def test_rows_are_the_declared_conditions_in_order_with_their_runs(tables: dict[str, Any]) -> None:
    rows = tables["rows"]
    assert [row.name for row in rows] == ["dense", "v1", "v1_ce_teacher", "cascade_v1", "cascade_dense",
                                          "cascade_dense_head_lr", "pool", "pool_trained", "pool_published",
                                          "v1_published"]
    assert [len(row.runs) for row in rows] == [1, 1, 0, 1, 1, 1, 1, 1, 0, 0]  # pool: its seed-7 subset only
    main = main_table(tables["selected"], resamples=500)
    assert not any("lr=0.001" in m and "head_lr" not in m for m in main["method"])  # the undeclared run
    assert not any("window_mode=full" in m for m in main["method"])  # the stale run
    assert len(tables["warnings"]) == 1 and "launched as condition 'v1'" in tables["warnings"][0]
    assert "+experiment=v1" in tables["warnings"][0]


def _tags(cell: str) -> str:
    """The protocol-check tags a cell carries (``"D,N,S"`` of ``"0.6250 ± 0.0100 * [D,N,S]"``)."""
    found = re.search(r" \[([A-Z,]+)\]$", cell)
    return found.group(1) if found else ""


def _untagged(cell: str) -> str:
    return re.sub(r" \[[A-Z,]+\]$", "", cell)


def test_main_table_deltas_labels_and_missing_rows(tables: dict[str, Any]) -> None:
    main = main_table(tables["selected"], resamples=500).set_index("method")
    assert list(main.index)[:2] == ["raw dense (MPNet)", "v1, dense-cosine teacher"]
    v1_row = main.loc["v1, dense-cosine teacher"]
    assert _untagged(v1_row["FULL MRR"]).endswith(" *")
    assert v1_row["model"] == "v1: per-seed retrained, dense-cosine teacher [abc]"
    cascade_row = main.loc["v1 + v2 cascade, CE trained"]
    assert cascade_row["ΔMRR vs v1 [95% CI], p"].startswith("-0.0833")  # against its own first stage, paired
    over_dense = main.loc["v2 cascade over raw dense, CE trained"]
    assert _untagged(over_dense["FULL MRR"]).endswith(" *")
    assert not _untagged(main.loc["raw dense (MPNet)", "FULL MRR"]).endswith("*")
    # the protocol check: the fixture's runs read another file than the paper's ([D]) with fewer queries ([N])
    assert {"D", "N"} <= set(_tags(over_dense["FULL MRR"]).split(","))
    pool_rows = [m for m in main.index if m.startswith("full pool (top-500)")]
    assert pool_rows == ["full pool (top-500), CE trained_head_lr (seed 7)", "full pool (top-500), CE trained"]
    assert main.loc[pool_rows[1], "model"] == "CE: seed{…} (fine-tuned by memrepro from MiniLM)"  # one per seed
    assert main.loc["full-pool cross-encoder (top-500), published model", "FULL MRR"].startswith("not run: mixedbread")
    assert main.loc["ConvMemory v1, published checkpoint (leaks on 4 of 5 seeds)", "FULL MRR"].startswith("not run")
    assert main.loc["ConvMemory v1, published checkpoint (leaks on 4 of 5 seeds)",
                    "paper (R@10 / MRR / H@1 / Hit@10)"] == "0.7798 / 0.5824 / 0.4440 / 0.8350"
    assert max(map(len, main.index)) <= MAX_LABEL


def test_rows_named_from_runs_are_short_with_the_full_recipe_in_the_legend(tables: dict[str, Any]) -> None:
    legend = recipe_notes(tables["selected"])
    assert legend[0].startswith(ROW_NAMES)
    assert "v1 + v2 cascade, CE trained: v1 + v2 cascade (v1: per-seed retrained, dense-cosine teacher; our CE, v2 " \
           "recipe (cross_encoder=trained))" in legend
    assert "full pool (top-500), CE trained_head_lr (seed 7): full-pool cross-encoder (top-500) (our CE, v2 " \
           "recipe, head_lr=0.001, lr=0.0001 (cross_encoder=trained_head_lr), trained on dense's top lists)" in legend
    assert not any(note.startswith("raw dense (MPNet)") for note in legend)  # a declared label is its own name
    # a recipe no preset names: its knobs, cut to fit a screen (the legend keeps it whole)
    run = next(r for r in tables["selected"]["main"] if r.name == "cascade_v1").run
    config = {**run.retriever, "cross_encoder": {**run.retriever["cross_encoder"], "recipe": {
        **run.retriever["cross_encoder"]["recipe"], "lr": 0.003, "max_length": 512, "protected": 20, "epochs": 3,
        "weight_decay": 0.1, "batch_records": 16}}}
    long = Run(run.folder)
    long.__dict__["retriever"] = config  # the cached property, as another recipe's run would have it
    label = row_label(_short(long), long)
    assert len(label) <= MAX_LABEL and label.startswith("v1 + v2 cascade, CE v2 recipe, batch_records=16, ")
    assert label.endswith("…")


def test_cost_notes_pair_each_pool_with_the_cascade_of_its_models(tables: dict[str, Any]) -> None:
    notes = " ".join(cost_notes(tables["selected"]))
    assert "v1 + v2 / v1: batch-1 1.70×" in notes
    assert "cross-encoders: our CE, v2 recipe (cross_encoder=trained), trained on dense's top lists): batch-1 25.00×" \
        in notes  # 2000 / 80 ms
    assert "(cross_encoder=trained_head_lr), trained on dense's top lists): batch-1 40.00×" in notes  # 4000 / 100


def test_ablation_rows_are_the_declared_arms(tables: dict[str, Any]) -> None:
    ablation = ablation_table(tables["selected"], resamples=500).set_index("arm")
    assert ablation.loc["no_memory_text", "ours FULL MRR"] == "not run"  # declared, not run
    assert ablation.loc["scalar_only", "first stage"] == "raw dense"
    assert ablation.loc["scalar_only", "Δ vs full text [95% CI], p"].startswith("+0.0000")  # same rows: Δ = 0
    assert not ablation.loc["scalar_only", "ours FULL MRR"].endswith("*")
    assert ablation.loc["full_text", "Δ vs first stage [95% CI], p"].startswith("+0.0833")


def test_calibration_rows_read_the_official_numbers(tables: dict[str, Any]) -> None:
    calibration = calibration_table(tables["selected"]).set_index("method")
    assert list(calibration.index) == ["raw dense"]
    assert calibration.loc["raw dense", "FULL MRR official"] == "0.334"
    assert calibration.loc["raw dense", "FULL MRR ours"].startswith("0.3750 (+0.0410 MISS)")  # seed 23's rows


def test_reproduction_cells_carry_the_declared_reference(tables: dict[str, Any]) -> None:
    cells = {(c.table, c.row, c.column): c for c in reproduction_cells(tables["selected"])}
    assert cells[("convmemory_locomo", "raw dense (MPNet)", "H@1")].verdict == "OKish"  # 0.2 vs 0.1937
    assert cells[("convmemory_locomo", "raw dense (MPNet)", "Hit@10")].verdict == "FAIL"  # 0.6 vs 0.5894
    published = cells[("convmemory_locomo", "full-pool cross-encoder (top-500), published model", "R@10")]
    assert published.verdict.startswith("missing: mixedbread-ai")
    assert cells[("convmemory_locomo", "full pool (top-500), CE trained", "R@10")].verdict == FULLPOOL_REASON
    one_seed = [c for (t, row, col), c in cells.items() if row == "full pool (top-500), CE trained_head_lr"
                and col == "R@10"]
    assert [c.verdict for c in one_seed] == [FULLPOOL_REASON + " (seeds 7 only)"]  # never read as a 5-seed mean
    assert not any(key[1].startswith("v2 cascade over raw dense") for key in cells)  # no reference declared
    assert cells[("convmemory_ablation", "no_memory_text", "FULL MRR")].verdict == "missing: not run"
    assert cells[("convmemory_ablation", "scalar_only", "FULL MRR")].verdict.startswith("not comparable: each arm")


def test_a_new_condition_is_one_entry(tmp_path: Path) -> None:
    """Adding a paper condition touches one entry: it is run by `experiments`, composes as `+experiment=<name>`,
    and its run fills its row and its reproduction cells."""
    from memrepro.cli.experiments import main as experiments_main
    from memrepro.experiments import preset_node

    entry = {"name": "v1_gold_only", "overrides": [*LOCOMO, "retriever=convmemory_v1",
                                                   "retriever.model.recipe.pairwise_weight=0.0"],
             "cost": "8 min", "paper": {"table": "convmemory_locomo", "reference": M + "convmemory_v1",
                                        "label": "ConvMemory v1, gold-only"}}
    unlabelled = {"name": "bm25", "overrides": [*LOCOMO, "retriever=bm25"], "paper": {"table": "convmemory_locomo"}}
    listing = tmp_path / "experiments.yaml"
    listing.write_text(yaml.safe_dump({"experiments": [*CONDITIONS, unlabelled, entry]}, sort_keys=False))
    new_list = load_experiments(listing)
    added = new_list[1][-1]
    assert added.feeds == ("convmemory_locomo",)
    node = preset_node(added)  # what `+experiment=v1_gold_only` composes, had the repo's list this entry
    assert node["condition"] == "v1_gold_only" and node["retriever"]["model"]["recipe"]["pairwise_weight"] == 0.0
    assert {"override /retriever": "convmemory_v1"} in node["defaults"]
    root = tmp_path / "results"
    _write_runs(root)
    _run(root, entry["overrides"], V1_MRR, batch1_ms=90.0, described=V1_LABEL, condition="v1_gold_only")
    _run(root, unlabelled["overrides"], BASE)
    selected = select(complete_runs(root), new_list)
    main = main_table(selected, resamples=200).set_index("method")
    assert main.loc["ConvMemory v1, gold-only", "FULL MRR"].startswith(f"{sum(V1_MRR) / 60:.4f}")
    assert list(main.index)[-2:] == ["bm25 (all-mpnet-base-v2)", "ConvMemory v1, gold-only"]  # declared order;
    # a row without a label is named from its run: the retriever and the encoder, never another method's name
    cells = [c for c in reproduction_cells(selected) if c.row == "ConvMemory v1, gold-only"]
    assert len(cells) == 4 and cells[0].paper == 0.5824
    assert experiments_main(["--file", str(listing), "--only", "v1_gold_only", "--dry-run"]) == 0
