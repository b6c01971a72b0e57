"""The declared experiment list: validation, command lines, skip-if-done through the real CLI on fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from memrepro.experiments import DEFAULT_LIST, ExperimentListError, load_experiments, run_experiments
from memrepro.runs.folder import COMPLETE

CONF = Path(__file__).resolve().parents[1] / "conf"
KNOWN_OUTPUTS = {"convmemory_locomo", "convmemory_ablation", "convmemory_calibration", "rfmem_table1", "rfmem_table2", "rfmem_table3",
                 "rfmem_table15", "rfmem_table16", "rfmem_table17", "engine_agreement", "figure14_alpha_tau",
                 "figure15_beam_fanout", "figure16_alpha_depth", "figure17_k_sensitivity", "leaderboard"}


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "experiments.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_declared_list_parses_and_names_real_presets() -> None:
    common, experiments = load_experiments(DEFAULT_LIST)
    assert experiments and common == ["runtime.progress=false"]
    for experiment in experiments:
        assert set(experiment.feeds) <= KNOWN_OUTPUTS, experiment.name
        assert experiment.cost, f"{experiment.name}: cost must be documented"
        for override in experiment.overrides:
            key, _, value = override.partition("=")
            if key in ("retriever", "dataset", "encoder", "first_stage", "cross_encoder", "model"):
                for choice in value.split(","):
                    assert (CONF / key / f"{choice}.yaml").is_file(), f"{experiment.name}: {key}={choice}"
            assert "{train." not in override  # models are found by recipe hash, never by a pasted template


@pytest.mark.parametrize("doc, message", [
    ({"experiments": [{"overrides": []}]}, "experiment #0: field 'name' is missing"),
    ({"experiments": [{"name": "a", "overrides": [], "colour": 1}]}, "experiment 'a': unknown field(s) ['colour']"),
    ({"experiments": [{"name": "a", "overrides": []}, {"name": "a", "overrides": []}]}, "repeats an earlier entry"),
    ({"experiments": [{"name": "a", "overrides": "x=1"}]}, "field 'overrides' must be a list"),
    ({"experiments": [{"name": "a", "overrides": [], "kind": "bake"}]}, "field 'kind' is 'bake'"),
    ({"runs": []}, "expected a mapping with an 'experiments' list"),
])
def test_malformed_lists_name_the_file_entry_and_field(tmp_path: Path, doc: object, message: str) -> None:
    path = _write(tmp_path, doc)
    with pytest.raises(ExperimentListError) as error:
        load_experiments(path)
    assert message in str(error.value) and str(path) in str(error.value)


def test_command_lines_merge_common_and_split_group_sweeps(tmp_path: Path) -> None:
    common, (train, sweep, plain) = load_experiments(_write(tmp_path, {
        "common": ["runtime.progress=false", "latency.batch1_queries=200"],
        "experiments": [
            {"name": "ce", "kind": "train", "overrides": ["seeds=[7]"]},
            {"name": "grid", "sweep": True, "overrides": ["retriever=a,b", "retriever.alpha=0.1,0.2",
                                                          "latency.batch1_queries=0"]},
            {"name": "one", "overrides": ["retriever=cascade", "first_stage=dense"]}]}))
    assert train.commands(common)[0][1:] == ["-m", "memrepro", "train", "seeds=[7]"]
    grid = sweep.commands(common)
    # a group choice list next to a key inside that group: one sweep per choice (Hydra validates the base config)
    assert [c[4:] for c in grid] == [
        ["-m", "runtime.progress=false", "retriever=a", "retriever.alpha=0.1,0.2", "latency.batch1_queries=0"],
        ["-m", "runtime.progress=false", "retriever=b", "retriever.alpha=0.1,0.2", "latency.batch1_queries=0"]]
    assert plain.commands(common)[0][4:] == ["runtime.progress=false", "latency.batch1_queries=200",
                                             "retriever=cascade", "first_stage=dense", "condition=one"]


@pytest.mark.integration
def test_optional_and_missing_model_entries_are_reported_not_run(tmp_path: Path) -> None:
    common, experiments = load_experiments(_write(tmp_path, {"experiments": [
        {"name": "big", "optional": True, "cost": "4 h", "overrides": ["x=1"]},
        {"name": "online", "needs_model": "some/model", "overrides": ["x=1"]}]}))
    said: list[str] = []
    outcomes = run_experiments(experiments, common, model_available=lambda name: False, echo=said.append)
    assert [(o.name, o.status) for o in outcomes] == [("big", "skipped-optional"),
                                                      ("online", "skipped-missing-model")]
    assert any("--include-optional" in line for line in said) and any("some/model" in line for line in said)


@pytest.mark.integration
def test_runs_through_the_cli_then_skips_what_is_complete(tmp_path: Path, fixtures_dir: Path) -> None:
    common, experiments = load_experiments(_write(tmp_path, {
        "common": ["runtime.progress=false", "encoder=fake", "latency.batch1_queries=0"],
        "experiments": [
            {"name": "grid", "sweep": True, "overrides": [
                "dataset=locomo", "dataset.file=locomo/locomo10_two_conversations.json", "retriever=familiarity",
                "retriever.k=1,3"]},
            {"name": "broken", "overrides": ["dataset=locomo", "retriever=no_such_preset"]}]}))
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(fixtures_dir), "MEMREPRO_RESULTS_DIR": str(tmp_path / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp_path / "cache"), "MEMREPRO_LOG_DIR": str(tmp_path / "logs"),
           "TQDM_DISABLE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    first = run_experiments(experiments, common, env=env, echo=lambda line: None)
    assert (first[0].status, first[0].detail) == ("ran", "2 computed, 0 already complete")
    assert first[1].status == "failed" and "exit code" in first[1].detail  # the next entry still ran; reported
    markers = sorted((tmp_path / "results").rglob(COMPLETE))
    assert len(markers) == 2
    stamps = [m.stat().st_mtime_ns for m in markers]
    second = run_experiments(experiments[:1], common, env=env, echo=lambda line: None)
    assert second[0].detail == "0 computed, 2 already complete"
    assert [m.stat().st_mtime_ns for m in sorted((tmp_path / "results").rglob(COMPLETE))] == stamps


def test_cli_only_selects_by_table(capsys: pytest.CaptureFixture) -> None:
    from memrepro.cli.experiments import main

    assert main(["--only", "convmemory_calibration", "--dry-run"]) == 0
    out = capsys.readouterr().out
    ran = [line.split("]")[0].lstrip("[") for line in out.splitlines() if line.startswith("[")]
    assert ran == ["locomo_dense_mpnet", "convmemory_v1_models", "locomo_convmemory_v1_calibration",
                   "locomo_convmemory_v1_gold_only_calibration"]
    assert "retriever.model.recipe.pairwise_weight=0.0" in out
    assert main(["--only", "no_such_table"]) == 2
    assert "no such entry or table" in capsys.readouterr().err


@pytest.mark.parametrize("paper, message", [
    ({"reference": "x"}, "paper cell #0 must be a mapping with a 'table' name"),
    ({"table": "t", "colour": "red"}, "paper cell #0: unknown field(s) ['colour']"),
    ([{"table": "t"}, {"table": "t", "label": 3}], "paper cell #1: field(s) ['label'] must be text"),
    ({"table": "t", "row": "nobody"}, "paper row 'nobody' is not an entry with a cell in table 't'"),
    ({"table": "t", "label": "x" * 61}, "paper cell #0: label 'xxxxx"),  # a row label fits on a screen
])
def test_malformed_paper_cells_are_refused(tmp_path: Path, paper: object, message: str) -> None:
    path = _write(tmp_path, {"experiments": [{"name": "a", "overrides": [], "paper": paper}]})
    with pytest.raises(ExperimentListError) as error:
        load_experiments(path)
    assert message in str(error.value) and "experiment 'a'" in str(error.value)


def test_paper_tables_are_fed_and_sweeps_expand_to_their_points(tmp_path: Path) -> None:
    _, (grid,) = load_experiments(_write(tmp_path, {"experiments": [
        {"name": "grid", "sweep": True, "feeds": ["figure"], "paper": {"table": "t"},
         "overrides": ["dataset=locomo", "arm=a,b", "retriever.k=1,2"]}]}))
    assert grid.feeds == ("figure", "t")
    assert grid.points() == [["dataset=locomo", "arm=a", "retriever.k=1"], ["dataset=locomo", "arm=a", "retriever.k=2"],
                             ["dataset=locomo", "arm=b", "retriever.k=1"], ["dataset=locomo", "arm=b", "retriever.k=2"]]


def test_every_single_run_entry_is_a_preset_that_composes_to_its_command_line() -> None:
    """``+experiment=<name>`` and the entry's overrides give the same run (settings equal as a run id sees them),
    and the preset records the entry's name; the paper presets of the README are among them."""
    from hydra import compose, initialize_config_dir

    import memrepro.config  # noqa: F401
    from memrepro.experiments import register_presets
    from memrepro.runs.identity import semantic_config

    _, experiments = load_experiments(DEFAULT_LIST)
    single = [e for e in experiments if e.kind == "run" and not e.sweep]
    assert register_presets() == tuple(e.name for e in single)
    assert {"rfmem_table2_r5", "rfmem_table2_r10", "recollection_table2_r5", "recollection_table2_r10",
            "rfmem_table3_minilm", "recollection_table3_minilm"} <= set(register_presets())
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        for experiment in single:
            preset = compose("config", overrides=[f"+experiment={experiment.name}"])
            typed = compose("config", overrides=list(experiment.overrides))
            assert semantic_config(preset) == semantic_config(typed), experiment.name
            assert preset.condition == experiment.name and typed.condition is None


def test_a_broken_list_registers_no_preset_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from memrepro.experiments import register_presets

    path = _write(tmp_path, {"experiments": [{"name": "a", "overrides": "x=1"}]})
    assert register_presets(path) == ()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "field 'overrides' must be a list" in err and "no +experiment=<name>" in err


def test_a_fixed_layout_cell_is_filled_by_one_single_run_entry(tmp_path: Path) -> None:
    cell = {"table": "rfmem_table2", "reference": "rfmem.table_2.models.all-mpnet-base-v2.rf_mem", "column": "k5"}
    twice = _write(tmp_path, {"experiments": [{"name": "a", "overrides": [], "paper": cell},
                                              {"name": "b", "overrides": [], "paper": cell}]})
    with pytest.raises(ExperimentListError, match="experiment 'b': cell rfmem.table_2.models.all-mpnet-base-v2.rf_mem "
                                                  "/ k5 of rfmem_table2 is already filled by 'a'"):
        load_experiments(twice)
    sweep = _write(tmp_path, {"experiments": [{"name": "grid", "sweep": True, "overrides": ["retriever.k=5,10"],
                                               "paper": cell}]})
    with pytest.raises(ExperimentListError, match="a sweep cannot fill the cell"):
        load_experiments(sweep)


def test_every_rfmem_paper_cell_is_declared_once() -> None:
    """Each cell group of RF-Mem's Tables 2, 3, 15, 16, 17 that we can run is one entry's cell; the BGE rows (no
    offline weights) and LongMemEval-M (not in the data) are the only ones left to the layout's reasons."""
    from memrepro.reference import reference_numbers

    _, experiments = load_experiments(DEFAULT_LIST)
    declared = {(c.table, c.reference, c.column) for e in experiments for c in e.paper if c.column}
    rfmem = reference_numbers()["rfmem"]
    runnable = ("all-mpnet-base-v2", "multi-qa-MiniLM-L6-cos-v1")
    expected = {("rfmem_table2", f"rfmem.table_2.models.{m}.{method}", f"k{k}") for m in runnable
                for method in rfmem["table_2"]["models"][m] if method in ("familiarity", "recollection", "rf_mem")
                for k in (5, 10)}
    expected |= {("rfmem_table17", f"rfmem.table_17.models.{m}", "k5") for m in runnable}
    expected |= {("rfmem_table3", f"rfmem.table_3.models.{m}.{method}", "longmemeval_s") for m in runnable
                 for method in rfmem["table_3"]["models"][m]}
    for number in (15, 16):
        expected |= {(f"rfmem_table{number}", f"rfmem.table_{number}.blocks.{block}.{method}", f"k{k}")
                     for block, node in rfmem[f"table_{number}"]["blocks"].items()
                     for method in node if method in ("familiarity", "recollection", "rf_mem") for k in (5, 10)}
    assert declared == expected


def test_shared_composition_equals_hydras_for_every_paper_point() -> None:
    """The tables compose once per set of config-group choices and apply value overrides with Hydra's own code; for
    every point a paper table reads, the settings equal a full composition of its command line."""
    from hydra import compose, initialize_config_dir

    from memrepro.experiments import with_common
    from memrepro.runs.identity import semantic_config
    from memrepro.experiments import composed_config

    common, experiments = load_experiments(DEFAULT_LIST)
    points = [with_common(common, p) for e in experiments if e.kind == "run" and e.paper for p in e.points()]
    assert len(points) > 70
    shared = [semantic_config(composed_config(tuple(point))) for point in points]
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        for point, settings in zip(points, shared):
            assert settings == semantic_config(compose("config", overrides=point)), point
