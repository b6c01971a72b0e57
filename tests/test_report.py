"""``python -m memrepro report``: the miss breakdown, sweeps read from settings, recipes against presets, the paper
layout of the matrix, and the site built from real fixture runs (kept copies read in place, damaged runs named and
left out, refusals in one line). The pages in a real browser: tests/test_report_browser.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from report_site import SWEEP_K, build_site, make_runs

from memrepro.site.misses import Buckets, best_gold_rank, breakdown
from memrepro.site.sweeps import find_sweeps


# ------------------------------------------------------------------------------------------------ miss breakdown

def _row(ranks: dict, category: str = "1", excluded: str | None = None, returned: int = 100) -> dict:
    return {"gold_ranks": ranks, "category": category, "excluded": excluded, "n_returned": returned}


def test_best_gold_rank_is_the_smallest_rank_of_a_returned_gold_memory() -> None:
    assert best_gold_rank(_row({"a": 7, "b": 3, "c": None})) == 3
    assert best_gold_rank(_row({"a": None})) is None
    assert best_gold_rank(_row({})) is None


def test_buckets_golden() -> None:
    buckets = Buckets(689)
    assert buckets.labels == ["1", "2–5", "6–10", "11–50", "51–689", "not retrieved"]
    assert [buckets.of(r) for r in (1, 2, 5, 6, 10, 11, 50, 51, 689, None)] == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5]
    # a run returning 5 items has no bucket past 5
    assert Buckets(5).labels == ["1", "2–5", "not retrieved"]
    assert Buckets(5).of(None) == 2


def test_breakdown_counts_scored_rows_overall_and_per_category() -> None:
    rows = [_row({"a": 1}, "1"), _row({"a": 4}, "1"), _row({"a": 8, "b": 60}, "2"), _row({"a": None}, "2"),
            _row({"a": 1}, "2", excluded="abstention"), _row({"a": 30}, "3")]
    result = breakdown(rows, {"1": "multi-hop", "2": "temporal"})
    assert result.groups == ["all", "multi-hop", "temporal", "3"]
    assert result.counts == [[1, 1, 1, 1, 0, 1], [1, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 1], [0, 0, 0, 1, 0, 0]]
    assert result.excluded == {"abstention": 1}
    assert result.table()[0]["n"] == 5 and result.table()[0]["cells"][0] == (1, 0.2)


# ------------------------------------------------------------------------------------------------ sweeps

def _run(name: str, retriever: dict, dataset: str = "personabench") -> SimpleNamespace:
    return SimpleNamespace(dataset=dataset, retriever_name="rfmem", encoder_label="minilm",
                           settings={"dataset": {"name": dataset}, "retriever": retriever},
                           preference=(True, 1, 0.0, name), folder=Path(name))


def test_a_grid_of_runs_is_one_sweep_and_settings_that_move_together_are_one_dimension() -> None:
    runs = [_run(f"r{k}{a}{t}", {"k": k, "fanout": k // 5, "alpha": a, "tau": t})
            for k in (5, 10) for a in (0.1, 0.5, 0.9) for t in (0.2, 0.3)]
    runs.append(_run("lone", {"k": 5, "fanout": 1, "alpha": 0.5, "tau": 0.25, "clustering": "dbscan"}))
    sweeps = find_sweeps(runs)
    assert len(sweeps) == 1
    sweep = sweeps[0]
    assert len(sweep.runs) == 12 and "lone" not in {r.folder.name for r in sweep.runs}
    assert sweep.dimensions == (("retriever.k", "retriever.fanout"), ("retriever.alpha",), ("retriever.tau",))
    assert sweep.title == "rfmem on personabench (minilm): k, fanout × alpha × tau"


def test_runs_that_are_not_a_grid_are_no_sweep() -> None:
    # 3 of the 4 combinations of a small grid (a large one may miss a quarter: failed points)
    runs = [_run("a", {"alpha": 0.1, "tau": 0.2}), _run("b", {"alpha": 0.5, "tau": 0.2}),
            _run("c", {"alpha": 0.1, "tau": 0.3})]
    assert find_sweeps(runs) == []


def test_a_point_another_command_added_is_set_aside() -> None:
    runs = [_run(f"g{a}{t}", {"alpha": a, "tau": t}) for a in (0.1, 0.3, 0.5, 0.7) for t in (0.2, 0.3)]
    runs.append(_run("extra", {"alpha": 0.5, "tau": 0.9}))
    (sweep,) = find_sweeps(runs)
    assert len(sweep.runs) == 8 and "extra" not in {r.folder.name for r in sweep.runs}


# ------------------------------------------------------------------------------------------------ the matrix

def test_matrix_keeps_the_papers_layout_and_footnotes_reasons(tmp_path: Path) -> None:
    from report_site import MATRIX

    from memrepro.site.matrix import read_matrix

    (tmp_path / "reproduction_matrix.csv").write_text(MATRIX, encoding="utf-8")
    (tmp_path / "fixture_table.md").write_text("# Fixture Table 2: recall by category\n", encoding="utf-8")
    table, second = read_matrix(tmp_path)
    assert table.title == "Fixture Table 2: recall by category" and second.title == "second_table"
    assert [(g, [r.label for r in rows]) for g, rows in table.row_groups()] == [
        ("encoder A", ["Method one"]), ("encoder B", ["Method one"])]
    assert table.column_groups() == [("R@5", 2), ("R@10", 2)]
    assert table.counts == {"OK": 1, "OKish": 1, "FAIL": 1, "not comparable": 2, "missing": 3}
    assert table.notes == ["not comparable: another encoder stands in", "missing: no offline weights"]
    cell = table.cells[("encoder B / Method one", "R@10 Basic")]
    assert (cell.ours, cell.committed, cell.note, cell.kind) == ("0.6100", True, 1, "not comparable")
    assert second.column_groups() == [("", 1)] and read_matrix(tmp_path / "absent") is None
    assert cell.earlier is None  # a cell whose run was computed again carries its earlier value from the ledger
    (tmp_path / "recomputed.csv").write_text("table,row,column,earlier\nreproduction_matrix,fixture_table · "
                                             "encoder B / Method one · R@10 Basic,ours,0.6000\n", encoding="utf-8")
    assert read_matrix(tmp_path)[0].cells[("encoder B / Method one", "R@10 Basic")].earlier == "0.6000"


def test_matrix_cells_carry_the_findings_on_our_number(tmp_path: Path) -> None:
    from report_site import MATRIX

    from memrepro.errors import DamagedFileError
    from memrepro.site.matrix import read_matrix

    (tmp_path / "reproduction_matrix.csv").write_text(MATRIX, encoding="utf-8")
    table, second = read_matrix(tmp_path)
    cells = table.cells
    assert cells[("encoder A / Method one", "R@5 Basic")].findings == () and not second.findings
    assert cells[("encoder A / Method one", "R@10 Overall")].tags == "[S]"
    kept = cells[("encoder B / Method one", "R@10 Basic")]  # a committed cell keeps its findings (‡ stripped)
    assert kept.tags == "[S]" and kept.findings[0].message.startswith("encoder X stands in for encoder A")
    assert [(n.tag, n.code, n.cells) for n in table.finding_notes()] == [("N", "subset", 2),
                                                                         ("S", "substituted-model", 2)]
    # a matrix written before the column existed has no findings; a damaged column names the file
    (tmp_path / "reproduction_matrix.csv").write_text(
        "\n".join(line.rsplit(",", 1)[0] if line.startswith(("table", "second")) else line
                  for line in MATRIX.splitlines() if not line.startswith("fixture")), encoding="utf-8")
    assert read_matrix(tmp_path)[0].findings == []
    (tmp_path / "reproduction_matrix.csv").write_text(MATRIX.replace(",[]\n", ",[{oops\n", 1), encoding="utf-8")
    with pytest.raises(DamagedFileError, match="reproduction_matrix.csv: the findings of fixture_table / encoder A "
                                               "/ Method one / R@5 Basic .*rerun `python -m memrepro tables`"):
        read_matrix(tmp_path)


# ------------------------------------------------------------------------------------------------ the site

@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path):
    root = tmp_path_factory.mktemp("report")
    return build_site(make_runs(root, fixtures_dir), fixtures_dir)


def _page(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_site_has_every_page_and_no_run_is_named_by_its_id(site) -> None:
    out = site.site
    runs = sorted((out / "runs").glob("*.html"))
    assert len(runs) == 5  # dense, bm25, three sweep points (one from its kept copy); the damaged ones left out
    assert (out / "compare" / "fixture_bm25_vs_dense.html").is_file()
    (sweep,) = (out / "sweeps").glob("*.html")
    index = _page(out / "index.html")
    assert "Fixture Table 2: recall by category" in index and 'href="reproduction.html#fixture_table"' in index
    assert "Fixture: BM25 vs dense" in index and sweep.name in index
    text = " ".join(_page(p) for p in runs)
    for folder in (site.dense, site.bm25, *site.sweep):
        # the id is shown as metadata, never as a run's name
        assert f"<h1 title=" in _page(out / "runs" / f"{folder.name}.html")
    labels = re.findall(r'<a href="runs/[0-9a-f]{16}\.html" title="[^"]*">([^<]*)</a>', _page(out / "runs.html"))
    assert len(labels) == 5 and not any(re.search(r"[0-9a-f]{8}", label) for label in labels), labels
    assert "k=1" in labels and "k=3" in labels and "k=5" in labels
    assert "kept" in _page(out / "runs.html") and text


def test_damaged_runs_are_named_in_one_line_and_left_out(site) -> None:
    lines = site.warnings
    assert any(str(site.damaged) in line and "queries.jsonl" in line for line in lines), lines
    assert any(str(site.damaged_kept) in line and "metrics.json" in line for line in lines), lines
    assert all("\n" not in line for line in lines)
    assert not (site.site / "runs" / f"{site.damaged.name}.html").exists()
    index = _page(site.site / "index.html")
    assert "Left out" in index and str(site.damaged) in index


def test_run_page_shows_settings_metrics_misses_and_explorer_data(site) -> None:
    page = _page(site.site / "runs" / f"{site.sweep[1].name}.html")
    assert "familiarity" in page and "<code>k</code>" in page  # the setting that differs from the preset
    assert "Miss breakdown" in page and 'id="miss-chart"' in page and "not retrieved" in page
    meta = json.loads(re.search(r'<script type="application/json" class="explorer-meta">(.*?)</script>', page,
                                re.S).group(1))
    rows_file = site.site / meta["chunks"][0]
    rows = json.loads(re.search(r"MR\.addRows\(\"[0-9a-f]+\", 0, (.*)\);", rows_file.read_text()).group(1))
    assert len(rows) == meta["rows"] > 0
    texts = json.loads(re.search(r"MR\.addTexts\(\"\w+\", (.*)\);", (site.site / meta["texts"]).read_text()).group(1))
    assert texts["missing"] == "" and texts["queries"]
    # every memory a row shows has its text
    assert all(texts["texts"][m] for row in rows for m, _ in row[5] + row[6])


def test_sweep_page_marks_the_best_point_and_plots_each_setting(site) -> None:
    (sweep,) = (site.site / "sweeps").glob("*.html")
    page = _page(sweep)
    assert page.count('class="best"') == 1 and "against k" in page
    assert all(f"<td>{k}</td>" in page for k in SWEEP_K)


def test_comparison_page_has_the_paired_test_and_the_moves(site) -> None:
    page = _page(site.site / "compare" / "fixture_bm25_vs_dense.html")
    assert "95% CI" in page and "wins" in page and "Where the gold moved" in page
    assert 'data-texts="' in page


# ------------------------------------------------------------------------------------------------ the protocol check

def _box(page: str) -> str:
    """The findings box of a page (its HTML)."""
    return re.search(r'<section class="findings[^"]*" id="findings">(.*?)</section>', page, re.S).group(1)


def _said(text: str) -> str:
    """``text`` as the pages write it (Jinja's escaping)."""
    from markupsafe import escape

    return str(escape(text))


def test_findings_link_to_their_section_of_the_checks_page_in_the_docs_site() -> None:
    from memrepro.checks import CODES
    from memrepro.site.findings import checks_doc

    assert checks_doc("../index.html") == "../checks.html" and checks_doc(None) is None
    # each code is a heading of docs/checks.md: the anchor the report links to (mkdocs ids headings by their text)
    headings = re.findall(r"^### (\S+)$", (Path(__file__).resolve().parents[1] / "docs" / "checks.md").read_text(
        encoding="utf-8"), re.M)
    assert set(CODES) <= set(headings)


def test_run_pages_show_the_findings_each_run_recorded_above_its_metrics(site) -> None:
    from memrepro.cli.check import load_run

    for folder in (site.dense, site.bm25, site.sweep[1], site.kept_copy):
        page = _page(site.site / "runs" / f"{folder.name}.html")
        box = _box(page)
        recorded = load_run(folder).record.findings
        # the fixture's two conversations: another file than the paper's, fewer queries, pools of 6-12 memories
        assert {"data-variant", "subset", "cutoff-at-pool"} <= {f["code"] for f in recorded}
        assert box.count("<li data-code=") == len(recorded) and "Recorded by the run" in box
        for finding in recorded:
            assert f'data-code="{finding["code"]}"' in box and _said(finding["message"]) in box
            assert _said(finding["fix"]) in box
        assert page.index('id="findings"') < page.index('class="list metrics"')
        # the metric columns a finding names carry its tag
        assert re.search(r'>recall_list@10 <span class="tag"[^>]*>\[P[,\w]*\]</span>', page)
    runs = _page(site.site / "runs.html")
    assert f'href="runs/{site.dense.name}.html#findings"' in runs


def test_an_older_run_is_checked_with_the_pools_of_the_data_it_read() -> None:
    from conftest import run_record

    from memrepro.checks import RunView
    from memrepro.runs.record import RunRecord
    from memrepro.site.findings import Pools, run_findings

    def older(findings=None) -> RunView:  # rows that do not record their candidate pool, as runs before the check
        document = run_record(metric_names=["recall_list@10"], primary=["recall_list@10"], findings=findings,
                              provenance={"data_sha256": "d" * 64})
        rows = [{"split": "seed7", "query_id": f"conv-26::qa{i}", "episode_id": "conv-26", "category": "1",
                 "excluded": None, "n_returned": 8, "metrics": {"recall_list@10": 1.0}} for i in range(3)]
        return RunView({"retriever": {}}, RunRecord.from_json(document), rows)

    checked = run_findings(older(), lambda: Pools("d" * 64, {"conv-26": 8}))
    assert "cutoff-at-pool" in {f.code for f in checked.findings} and "without candidate pools" not in checked.source
    # pools of other data are not this run's: the pool findings are not checked, and the page says so
    checked = run_findings(older(), lambda: Pools("e" * 64, {"conv-26": 8}))
    assert "cutoff-at-pool" not in {f.code for f in checked.findings}
    assert "without candidate pools" in checked.source
    recorded = run_findings(older([]), lambda: pytest.fail("a run that recorded its findings needs no pools"))
    assert recorded.findings == [] and recorded.source.startswith("Recorded by the run")


def test_comparison_page_says_the_findings_and_the_mdd_compare_prints(site) -> None:
    from memrepro.cli.check import load_run as check_load
    from memrepro.compare import compare, load_run
    from memrepro.tables.naming import labels

    page = _page(site.site / "compare" / "fixture_bm25_vs_dense.html")
    box = _box(page)
    runs = [load_run(site.dense), load_run(site.bm25)]
    for folder, name in zip((site.dense, site.bm25), labels(runs)):
        for finding in check_load(folder).record.findings:
            assert f"<b>{_said(name)}</b>: {_said(finding['message'])}" in box
    assert page.index('id="findings"') < page.index("<h2>Per query")
    rows = re.findall(r"<tr(?: class=\"overall\")?><td>(.*?)</tr>", page.split('class="list comparison"')[1], re.S)
    frame = compare(runs, resamples=500, by="category")
    for line in frame.to_dict("records"):
        group = "all" if line["queries"] == "all" else line["queries"].split(" ", 1)[1]
        row = next(r for r in rows if r.startswith(line["metric"]) and f"<td>{group}</td>" in r)
        assert f'<td class="num">{line["MDD"]}</td><td class="verdict">{line["verdict"]}</td>' in row, (line, row)
    # on the fixture every list holds the whole pool: recall@10 is 1 for both, not distinguishable
    assert any("not distinguishable at n = 20" in r and r.startswith("recall_list@10") for r in rows)
    index = _page(site.site / "index.html")
    assert re.search(r'href="compare/fixture_bm25_vs_dense.html#findings">\[P,D,N\]</a>', index)


def test_reproduction_cells_show_their_tags_and_the_summary_explains_them(site) -> None:
    page = _page(site.site / "reproduction.html")
    section = page.split('id="fixture_table"', 1)[1].split("</section>", 1)[0]
    cells = section.split("</table>", 1)[0]
    assert cells.count('<span class="tag">[S]</span>') == 2 and cells.count('<span class="tag">[N]</span>') == 2
    # the sentence on hover and under the table, once per distinct finding
    assert "&#10;[S] substituted-model: encoder X stands in for encoder A, the encoder of this paper cell" in section
    notes = section.split('class="notes findings-notes"', 1)[1]
    assert notes.count("<li ") == 2 and "(2 cells): encoder X stands in for encoder A" in notes
    index = _page(site.site / "index.html")
    legend = index.split('id="tags"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'<tr data-code="([a-z-]+)"><td class="tag">\[(\w)\]</td>', legend) == [
        ("subset", "N"), ("substituted-model", "S")]
    assert "a model stands in for the one the configuration or the paper names" in legend
    assert "No run here is scored with corrected gold" in index  # and how to make a pair
    assert "dataset.gold_labels=corrected" in index.split('id="gold-corrections"', 1)[1]


@pytest.mark.integration
def test_the_summary_shows_what_the_gold_corrections_change(tmp_path: Path, fixtures_dir: Path) -> None:
    from report_site import FAST, corrected_gold, environment

    from memrepro import runner
    from memrepro.api import compose
    from memrepro.datasets.gold_corrections import corrections_effect
    from memrepro.site.build import Options, build
    from memrepro.tables.runs import Run

    results = tmp_path / "results"
    with corrected_gold("conv-26::qa1", ("D1:3",)), environment(
            MEMREPRO_DATA_DIR=str(fixtures_dir), MEMREPRO_CACHE_DIR=str(tmp_path / "cache"),
            MEMREPRO_RESULTS_DIR=str(results)):
        original = runner.run(compose("locomo", "fake", "bm25", FAST)).folder
        corrected = runner.run(compose("locomo", "fake", "bm25", [*FAST, "dataset.gold_labels=corrected"])).folder
        lonely = runner.run(compose("locomo", "fake", "dense", [*FAST, "dataset.gold_labels=corrected"])).folder
        built = build(Options(results, None, tmp_path / "site", workers=0, resamples=200), print)
        effects = {m: corrections_effect(Run(original), Run(corrected), m) for m in Run(original).record.primary}
    section = _page(built.index).split('id="gold-corrections"', 1)[1].split('id="runs"', 1)[0]
    assert section.count("<tbody>") == 1  # one system has both runs; the corrected dense run has no twin
    assert f"runs/{original.name}.html" in section and f"runs/{corrected.name}.html" in section
    assert lonely.name not in section
    assert "memrepro/datasets/corrections/locomo.yaml, version 1: 1 questions" in section
    changed = 0
    for metric, effect in effects.items():
        row = re.search(rf"<td>{re.escape(metric)}</td>(.*?)</tr>", section, re.S).group(1)
        cells = re.findall(r'<td class="num">([^<]*)</td>', row)
        assert cells == [str(effect.questions), f"{effect.before:.4f}", f"{effect.after:.4f}",
                         f"{effect.overall_before:.4f}", f"{effect.overall_after:.4f}",
                         f"{effect.overall_delta:+.4f}"], (metric, cells)
        changed += effect.before != effect.after
    assert effects and all(e.questions > 0 for e in effects.values()) and changed  # D1:3 is not where qa1's answer is
    # the corrected run's page says it is scored with other gold than the paper's
    assert "corrected gold labels" in _box(_page(tmp_path / "site" / "runs" / f"{corrected.name}.html"))


@pytest.mark.integration
def test_the_kept_cascade_against_v1_says_r10_and_hit10_cannot_differ(tmp_path: Path) -> None:
    """The cascade reorders only v1's top 10: its comparison page says R@10 and Hit@10 are v1's by construction,
    beside the numbers, with the MDD and "not distinguishable" where compare says it."""
    from memrepro.site.build import Options, build_comparison

    kept = Path(__file__).resolve().parents[1] / "results" / "kept" / "locomo"
    cascade = kept / "cascade" / "all-mpnet-base-v2" / "de30af583e07961a"  # the README's design-card run
    config = yaml_of(cascade)
    [v1] = [f for f in (kept / "convmemory_v1" / "all-mpnet-base-v2").iterdir()  # its first stage, on all 5 seeds
            if yaml_of(f)["retriever"] == config["retriever"]["first_stage"] and yaml_of(f)["dataset"] == config[
                "dataset"]]
    page = build_comparison(Options(tmp_path / "results", None, tmp_path / "site", resamples=200), [v1, cascade],
                            print).read_text(encoding="utf-8")
    box = _box(page)
    assert "fixed-by-first-stage" in box and "recall_list@10, hit@10" in box
    assert "cannot differ from its own first stage&#39;s (convmemory_v1, as computed inside this run)" in box
    rows = re.findall(r"<tr(?: class=\"overall\")?><td>(.*?)</tr>", page, re.S)
    overall = {r.split(" ", 1)[0].split("<", 1)[0]: r for r in rows if "<td>all</td>" in r}
    for metric in ("recall_list@10", "hit@10"):
        assert re.match(rf'{metric} <span class="tag"[^>]*>\[F\]</span>', overall[metric])
    assert "not distinguishable at n = 4,955" in overall["recall_list@10"]
    assert overall["mrr"].startswith("mrr</td>")  # the order inside the top 10: the reranker's own metric, no tag
    assert "substituted-model" in box  # a finding on every number is said once, in the box


def yaml_of(folder: Path) -> dict:
    import yaml

    return yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))


def test_a_folder_that_is_not_a_report_is_never_replaced(tmp_path: Path) -> None:
    from memrepro.site.build import Options, ReportError, build

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ReportError, match="is not a report folder"):
        build(Options(tmp_path / "results", None, tmp_path / "mine", workers=0), print)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_empty_results_give_a_page_that_says_how_to_make_a_run(tmp_path: Path) -> None:
    from memrepro.site.build import HOW_TO_RUN, Options, build

    built = build(Options(tmp_path / "results", tmp_path / "kept", tmp_path / "site", workers=0), print)
    index = _page(built.index)
    assert built.runs == 0 and "No runs yet" in index and HOW_TO_RUN in index
    assert "python -m memrepro tables" in index  # no matrix either: says how to make it


def test_texts_absent_say_why(tmp_path: Path) -> None:
    from memrepro.site.texts import TextTable

    table = TextTable("k", {"_target_": "memrepro.datasets.locomo.load_locomo", "data_dir": str(tmp_path),
                            "file": "locomo/locomo10.json"}, "0" * 64)
    table.memory("conv-26", "D1:3")
    os.environ.pop("MEMREPRO_DATA_DIR_UNUSED", None)
    env = dict(os.environ)
    try:
        os.environ["MEMREPRO_DATA_DIR"] = str(tmp_path)
        table.fill()
    finally:
        os.environ.clear()
        os.environ.update(env)
    document = table.document()
    assert document["texts"] is None and document["ids"] == ["D1:3"]
    assert "could not be read" in document["missing"] and str(tmp_path) in document["missing"]


@pytest.mark.integration
def test_compare_of_runs_on_different_benchmarks_is_refused_in_one_line(site, tmp_path: Path,
                                                                         fixtures_dir: Path) -> None:
    from report_site import FAST, environment

    from memrepro import runner
    from memrepro.api import compose

    with environment(MEMREPRO_DATA_DIR=str(fixtures_dir), MEMREPRO_CACHE_DIR=str(tmp_path / "cache"),
                     MEMREPRO_RESULTS_DIR=str(tmp_path / "results")):
        other = runner.run(compose("personabench", "fake", "familiarity",
                                   [*FAST[:-1], "dataset.communities=[community_0]", "retriever.k=5",
                                    "dataset.allow_unverified=true"])).folder
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(fixtures_dir)}
    out = subprocess.run([sys.executable, "-m", "memrepro", "report", "--compare", str(site.dense), str(other),
                          "--out", str(tmp_path / "site")], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "different benchmarks" in out.stderr
    assert not (tmp_path / "site").exists()  # refused before anything is written

    ok = subprocess.run([sys.executable, "-m", "memrepro", "report", "--compare", str(site.dense), str(site.bm25),
                         "--out", str(tmp_path / "site"), "--resamples", "200"], capture_output=True, text=True,
                        env=env, timeout=300)
    assert ok.returncode == 0, ok.stderr
    page = Path(ok.stdout.split("comparison: ", 1)[1].strip())
    assert page.is_file() and "bm25" in page.read_text(encoding="utf-8")
