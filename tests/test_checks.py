"""The protocol check (memrepro/checks.py, docs/checks.md): every finding has a case that triggers it and one that
does not, on hand-made runs; the kept cascade and LongMemEval runs show the findings the docs promise; `check` on the
command line exits 0 / 1 / 2 and names a damaged folder before checking the next one."""

from __future__ import annotations

import copy
import json
import lzma
import shutil
from pathlib import Path

import pytest

from conftest import run_record
from memrepro.checks import (CODES, KINDS, CheckInputError, Finding, RunView, check_comparison, check_paper_cell,
                             check_run, deeper_than_list, legend, stored_or_checked, tags, valid_codes, without)
from memrepro.cli.check import load_run
from memrepro.errors import EXIT_BAD_INPUT, UnknownNameError
from memrepro.runs.record import RunRecord

REPO = Path(__file__).resolve().parents[1]
KEPT = REPO / "results" / "kept"
# the kept run of the README's design-card command (python -m memrepro run dataset=locomo retriever=cascade)
DESIGN_CARD = KEPT / "locomo" / "cascade" / "all-mpnet-base-v2" / "de30af583e07961a"
LOCOMO_SHA = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
CLEANED_S_SHA = "e6921e1ef1e2b4669f08084efbcb135cd5aabd85f21bf879642c74a40842c05b"
DENSE = {"_target_": "memrepro.retrievers.dense.DenseRetriever", "mode": "full"}
CASCADE = {"_target_": "memrepro.retrievers.cascade.CascadeRetriever", "protected": 10,
           "first_stage": {"_target_": "memrepro.retrievers.convmemory_v1.ConvMemoryV1Retriever",
                           "model": {"published": None}}}


def rows(n: int = 4, *, pool: int | None = 40, returned: int | None = None, split: str = "seed7",
         episodes: tuple[str, ...] = ("conv-26", "conv-30"), metric: str = "mrr", value: float = 0.5) -> list[dict]:
    """``n`` scored rows of one split over ``episodes`` (``pool=None``: rows written before they recorded it)."""
    out = []
    for i in range(n):
        row = {"split": split, "seed": int(split[4:]) if split.startswith("seed") else None,
               "query_id": f"{episodes[i % len(episodes)]}::qa{i}", "episode_id": episodes[i % len(episodes)],
               "category": "1", "excluded": None, "n_returned": pool if returned is None else returned,
               "metrics": {metric: value}}
        if pool is not None:
            row["pool"] = pool
        out.append(row)
    return out


def view(*, dataset: str = "locomo", metrics: tuple[str, ...] = ("mrr",), retriever: dict | None = None,
         described: dict | None = None, query_rows: list[dict] | None = None, files: list[dict] | None = None,
         n_scored: int = 4955, loader_options: dict | None = None, encoder: dict | None = None,
         tie_rule: str = "test", hardware: dict | None = None, run_file: dict | None = None,
         folder: str = "run") -> RunView:
    """A run as the check reads it, every fact the test does not name set to what raises no finding."""
    files = files if files is not None else [{"path": "locomo/locomo10.json", "sha256": LOCOMO_SHA, "bytes": 1}]
    provenance = {"files": files, "loader_options": loader_options or {}, "tie_rule": tie_rule,
                  "hardware": hardware, "run_file": run_file}
    document = run_record(dataset=dataset, metric_names=list(metrics), primary=[metrics[0]],
                          retriever=described or {}, encoder=encoder or {"label": "test"}, provenance=provenance)
    document["counts"].update(n_total=n_scored, n_scored=n_scored)
    record = RunRecord.from_json(document)
    return RunView({"retriever": retriever or DENSE}, record, query_rows if query_rows is not None else rows(),
                   Path(folder))


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


# ------------------------------------------------------------------------------------------------ the closed list

def test_the_list_is_closed_each_kind_has_a_code_a_tag_and_a_fix() -> None:
    assert len(set(CODES)) == len(CODES) == len({k.tag for k in KINDS}) == 11
    assert all(k.fix and k.title for k in KINDS)
    with pytest.raises(ValueError, match="unknown finding code 'made-up'.*valid: cutoff-at-pool"):
        Finding("made-up", "x")
    assert Finding("subset", "x").fix == next(k.fix for k in KINDS if k.code == "subset")  # the kind's fix


def test_an_unknown_code_is_one_line_naming_the_valid_codes() -> None:
    assert valid_codes(["subset", "data-variant"], "--ignore") == ("subset", "data-variant")
    with pytest.raises(UnknownNameError) as refused:
        valid_codes(["subset", "data-varient"], "--ignore")
    text = str(refused.value)
    assert "\n" not in text and "'data-varient'" in text and "nearest: data-variant" in text
    assert all(code in text for code in CODES) and refused.value.exit_code == EXIT_BAD_INPUT


def test_tags_legend_and_ignore() -> None:
    found = [Finding("substituted-model", "m1", run="row A"), Finding("fixed-by-first-stage", "m2", run="row A"),
             Finding("substituted-model", "m1", run="row B")]
    assert tags(found) == " [F,S]" and tags([]) == ""
    lines = legend(found)
    assert len(lines) == 2 and lines[0].startswith("[F] fixed-by-first-stage") and "row A; row B: m1" in lines[1]
    assert codes(without(found, ["substituted-model"])) == ["fixed-by-first-stage"]


# ------------------------------------------------------------------------------------------------ one run

def test_cutoff_at_pool_counts_the_queries_whose_pool_the_cutoff_covers() -> None:
    short = view(dataset="longmemeval_s", metrics=("recall_all@5", "recall_all@50", "ndcg@10"),
                 query_rows=rows(3, pool=40) + rows(1, pool=60), files=[], n_scored=10_000)
    [finding] = [f for f in check_run(short) if f.code == "cutoff-at-pool"]
    assert finding.metrics == ("recall_all@50",) and "recall_all@50 on 3 of 4 scored queries" in finding.message
    assert "smallest pool (40 memories here)" in finding.fix
    assert "cutoff-at-pool" not in codes(check_run(view(metrics=("recall_all@50",), query_rows=rows(pool=60))))
    # rows without a recorded pool: none unless the pools are given (read from the data)
    legacy = view(metrics=("recall_all@50",), query_rows=rows(pool=None, returned=40))
    assert "cutoff-at-pool" not in codes(check_run(legacy))
    assert "cutoff-at-pool" in codes(check_run(legacy, pools={"conv-26": 40, "conv-30": 40}))


def test_a_reranker_of_the_top_w_cannot_change_set_metrics_at_k_of_w_or_more() -> None:
    metrics = ("recall_list@10", "mrr", "hit@1", "hit@10", "recall_list@5", "ndcg@10")
    cascade = view(metrics=metrics, retriever=CASCADE, described={"name": "cascade",
                                                                  "first_stage": {"name": "convmemory_v1"}})
    [finding] = [f for f in check_run(cascade) if f.code == "fixed-by-first-stage"]
    assert finding.metrics == ("recall_list@10", "hit@10")
    assert "(convmemory_v1, as computed inside this run)" in finding.message
    assert finding.concerns("hit@10") and not finding.concerns("mrr") and not finding.concerns("recall_list@5")
    wider = view(metrics=metrics, retriever={**CASCADE, "protected": 20})  # k = 10 < w = 20: can change
    assert "fixed-by-first-stage" not in codes(check_run(wider))
    assert "fixed-by-first-stage" not in codes(check_run(view(metrics=metrics)))  # dense: no reranker
    v1 = {"_target_": "memrepro.retrievers.convmemory_v1.ConvMemoryV1Retriever", "model": {"pool": 5}}
    [top5] = [f for f in check_run(view(metrics=metrics, retriever=v1)) if f.code == "fixed-by-first-stage"]
    assert top5.metrics == ("recall_list@10", "hit@10", "recall_list@5")
    assert "(raw dense, as computed inside this run)" in top5.message


def test_deeper_than_list_names_the_lower_bounds_and_the_exact_metrics() -> None:
    cut = view(metrics=("mrr", "hit@1", "hit@5"), query_rows=rows(pool=40, returned=2))
    [finding] = [f for f in check_run(cut) if f.code == "deeper-than-list"]
    assert "at most 2 memories per query" in finding.message and "mrr, hit@5 are lower bounds" in finding.message
    assert "hit@1 exact" in finding.message and finding.metrics == ("mrr", "hit@5")
    assert "deeper-than-list" not in codes(check_run(view(metrics=("mrr",), query_rows=rows(pool=40, returned=40))))
    # PersonaBench's metrics are defined on the returned list: never deeper than it
    assert deeper_than_list(5, [80, 90], ["pb_recall", "pb_recall@5"], "x") is None
    # lists that stop before the retriever's k end by its own rule (Familiarity's similarity floor), not a depth
    floor = {"_target_": "memrepro.retrievers.dense.DenseRetriever", "mode": "topk", "k": 50, "min_sim": 0.0}
    short = rows(pool=58, returned=49)
    assert "deeper-than-list" not in codes(check_run(view(metrics=("recall_all@50",), retriever=floor,
                                                          query_rows=short)))
    at_k = view(metrics=("recall_all@50",), retriever={**floor, "k": 49}, query_rows=short)
    assert "deeper-than-list" in codes(check_run(at_k))  # cut at k = 49 while pools hold 58


def test_split_leakage_from_what_each_model_recorded_it_saw() -> None:
    seen = {"name": "convmemory_v1", "trained_on": {"seed7": ["conv-26", "conv-99"]}}
    leaked = view(described=seen)
    [finding] = [f for f in check_run(leaked) if f.code == "split-leakage"]
    assert "ConvMemory v1 models" in finding.message and "2 of 4 scored questions (seed7: conv-26)" in finding.message
    clean = view(described={"name": "convmemory_v1", "trained_on": {"seed7": ["conv-42", "conv-44"]}})
    assert "split-leakage" not in codes(check_run(clean))


def test_split_leakage_of_a_published_checkpoint_named_by_the_config() -> None:
    config = copy.deepcopy(CASCADE)
    config["first_stage"]["model"]["published"] = "Purdy0228/ConvMemory-LoCoMo-MPNet"
    config["cross_encoder"] = {"published": "Purdy0228/ConvMemory-v2-Evidence-Reranker"}
    run = view(retriever=config, query_rows=rows(episodes=("conv-44", "conv-26")) + rows(split="seed23",
                                                                                       episodes=("conv-26",)))
    found = [f for f in check_run(run) if f.code == "split-leakage"]
    assert len(found) == 2 and "checkpoint Purdy0228/ConvMemory-LoCoMo-MPNet" in found[0].message
    assert "2 of 8 scored questions (seed7: conv-44)" in found[0].message
    assert "assumed" in found[1].message and "assumed" not in found[0].message  # the v2 reranker's is undocumented
    assert "split-leakage" not in codes(check_run(view(retriever=CASCADE)))


def test_data_variant_by_sha256_and_by_corrected_gold() -> None:
    cleaned = view(dataset="longmemeval_s", files=[{"path": "longmemeval/x.tar.xz", "sha256": CLEANED_S_SHA}],
                   n_scored=419)
    [finding] = [f for f in check_run(cleaned) if f.code == "data-variant"]
    assert "RF-Mem Table 3" in finding.message and "longmemeval_s.json (sha256 dc89a998b5ec" in finding.message
    assert "data-variant" not in codes(check_run(view()))  # the original LoCoMo file
    corrected = view(loader_options={"gold_labels": {"mode": "corrected", "file": "f.yaml", "version": 1,
                                                     "corrected": 2}})
    [gold] = [f for f in check_run(corrected) if f.code == "data-variant"]
    assert "corrected gold labels (f.yaml, version 1: 2 questions)" in gold.message
    assert "data-variant" not in codes(check_run(view(dataset="my_own_benchmark", files=[])))  # no paper


def test_data_variant_of_a_benchmark_the_paper_read_as_released() -> None:
    pinned = "personabench/eval_data/eval_data_v1/synthetic_data/community_0/eval_info/eval_info_all.json"
    ok = view(dataset="personabench", n_scored=230,
              files=[{"path": pinned, "sha256": "08d8b8cf07f55d48ef17464f8729b2ab62afe6fa1739c27ad2b5c81f3b6c69b0"}])
    assert "data-variant" not in codes(check_run(ok))
    edited = view(dataset="personabench", n_scored=230, files=[{"path": pinned, "sha256": "0" * 64}])
    assert "data-variant" in codes(check_run(edited))


def test_subset_of_the_papers_queries() -> None:
    [finding] = [f for f in check_run(view(n_scored=937, query_rows=rows(split="seed23"))) if f.code == "subset"]
    assert "scores 937 queries (split seed 23)" in finding.message and "4,955" in finding.message
    assert "subset" not in codes(check_run(view(n_scored=4955)))


def test_substituted_models_recorded_by_the_run() -> None:
    label = ("seed7 (fine-tuned by memrepro from sentence-transformers/all-MiniLM-L6-v2 (bi-encoder backbone; "
             "substitute for cross-encoder/ms-marco-MiniLM-L-6-v2))")
    [finding] = [f for f in check_run(view(described={"name": "cascade", "cross_encoder": label}))
                 if f.code == "substituted-model"]
    assert finding.message.startswith("sentence-transformers/all-MiniLM-L6-v2 stands in for "
                                      "cross-encoder/ms-marco-MiniLM-L-6-v2")
    encoder = {"label": "x", "model": "a", "resolved": {"name": "b", "substitute_for": "a"}}
    assert "b stands in for a" in check_run(view(encoder=encoder))[0].message
    assert "substituted-model" not in codes(check_run(view(encoder={"label": "x", "resolved": {"name": "a"}})))


def test_a_paper_cell_adds_its_encoder_and_for_latency_its_hardware() -> None:
    run = view(encoder={"label": "all-MiniLM-L6-v2", "model": "sentence-transformers/all-MiniLM-L6-v2"},
               hardware={"device": "cpu", "cpu_count": 2})
    cell = check_paper_cell(run, "mrr", encoder="multi-qa-MiniLM-L6-cos-v1")
    assert codes(cell) == ["substituted-model"] and "all-MiniLM-L6-v2 stands in for multi-qa" in cell[0].message
    assert check_paper_cell(run, "mrr", encoder="sentence-transformers/all-MiniLM-L6-v2") == []
    [timed] = check_paper_cell(run, None, latency=True)
    assert timed.code == "latency-hardware" and "RTX 4080 SUPER" in timed.message and "cpu (2 CPUs)" in timed.message
    # a cell shows only the findings that concern its metric
    cascade = view(metrics=("recall_list@10", "mrr"), retriever=CASCADE)
    assert codes(check_paper_cell(cascade, "recall_list@10")) == ["fixed-by-first-stage"]
    assert check_paper_cell(cascade, "mrr") == []


# ------------------------------------------------------------------------------------------------ runs compared

def test_comparison_findings_tie_rule_gold_definition_and_query_sets() -> None:
    a, b = view(folder="a"), view(folder="b")
    assert [f for f in check_comparison([a, b]) if not f.run] == []
    other_rule = view(tie_rule="the run file's own order (order=rank)", folder="c")
    assert "tie-rule-differs" in codes(check_comparison([a, other_rule]))
    official = [view(loader_options={"gold": g}, folder=g) for g in ("rfmem", "official")]
    [gold] = [f for f in check_comparison(official) if f.code == "metric-definition-differs"]
    assert "rfmem: gold=rfmem; official: gold=official" in gold.message
    fewer = view(query_rows=rows(2), folder="d")
    [dropped] = [f for f in check_comparison([a, fewer]) if f.code == "query-sets-differ"]
    assert "compared on the 2 (split, query) units" in dropped.message and "2 only in a" in dropped.message
    mine = [f for f in check_comparison([view(n_scored=9, folder="e"), b]) if f.run]
    assert codes(mine) == ["subset"] and mine[0].run == "e"  # each run's own findings, named


# ------------------------------------------------------------------------------------------------ records and folders

def test_a_record_written_before_findings_reads_with_none_recorded() -> None:
    document = run_record()
    document["schema_version"] = 2
    del document["findings"]
    record = RunRecord.from_json(document)
    assert record.findings is None
    stored = RunRecord.from_json({**run_record(), "findings": [Finding("subset", "kept").to_json()]})
    run = RunView({"retriever": DENSE}, stored, rows())
    assert [f.message for f in stored_or_checked(run)] == ["kept"]  # what was recorded, not checked again


def test_the_kept_cascade_run_reports_r10_and_hit10_are_v1s() -> None:
    run = load_run(DESIGN_CARD)  # read in place from the kept copy
    found = {f.code: f for f in check_run(run)}
    assert {"recall_list@10", "hit@10"} <= set(found["fixed-by-first-stage"].metrics)
    assert "mrr" not in found["fixed-by-first-stage"].metrics and "substituted-model" in found


def test_the_kept_longmemeval_run_is_flagged_as_another_file_than_the_papers() -> None:
    folder = next((KEPT / "longmemeval_s" / "familiarity" / "all-MiniLM-L6-v2").iterdir())
    found = codes(check_run(load_run(folder)))
    assert "data-variant" in found and "subset" in found


def _kept_copy(tmp_path: Path) -> Path:
    source = next((KEPT / "personabench" / "bm25" / "all-MiniLM-L6-v2").iterdir())
    copy_ = tmp_path / "kept" / "personabench" / "bm25" / "x" / source.name
    shutil.copytree(source, copy_)
    return copy_


def test_check_command_exit_codes_and_a_damaged_folder_named_then_the_next_checked(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from memrepro.cli.check import main

    clean = _kept_copy(tmp_path)
    assert main([str(clean), "--no-data"]) == 0
    assert "personabench, 0 findings" in capsys.readouterr().out
    cascade = DESIGN_CARD
    assert main([str(cascade), "--no-data"]) == 1
    assert "finding fixed-by-first-stage" in capsys.readouterr().out
    assert main([str(cascade), "--no-data", "--ignore", "fixed-by-first-stage", "--ignore", "substituted-model"]) == 0
    capsys.readouterr()

    damaged = tmp_path / "damaged"
    shutil.copytree(clean, damaged)
    rows_xz = damaged / "queries.jsonl.xz"
    lines = lzma.decompress(rows_xz.read_bytes()).decode().splitlines()
    row = json.loads(lines[0])
    row["metrics"] = {k: 1.0 for k in row["metrics"]}
    rows_xz.write_bytes(lzma.compress(("\n".join([json.dumps(row), *lines[1:]]) + "\n").encode()))
    assert main([str(damaged), str(tmp_path / "absent"), str(clean), "--no-data"]) == EXIT_BAD_INPUT
    out = capsys.readouterr()
    errors = out.err.strip().splitlines()
    assert len(errors) == 2 and str(rows_xz) in errors[0] and "damaged or edited" in errors[0]
    assert "absent: not a folder" in errors[1] and "Traceback" not in out.err
    assert f"{clean}: personabench, 0 findings" in out.out  # the next folder was checked


def test_check_command_refuses_an_unknown_code_in_one_line() -> None:
    from memrepro.cli.check import main

    with pytest.raises(UnknownNameError, match="unknown finding code 'subsets'"):
        main([str(REPO), "--ignore", "subsets"])


def test_a_folder_that_is_no_run_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(CheckInputError, match="not a complete run folder"):
        load_run(tmp_path)


# ------------------------------------------------------------------------------------------------ where it runs

def test_a_per_seed_model_records_the_conversations_it_saw(tmp_path: Path, fixtures_dir: Path) -> None:
    from memrepro.artifacts.per_seed import PerSeedArtifact, TrainingContext, weights_sha256
    from memrepro.datasets.locomo import load_locomo
    from memrepro.models.cross_encoder import TRAINING_INFO

    class Model(PerSeedArtifact):
        kind = "toy"

        def recipe_identity(self) -> dict:
            return {"recipe": 1}

        def train(self, split, out_dir: Path) -> None:
            out_dir.mkdir(parents=True)
            (out_dir / "weights.bin").write_bytes(b"toy")
            (out_dir / TRAINING_INFO).write_text(json.dumps({"identity": self.identity(),
                                                             "weights_sha256": weights_sha256(out_dir)}))

        def load(self, folder: Path) -> str:
            return "ours"

        def load_published(self, name: str) -> str:
            return "published"

        def retrained_label(self) -> str:
            return "toy"

    bench = load_locomo(fixtures_dir, file="locomo/locomo10_two_conversations.json", seeds=[7])
    [split] = bench.splits
    ours, published = Model(), Model(published="Purdy0228/ConvMemory-LoCoMo-MPNet")
    for model in (ours, published):
        model.bind(TrainingContext(bench, None, {}, {"model": "fake"}, tmp_path, plan_printed=True))
        model(split)
    assert ours.trained_on == {"seed7": sorted(split.dev_episode_ids)}  # its own split's dev conversations
    assert published.trained_on == {"seed7": ["conv-42", "conv-44", "conv-47", "conv-48", "conv-49"]}


@pytest.mark.integration
def test_run_stores_its_findings_and_rows_their_pool_and_refuses_an_unknown_ignored_code(tmp_path: Path,
                                                                                        fixtures_dir: Path) -> None:
    from test_own_system import FAST, TWO, memrepro, runs_under

    out = memrepro("run", "retriever=dense", TWO, *FAST, "checks.ignore=[subset]", tmp=tmp_path,
                   data_dir=fixtures_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    [folder] = runs_under(tmp_path, "locomo", "dense")
    document = json.loads((folder / "metrics.json").read_text())
    stored = {f["code"] for f in document["findings"]}
    assert {"cutoff-at-pool", "data-variant", "subset"} <= stored and document["schema_version"] == 3
    rows_ = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    assert all(row["pool"] >= row["n_returned"] > 0 for row in rows_)
    assert "finding data-variant: " in out.stdout and "finding subset" not in out.stdout  # ignored: not printed
    assert "1 finding(s) not shown: ignored subset" in out.stdout
    refused = memrepro("run", "retriever=dense", TWO, *FAST, "checks.ignore=[subsets]", tmp=tmp_path,
                       data_dir=fixtures_dir)
    errors = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and len(errors) == 1 and "unknown finding code 'subsets'" in errors[0]
    assert "checks.ignore" in errors[0] and "valid: cutoff-at-pool" in errors[0]


def test_the_committed_convmemory_table_marks_the_cascades_r10_and_hit10_as_v1s() -> None:
    import pandas as pd

    table = pd.read_csv(REPO / "results" / "tables" / "convmemory_locomo.csv", dtype=str, keep_default_na=False)
    [cascade] = [row for _, row in table.iterrows() if row["method"] == "v1 + v2 cascade, CE trained_head_lr"]
    assert cascade["R@10"].endswith("[F,S]") and cascade["Hit@10"].endswith("[F,S]")
    assert "F" not in cascade["FULL MRR"].rsplit("[", 1)[-1]  # its MRR is its own
    notes = (REPO / "results" / "tables" / "convmemory_locomo.md").read_text(encoding="utf-8")
    assert "- [F] fixed-by-first-stage (protocol check, docs/checks.md)" in notes
