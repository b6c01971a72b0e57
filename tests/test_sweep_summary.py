"""The sweep summary (memrepro.sweep): swept parameters as columns, the primary metrics, the best point marked,
skipped and restored points included, written as sweep.md / sweep.csv. End to end: tests/test_cli.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from conftest import run_record
from memrepro.runs.record import RunRecord
from memrepro.sweep import BEST, Point, parameters, summarize, summary_frames, write_summary

SWEEP = ("dataset=personabench", "encoder=minilm", "retriever=rfmem_personabench", "retriever.engine=compiled")


def record(run_id: str, recall5: float, *, dataset: str = "personabench", splits: int = 1) -> RunRecord:
    primary = ["pb_recall@5", "pb_recall"] if dataset == "personabench" else ["mrr"]
    values = {m: recall5 for m in primary}
    split_means = {f"seed{s}": {"n": 10, **{m: recall5 + 0.01 * s for m in primary}} for s in range(splits)}
    summary = {"n": 10 * splits, "splits": split_means, "pooled": values,
               "split_mean": {m: recall5 for m in primary},
               "split_std": {m: (0.02 if splits > 1 else None) for m in primary}}
    return RunRecord.new(run_record(run_id, dataset, summary=summary, metric_names=primary, primary=primary,
                                    latency={"batched_amortized_ms_per_query": 0.25}))


def point(alpha: float, tau: float, recall5: float, state: str = "computed", **kwargs) -> Point:
    run_id = f"{int(alpha * 10):x}{int(tau * 10):x}" + "0" * 14
    return Point((*SWEEP, f"retriever.recollection.alpha={alpha}", f"retriever.gate.tau={tau}"),
                 Path(f"results/runs/personabench/rfmem/all-MiniLM-L6-v2/{run_id}"),
                 record(run_id, recall5, **kwargs), state)


def grid() -> list[Point]:
    recalls = {(0.1, 0.2): 0.38, (0.1, 0.3): 0.3925, (0.5, 0.2): 0.3742, (0.5, 0.3): 0.3823, (0.9, 0.2): 0.3827,
               (0.9, 0.3): 0.3827}
    states = ["computed", "skipped (complete)", "restored", "computed", "computed", "computed"]
    return [point(a, t, r, s) for ((a, t), r), s in zip(recalls.items(), states)]


def test_an_alpha_by_tau_grid_is_one_table_of_its_swept_parameters() -> None:
    shown, data = summary_frames(grid())
    assert list(shown.columns) == ["alpha", "tau", "pb_recall@5", "pb_recall", "ms/query (batched)", "state", "best"]
    assert shown[["alpha", "tau"]].values.tolist() == [["0.1", "0.2"], ["0.1", "0.3"], ["0.5", "0.2"],
                                                       ["0.5", "0.3"], ["0.9", "0.2"], ["0.9", "0.3"]]
    assert shown["pb_recall@5"].tolist() == ["0.3800", "0.3925", "0.3742", "0.3823", "0.3827", "0.3827"]
    # the best point by the benchmark's first primary metric, and only it
    assert shown["best"].tolist() == ["", BEST, "", "", "", ""]
    # skipped and restored points are rows like any other, saying so
    assert shown["state"].tolist()[:3] == ["computed", "skipped (complete)", "restored"]
    # the CSV: full override keys, unrounded means, where each run is
    assert list(data.columns[:2]) == ["retriever.recollection.alpha", "retriever.gate.tau"]
    assert data["pb_recall@5"].tolist()[1] == 0.3925 and data["best"].tolist() == [False, True] + [False] * 4
    assert all(folder.endswith(run_id) for folder, run_id in zip(data["folder"], data["run_id"]))


def test_ties_are_all_marked_and_several_benchmarks_each_get_their_best() -> None:
    tied = [point(0.1, 0.2, 0.5), point(0.5, 0.2, 0.5), point(0.9, 0.2, 0.4)]
    assert summary_frames(tied)[0]["best"].tolist() == [BEST, BEST, ""]
    locomo = Point(("dataset=locomo", "retriever=dense"), Path("results/runs/locomo/dense/m/ffff000000000000"),
                   record("ffff000000000000", 0.3, dataset="locomo", splits=5), "computed")
    pb = Point(("dataset=personabench", "retriever=dense"), Path("results/runs/personabench/dense/m/ee00000000000000"),
               record("ee00000000000000", 0.2), "computed")
    shown, data = summary_frames([locomo, pb])
    assert list(shown.columns[:1]) == ["dataset"] and shown["best"].tolist() == [BEST, BEST]
    # each benchmark's own primary metrics; LoCoMo's five splits as mean ± std of the split means
    assert shown["mrr"].tolist() == ["0.3000 ± 0.0200", ""] and shown["pb_recall@5"].tolist() == ["", "0.2000"]
    assert data["mrr std"].tolist()[0] == 0.02


def test_parameters_are_the_overrides_whose_value_differs() -> None:
    points = grid()[:2]
    assert parameters(points) == {"retriever.gate.tau": ["0.2", "0.3"]}  # alpha is the same at both points
    lists = [Point(("dataset.seeds=[7,11]",), Path("a/b/c/1"), points[0].record, "computed"),
             Point(("dataset.seeds=[23]", "+retriever.note=x"), Path("a/b/c/2"), points[0].record, "computed")]
    assert parameters(lists) == {"dataset.seeds": ["[7,11]", "[23]"], "retriever.note": ["-", "x"]}


def test_a_point_with_nothing_swept_is_named_by_its_run(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "personabench" / "rfmem" / "all-MiniLM-L6-v2" / ("a" * 16)
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"dataset": {"name": "personabench"},
                                                        "retriever": {"k": 5}}))
    shown, _ = summary_frames([Point(SWEEP, folder, record("a" * 16, 0.3), "computed")])
    assert shown["run"].tolist() == ["rfmem (all-MiniLM-L6-v2)"]


def test_written_beside_the_sweep_and_printed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from memrepro.runner import RunOutcome

    points = grid()
    jobs = [(p.overrides, RunOutcome(p.folder, p.state != "computed", p.record, {}, p.state == "restored"))
            for p in points]
    summarize([*jobs, (("retriever.k=3",), None)], tmp_path)  # a job that returned no run is left out
    printed = capsys.readouterr().out
    assert printed.count("| alpha") == 1 and f"wrote {tmp_path / 'sweep.md'}" in printed
    markdown = (tmp_path / "sweep.md").read_text()
    assert markdown.startswith("# Sweep: 6 points") and markdown.count("\n| 0.") == 6
    csv = pd.read_csv(tmp_path / "sweep.csv")
    assert len(csv) == 6 and csv["state"].tolist() == [p.state for p in points]
    text, _ = write_summary(points, tmp_path)
    assert text in printed


def test_no_summary_when_no_point_returned_a_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    summarize([(("k=1",), None), (("k=2",), SimpleNamespace())], tmp_path)
    assert capsys.readouterr().out == "" and not list(tmp_path.iterdir())
