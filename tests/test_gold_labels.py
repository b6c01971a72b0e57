"""Gold labels (docs/checks.md#gold-labels): the structural audit of `data check --stats`, the versioned corrections
files with their sources, `dataset.gold_labels=original` leaving every run id as it was and `corrected` making ids of
its own, and a corrections entry that names no question refused in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import composed_run_config
from memrepro.datasets.gold_audit import audit, summary
from memrepro.datasets.gold_corrections import (Correction, Corrections, CorrectionsError, apply_corrections,
                                                available, read_corrections)
from memrepro.datasets.locomo import load_locomo
from memrepro.runs.identity import run_id_payload, semantic_config
from memrepro.types import Benchmark, Episode, Memory, Protocol, Query, Split

TRACKERS = {"locomo": "https://github.com/snap-research/locomo/",  # the benchmarks' own issue trackers
            "longmemeval": "https://github.com/xiaowu0162/LongMemEval/"}


def _fixture(fixtures_dir: Path) -> Benchmark:
    return load_locomo(fixtures_dir)


def _corrections(*entries: Correction) -> Corrections:
    return Corrections("locomo", 1, "memrepro/datasets/corrections/test.yaml", "a" * 64, entries)


@pytest.mark.parametrize("name", ["locomo", "longmemeval_s"])
def test_every_shipped_correction_names_its_question_what_is_wrong_and_its_public_source(name: str) -> None:
    corrections = read_corrections(name)
    assert corrections.version >= 1 and len(corrections.sha256) == 64 and corrections.entries
    tracker = TRACKERS[name.split("_")[0]]
    for entry in corrections.entries:
        assert entry.question and entry.gold and len(entry.problem) > 40
        assert re.search(rf"{re.escape(tracker)}(issues|pull)/\d+", entry.source), entry.source
    assert available() == ["locomo.yaml", "longmemeval.yaml"]


def test_a_benchmark_without_corrections_is_refused_in_one_line() -> None:
    with pytest.raises(CorrectionsError, match="no corrections file for personabench .*gold_labels=original"):
        read_corrections("personabench")


def test_an_entry_whose_question_does_not_exist_is_refused_naming_file_entry_and_id(fixtures_dir: Path) -> None:
    bench = _fixture(fixtures_dir)  # conv-26 only: the shipped LoCoMo entries name conv-41 and a later conv-26 qa
    with pytest.raises(CorrectionsError) as refused:
        apply_corrections(bench)
    text = str(refused.value)
    assert "\n" not in text and "memrepro/datasets/corrections/locomo.yaml: entry 1" in text
    assert "'conv-41::qa10' does not exist in locomo" in text and refused.value.exit_code == 2
    outside = _corrections(Correction("conv-26::qa0", "wrong turn", ("D99:1",), "https://example.org/1"))
    with pytest.raises(CorrectionsError, match="entry 1: question 'conv-26::qa0': corrected gold 'D99:1' is not"):
        apply_corrections(bench, outside)


def test_corrected_gold_replaces_the_entrys_gold_and_is_other_data(fixtures_dir: Path) -> None:
    bench = _fixture(fixtures_dir)
    fixed = apply_corrections(bench, _corrections(Correction("conv-26::qa0", "wrong turn", ("D2:2",), "https://x")))
    before, after = ({q.id: q for q in b.queries} for b in (bench, fixed))
    assert after["conv-26::qa0"].gold == ("D2:2",) and before["conv-26::qa0"].gold == ("D1:3",)
    assert all(after[q].gold == before[q].gold for q in before if q != "conv-26::qa0")
    assert fixed.data_sha256 != bench.data_sha256 and fixed.files == bench.files
    assert fixed.options["gold_labels"] == {"mode": "corrected", "file": "memrepro/datasets/corrections/test.yaml",
                                            "version": 1, "sha256": "a" * 64, "corrected": 1}


def test_original_gold_leaves_every_run_id_unchanged_and_corrected_gets_its_own() -> None:
    config = composed_run_config(["dataset=locomo", "retriever=dense", "encoder=fake"])
    assert config["dataset"]["gold_labels"] == "original"
    before = {k: v for k, v in config["dataset"].items() if k != "gold_labels"}  # a run written before the switch
    assert semantic_config(config) == semantic_config({**config, "dataset": before})
    corrected = {**config, "dataset": {**config["dataset"], "gold_labels": "corrected"}}
    assert semantic_config(corrected) != semantic_config(config)
    quiet = {**config, "checks": {"ignore": ["subset"]}}  # what is printed is no part of a run id either
    assert semantic_config(quiet) == semantic_config(config)
    payload = run_id_payload(config, "d" * 64, {"model": "fake"})
    assert payload == run_id_payload({**config, "dataset": before}, "d" * 64, {"model": "fake"})


@pytest.mark.integration
def test_a_corrected_run_whose_corrections_do_not_fit_the_data_is_refused_in_one_line(tmp_path: Path,
                                                                                        fixtures_dir: Path) -> None:
    from test_own_system import FAST, memrepro

    out = memrepro("run", "retriever=dense", *FAST, "dataset.gold_labels=corrected", tmp=tmp_path,
                   data_dir=fixtures_dir)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    [line] = [line for line in out.stderr.splitlines() if "error" in line]
    assert "locomo.yaml: entry 1: question 'conv-41::qa10' does not exist" in line


def test_load_benchmark_applies_the_corrections_only_when_asked(fixtures_dir: Path, monkeypatch) -> None:
    import memrepro.datasets.gold_corrections as gold
    from memrepro.stages import load_benchmark

    monkeypatch.setattr(gold, "read_corrections", lambda name: _corrections(
        Correction("conv-26::qa1", "wrong turn", ("D1:3",), "https://x")))
    node = {"_target_": "memrepro.datasets.locomo.load_locomo", "data_dir": str(fixtures_dir),
            "allow_unverified": True, "file": "locomo/locomo10.json", "evidence_rule": "exact", "seeds": [7]}
    original, _ = load_benchmark(OmegaConf.create({**node, "gold_labels": "original"}))
    corrected, _ = load_benchmark(OmegaConf.create({**node, "gold_labels": "corrected"}))
    assert {q.id: q.gold for q in corrected.queries}["conv-26::qa1"] == ("D1:3",)
    assert original.gold_corrections is None and corrected.gold_corrections == "a" * 64


@pytest.mark.real_data
def test_the_shipped_corrections_apply_to_the_real_files(real_data_dir: Path) -> None:
    from memrepro.datasets.longmemeval import load_longmemeval

    locomo = {q.id: q for q in apply_corrections(load_locomo(real_data_dir)).queries}
    assert locomo["conv-41::qa10"].gold == ("D7:5",) and locomo["conv-26::qa138"].gold == ("D17:21",)
    oracle = {q.id: q for q in apply_corrections(load_longmemeval(real_data_dir, variant="oracle")).queries}
    assert oracle["eac54add"].gold == ("answer_0d4d0348_2",)


# ------------------------------------------------------------------------------------------------ the audit

def _bench(queries: list[Query]) -> Benchmark:
    episodes = {e: Episode(e, tuple(Memory(f"D{i}", "t", i) for i in range(3))) for e in ("a", "b")}
    return Benchmark("toy", episodes, tuple(queries), (Split("all", ("a", "b")),), Protocol(("mrr",), ("mrr",)), ())


def test_the_audit_lists_each_structural_problem_and_nothing_on_clean_gold() -> None:
    clean = _bench([Query("q1", "what?", "a", ("D0",), "1"), Query("q2", "when?", "b", ("D1",), "1"),
                    Query("q3", "gone", "b", (), "1", excluded="abstention")])
    assert audit(clean) == []
    messy = _bench([Query("q1", "What?", "a", ("D0", "D0"), "1"), Query("q2", "what? ", "a", ("D1",), "1"),
                    Query("q3", "x", "b", (), "1", excluded="no_gold"), Query("q4", "y", "a", ("D9",), "1")])
    found = {(p.kind, p.question) for p in audit(messy)}
    assert found == {("gold listed twice", "q1"), ("duplicate question", "q2"), ("empty gold", "q3"),
                     ("evidence points to no memory", "q4")}
    counts = summary(audit(messy))
    assert list(counts) == ["empty gold", "evidence points to no memory", "gold outside its episode",
                            "gold listed twice", "duplicate question"] and counts["gold outside its episode"] == 0


def test_the_audit_names_gold_of_another_episode() -> None:
    episodes = {"a": Episode("a", (Memory("A1", "t", 0),)), "b": Episode("b", (Memory("B1", "t", 0),))}
    bench = Benchmark("toy", episodes, (Query("q1", "x", "a", ("B1",), "1"),), (Split("all", ("a", "b")),),
                      Protocol(("mrr",), ("mrr",)), ())
    [problem] = audit(bench)
    assert problem.kind == "gold outside its episode" and "a memory of b" in problem.detail


def test_the_audit_reads_locomos_raw_evidence_including_dropped_questions(fixtures_dir: Path) -> None:
    bench = _fixture(fixtures_dir)
    problems = audit(bench, fixtures_dir / "locomo" / "locomo10.json")
    by_question = {p.question: p for p in problems}
    assert by_question["conv-26::qa4"].kind == "empty gold"
    assert by_question["conv-26::qa5"].kind == "evidence points to no memory"
    assert "'D1:4; D2:1' names no turn of conv-26" in by_question["conv-26::qa5"].detail


@pytest.mark.real_data
def test_data_check_stats_writes_the_gold_audit_of_the_real_locomo(tmp_path: Path, real_data_dir: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    from memrepro.cli.data import main

    main(["check", "--stats", "--benchmark", "locomo", "--data-dir", str(real_data_dir),
          "--stats-dir", str(tmp_path)])
    assert ("gold audit locomo: empty gold 4, evidence points to no memory 9, gold listed twice 1, duplicate "
            "question 12") in capsys.readouterr().out
    document = json.loads((tmp_path / "locomo.gold_audit.json").read_text())
    problems = {(p["kind"], p["question"]) for p in document["problems"]}
    assert ("evidence points to no memory", "conv-26::qa37") in problems  # 'D8:6; D9:17': dropped by the loader
    assert ("gold listed twice", "conv-50::qa5") in problems
