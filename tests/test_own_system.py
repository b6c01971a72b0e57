"""Bring your own system (issue 16): eval of run files, the Retriever Protocol and memrepro.evaluate, BM25,
compare, leaderboard, export, first-run fetching, --help. Fake encoder and tiny fixtures unless marked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import ir_measures
import pytest

from memrepro.evaluation.significance import paired_bootstrap
from memrepro.runs.folder import COMPLETE, read_queries

REPO = Path(__file__).resolve().parents[1]
FAST = ("encoder=fake", "latency.batch1_queries=2", "latency.warmup=1", "runtime.progress=false")
TWO = "dataset.file=locomo/locomo10_two_conversations.json"  # one dev + one test conversation per seed


def memrepro(*args: str, tmp: Path, data_dir: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_RESULTS_DIR": str(tmp / "results"),
               "MEMREPRO_CACHE_DIR": str(tmp / "cache"), "MEMREPRO_LOG_DIR": str(tmp / "logs"), "TQDM_DISABLE": "1",
               "MEMREPRO_AUTO_DOWNLOAD": "0", "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-m", "memrepro", *args], capture_output=True, text=True, env=environ,
                          cwd=tmp, timeout=timeout)


def runs_under(tmp: Path, dataset: str, retriever: str) -> list[Path]:
    return sorted(p.parent for p in (tmp / "results" / "runs" / dataset / retriever).rglob(COMPLETE))


def metrics_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def per_query(folder: Path) -> dict[str, dict]:
    return {f"{r['split']}::{r['query_id']}": r["metrics"] for r in read_queries(folder)}


def edit_one_mrr(queries: Path) -> None:
    """Change one scored row's MRR in ``queries.jsonl``: the file still parses, but its numbers would move."""
    lines = queries.read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if json.loads(line).get("metrics"))  # a scored row
    row = json.loads(lines[at])
    row["metrics"]["mrr"] = 1.0 if row["metrics"]["mrr"] != 1.0 else 0.5  # would move the mean and the Δ
    lines[at] = json.dumps(row) + "\n"
    queries.write_text("".join(lines), encoding="utf-8")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> tuple[Path, Path, Path]:
    """dense and bm25 on the two-conversation LoCoMo fixture, full rankings kept in run.trec."""
    tmp = tmp_path_factory.mktemp("two_runs")
    for retriever in ("dense", "bm25"):
        out = memrepro("run", f"retriever={retriever}", TWO, *FAST, "output.top_n=1000", tmp=tmp,
                       data_dir=fixtures_dir)
        assert out.returncode == 0, out.stderr[-2000:]
    return tmp, runs_under(tmp, "locomo", "dense")[0], runs_under(tmp, "locomo", "bm25")[0]


# ------------------------------------------------------------------------------------------------ §1 first run

def test_help_lists_only_commands_that_exist() -> None:
    from memrepro.__main__ import COMMANDS, _load, usage

    text = usage()
    assert "not yet available" not in text
    for name, command in COMMANDS.items():
        assert f"  {name} " in text
        assert callable(_load(command.entry)), name


def _locomo_missing(root: Path):
    from memrepro.datasets.locomo import load_locomo

    return lambda: load_locomo(root)


def test_missing_file_offline_keeps_the_loader_message(tmp_path: Path, monkeypatch) -> None:
    from memrepro.datasets.autofetch import with_fetch
    from memrepro.errors import MissingDataError

    monkeypatch.setenv("MEMREPRO_AUTO_DOWNLOAD", "1")
    monkeypatch.setenv("MEMREPRO_DATA_MIRROR", "http://127.0.0.1:9")  # nothing listens: offline
    said: list[str] = []
    with pytest.raises(MissingDataError, match="data file not found"):
        with_fetch(_locomo_missing(tmp_path), tmp_path, said.append)
    assert said == [] and not (tmp_path / "locomo").exists()


def test_fetched_file_with_a_wrong_checksum_is_refused_and_removed(tmp_path: Path, fixtures_dir: Path,
                                                                    monkeypatch) -> None:
    from memrepro.datasets.autofetch import FetchRefused, with_fetch

    monkeypatch.setenv("MEMREPRO_AUTO_DOWNLOAD", "1")
    monkeypatch.setenv("MEMREPRO_DATA_MIRROR", fixtures_dir.as_uri())  # the fixture is not the pinned file
    with pytest.raises(FetchRefused, match="does not match the pinned"):
        with_fetch(_locomo_missing(tmp_path), tmp_path)
    assert not (tmp_path / "locomo" / "locomo10.json").exists()


@pytest.mark.integration
@pytest.mark.real_data
def test_run_fetches_a_missing_benchmark_file_in_one_line(tmp_path: Path, real_data_dir: Path) -> None:
    """An empty data root and a mirror laid out like it (here: the real data folder, as a file:// URL)."""
    empty = tmp_path / "data"
    empty.mkdir()
    out = memrepro("run", *FAST, "latency.batch1_queries=0", tmp=tmp_path, data_dir=empty,
                   MEMREPRO_AUTO_DOWNLOAD="1", MEMREPRO_DATA_MIRROR=real_data_dir.as_uri())
    assert out.returncode == 0, out.stderr[-2000:]
    fetched = [line for line in out.stderr.splitlines() if "was missing: fetched" in line]
    assert len(fetched) == 1 and "sha256 verified" in fetched[0]
    assert (empty / "locomo" / "locomo10.json").read_bytes() == (real_data_dir / "locomo" / "locomo10.json").read_bytes()
    assert metrics_of(runs_under(tmp_path, "locomo", "dense")[0])["counts"]["n_scored"] == 4955


# ------------------------------------------------------------------------------------------------ §2 eval

@pytest.mark.integration
def test_eval_of_runs_own_run_file_reproduces_its_metrics_exactly(two_runs, fixtures_dir: Path) -> None:
    tmp, dense, bm25 = two_runs
    for folder, name in ((dense, "dense-again"), (bm25, "bm25-again")):
        out = memrepro("eval", TWO, f"run_file={folder / 'run.trec'}", f"name={name}", tmp=tmp,
                       data_dir=fixtures_dir)
        assert out.returncode == 0, out.stderr[-2000:]
        again = runs_under(tmp, "locomo", name)[0]
        assert per_query(again) == per_query(folder)  # every query, every metric, bit for bit
        assert metrics_of(again)["summary"] == metrics_of(folder)["summary"]
        assert {p.name for p in again.iterdir()} == {p.name for p in folder.iterdir()}
        assert metrics_of(again)["validation"]["warnings"] == {}
        # the same data verification as the run's (eval once omitted it): one record, one schema
        assert metrics_of(again)["data_verified"] == metrics_of(folder)["data_verified"]
        assert metrics_of(again)["provenance"]["data_files"] == metrics_of(folder)["provenance"]["data_files"]


def test_eval_rescores_a_damaged_complete_folder_instead_of_skipping_it(two_runs, tmp_path: Path,
                                                                       fixtures_dir: Path) -> None:
    """A second eval of the same run file skips a complete folder only when its files verify; an edited
    queries.jsonl is named, rescored from the run file, and the folder ends as the first eval wrote it."""
    from memrepro.runs.folder import run_problem

    _, dense, _ = two_runs
    args = ("eval", TWO, f"run_file={dense / 'run.trec'}", "name=dense-rescored")
    first = memrepro(*args, tmp=tmp_path, data_dir=fixtures_dir)
    assert first.returncode == 0, first.stderr[-2000:]
    folder = runs_under(tmp_path, "locomo", "dense-rescored")[0]
    original = (folder / "queries.jsonl").read_bytes()
    again = memrepro(*args, tmp=tmp_path, data_dir=fixtures_dir)
    assert again.returncode == 0 and "skipped (already complete)" in again.stdout

    edit_one_mrr(folder / "queries.jsonl")
    assert run_problem(folder)  # the damage is visible to the check eval now runs

    repaired = memrepro(*args, tmp=tmp_path, data_dir=fixtures_dir)
    assert repaired.returncode == 0, repaired.stderr[-2000:]
    assert "skipped" not in repaired.stdout and "done:" in repaired.stdout
    assert str(folder / "queries.jsonl") in repaired.stderr and "rescored" in repaired.stderr
    assert run_problem(folder) is None and (folder / "queries.jsonl").read_bytes() == original
    assert runs_under(tmp_path, "locomo", "dense-rescored") == [folder]  # rescored in place, no second folder


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.real_data
def test_eval_reproduces_a_real_locomo_bm25_run(tmp_path: Path, real_data_dir: Path) -> None:
    """Real LoCoMo (4,955 rows), BM25 (no encoding): eval of run's own full run file = run, query by query."""
    out = memrepro("run", "retriever=bm25", *FAST, "output.top_n=1000", tmp=tmp_path, data_dir=real_data_dir,
                   timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    [run] = runs_under(tmp_path, "locomo", "bm25")
    out = memrepro("eval", f"run_file={run / 'run.trec'}", "name=again", tmp=tmp_path, data_dir=real_data_dir,
                   timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    [again] = runs_under(tmp_path, "locomo", "again")
    assert per_query(again) == per_query(run) and len(per_query(run)) == 4955
    assert metrics_of(again)["summary"] == metrics_of(run)["summary"]


@pytest.mark.integration
def test_eval_jsonl_form_and_plain_query_ids(two_runs, fixtures_dir: Path) -> None:
    """JSONL {query_id: [ids]} with plain query ids (one list used in every seed holding the query)."""
    tmp, dense, _ = two_runs
    lists = {r["query_id"]: [m for m, _ in r["top"]] for r in read_queries(dense)}
    path = tmp / "mine.jsonl"
    path.write_text("".join(json.dumps({q: ids}) + "\n" for q, ids in lists.items()))
    out = memrepro("eval", TWO, f"run_file={path}", "name=mine-jsonl", tmp=tmp, data_dir=fixtures_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    assert per_query(runs_under(tmp, "locomo", "mine-jsonl")[0]) == per_query(dense)


def _benchmark(fixtures_dir: Path):
    from memrepro.datasets.locomo import load_locomo

    return load_locomo(fixtures_dir, file="locomo/locomo10_two_conversations.json")


def _write(tmp: Path, text: str, name: str = "run.trec") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def test_run_file_errors_name_file_line_and_id(tmp_path: Path, fixtures_dir: Path) -> None:
    from memrepro.runs.runfile import RunFileError, read_run_file, validate

    from memrepro.datasets.longmemeval import load_longmemeval

    bench = _benchmark(fixtures_dir)
    query = bench.queries[0]
    cases = {
        f"{query.id} Q0 D1:1 1 0.5\n": r"run\.trec:1: expected 6 TREC columns",
        f"{query.id} Q0 D1:1 first 0.5 x\n": r"run\.trec:1: rank 'first'",
        f"{query.id} Q0 D1:1 1 0.5 x\n{query.id} Q0 D99:1 2 0.4 x\n": r"run\.trec:2: unknown memory id 'D99:1'",
    }
    # LongMemEval haystacks have distinct session ids: a session of another question's haystack
    lme = load_longmemeval(fixtures_dir, variant="oracle", source="longmemeval/longmemeval_tiny.json")
    query_lme = lme.queries[0]
    other = next(e for e in lme.episodes.values() if set(e.ids) - set(lme.episodes[query_lme.episode_id].ids))
    only_there = next(i for i in other.ids if i not in lme.episodes[query_lme.episode_id].ids)
    cases[f"{query_lme.id} Q0 {only_there} 1 0.5 x\n"] = (rf"run\.trec:1: memory '{only_there}' .* is from another "
                                                         rf"episode \('{other.id}'\)")
    for text, pattern in cases.items():
        with pytest.raises(RunFileError, match=pattern) as error:
            validate(read_run_file(_write(tmp_path, text)), lme if query_lme.id in text else bench)
        assert "\n" not in str(error.value)
    with pytest.raises(RunFileError, match=r"mine\.jsonl:2: query .* listed again \(first on line 1\)"):
        read_run_file(_write(tmp_path, f'{{"{query.id}": ["D1:1"]}}\n{{"{query.id}": []}}\n', "mine.jsonl"))
    with pytest.raises(RunFileError, match=r"mine\.jsonl:1: malformed JSON"):
        read_run_file(_write(tmp_path, '{"a": [\n', "mine.jsonl"))


def test_run_file_warnings_are_counted_and_strict_makes_them_errors(tmp_path: Path, fixtures_dir: Path) -> None:
    from memrepro.runs.runfile import RunFileError, read_run_file, validate

    bench = _benchmark(fixtures_dir)
    q0, q1 = bench.queries[0], bench.queries[1]
    ids = bench.episodes[q0.episode_id].ids
    text = (f"{q0.id} Q0 {ids[0]} 1 0.9 x\n{q0.id} Q0 {ids[1]} 2 0.8 x\n{q0.id} Q0 {ids[0]} 3 0.1 x\n"
            f"nobody::qa1 Q0 {ids[0]} 1 0.5 x\n")
    parsed = read_run_file(_write(tmp_path, text))
    checked = validate(parsed, bench)
    expected_missing = sum(q.scored for s in bench.splits for q in bench.split_queries(s) if q.id != q0.id)
    assert checked.warnings == {"duplicate_memories": 1, "unknown_query_ids": 1, "missing_queries": expected_missing}
    for split in bench.splits:
        if (split.name, q0.id) in checked.rankings:
            assert checked.rankings[(split.name, q0.id)].memory_ids == (ids[0], ids[1])
        if (split.name, q1.id) in checked.rankings:
            assert checked.rankings[(split.name, q1.id)].memory_ids == ()
    with pytest.raises(RunFileError, match="strict=true makes this an error"):
        validate(parsed, bench, strict=True)


@pytest.mark.integration
def test_eval_failure_is_one_line_and_writes_nothing(tmp_path: Path, fixtures_dir: Path) -> None:
    query = _benchmark(fixtures_dir).queries[0]
    path = _write(tmp_path, f"{query.id} Q0 D77:1 1 0.5 x\n")
    out = memrepro("eval", TWO, f"run_file={path}", tmp=tmp_path, data_dir=fixtures_dir)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "run.trec:1: unknown memory id 'D77:1'" in out.stderr
    assert not (tmp_path / "results").exists()
    strict = _write(tmp_path, f"{query.id} Q0 {_benchmark(fixtures_dir).episodes[query.episode_id].ids[0]} 1 1 x\n",
                    "partial.trec")
    out = memrepro("eval", TWO, f"run_file={strict}", "strict=true", tmp=tmp_path, data_dir=fixtures_dir)
    assert out.returncode == 2 and "missing" not in out.stdout and not (tmp_path / "results").exists()
    assert "strict=true" in out.stderr
    no_file = memrepro("eval", TWO, tmp=tmp_path, data_dir=fixtures_dir)
    assert no_file.returncode == 2 and "run_file is required" in no_file.stderr and "Traceback" not in no_file.stderr


@pytest.mark.parametrize("text,said", [("", "is empty"), ("\n\n", "is empty"),
                                       ("nobody::qa1 Q0 D1:1 1 0.5 x\n", "ranks no locomo query (1 unknown query ids, "
                                                                            "e.g. 'nobody::qa1')")])
def test_a_run_file_with_nothing_to_score_is_refused(tmp_path: Path, fixtures_dir: Path, text: str,
                                                     said: str) -> None:
    from memrepro.runs.runfile import RunFileError, read_run_file, validate

    path = _write(tmp_path, text)
    with pytest.raises(RunFileError, match=re.escape(f"{path}: {said}: nothing to score")):
        validate(read_run_file(path), _benchmark(fixtures_dir))


@pytest.mark.integration
def test_eval_of_an_empty_run_file_is_one_line_and_writes_nothing(tmp_path: Path, fixtures_dir: Path) -> None:
    out = memrepro("eval", TWO, f"run_file={_write(tmp_path, '')}", tmp=tmp_path, data_dir=fixtures_dir)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1 and "run.trec: is empty: nothing to score" in lines[0]
    assert not (tmp_path / "results").exists()


@pytest.mark.integration
def test_a_run_file_whose_scores_are_all_equal_says_which_order_was_used(tmp_path: Path,
                                                                         fixtures_dir: Path) -> None:
    """Ranks given, scores all 1.0: order=score ranks by the tie rule, and says so; order=rank keeps the ranks."""
    bench = _benchmark(fixtures_dir)
    lines = []
    for query in bench.queries:
        ids = bench.episodes[query.episode_id].ids
        lines += [f"{query.id} Q0 {memory} {rank} 1.0 x" for rank, memory in enumerate(reversed(ids), start=1)]
    path = _write(tmp_path, "\n".join(lines) + "\n")
    by_score = memrepro("eval", TWO, f"run_file={path}", tmp=tmp_path, data_dir=fixtures_dir)
    assert by_score.returncode == 0, by_score.stderr[-2000:]
    assert "order=score ranked them by the tie rule (their pool position), not by the file's rank column; set " \
           "order=rank" in by_score.stderr
    (folder,) = [p.parent for p in (tmp_path / "results").rglob(COMPLETE)]
    assert any("tie rule" in line for line in json.loads((folder / "metrics.json").read_text())["warnings"])
    top = json.loads((folder / "queries.jsonl").read_text().splitlines()[0])["top"]
    assert [memory for memory, _ in top][:2] == list(bench.episodes[bench.queries[0].episode_id].ids[:2])
    by_rank = memrepro("eval", TWO, f"run_file={path}", "order=rank", tmp=tmp_path, data_dir=fixtures_dir)
    assert by_rank.returncode == 0 and "order=rank used the file's rank column" in by_rank.stderr


def test_order_rank_keeps_the_files_order(tmp_path: Path, fixtures_dir: Path) -> None:
    from memrepro.runs.runfile import read_run_file, validate

    bench = _benchmark(fixtures_dir)
    q = bench.queries[0]
    ids = bench.episodes[q.episode_id].ids
    path = _write(tmp_path, f"{q.id} Q0 {ids[0]} 2 0.9 x\n{q.id} Q0 {ids[1]} 1 0.1 x\n{q.id} Q0 {ids[2]} 3 0.1 x\n")
    split = next(s.name for s in bench.splits if q in bench.split_queries(s))
    by_score = validate(read_run_file(path), bench).rankings[(split, q.id)].memory_ids
    by_rank = validate(read_run_file(path), bench, order="rank").rankings[(split, q.id)].memory_ids
    assert by_score == (ids[0], ids[1], ids[2])  # 0.1 tie: pool position decides
    assert by_rank == (ids[1], ids[0], ids[2])


# ------------------------------------------------------------------------------------------------ §3 own retriever

README = (REPO / "docs" / "own-system.md").read_text()  # the "Score your own system" page


def readme_block(language: str, after: str) -> str:
    section = README[README.index("# Score your own system"):]
    section = section[section.index(after):] if after else section
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


@pytest.mark.integration
def test_evaluate_equals_builtin_bm25_query_by_query(two_runs, tmp_path: Path, fixtures_dir: Path) -> None:
    """The README's MyBM25 (public Protocol, memrepro.evaluate) scores exactly what retriever=bm25 scores."""
    tmp, _, bm25 = two_runs
    code = readme_block("python", "").replace('encoder="minilm")', f'encoder="fake", overrides={list((TWO, *FAST[1:]))!r})')
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(fixtures_dir), "MEMREPRO_RESULTS_DIR": str(tmp_path / "r"),
           "MEMREPRO_CACHE_DIR": str(tmp_path / "c"), "PYTHONPATH": str(REPO), "MEMREPRO_AUTO_DOWNLOAD": "0"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    [mine] = sorted(p.parent for p in (tmp_path / "r" / "runs" / "locomo" / "my-bm25").rglob(COMPLETE))
    assert per_query(mine) == per_query(bm25)
    config = (mine / "config.yaml").read_text()
    assert "MyBM25" in config and "external: true" in config  # the user's retriever is named in provenance


class IdsOnly:
    """Returns memory ids in reverse pool order, no scores."""

    name = "reverse"

    def retrieve(self, queries, query_vectors, index):
        return [[m.id for m in reversed(index.episodes[q.episode_id].memories)] for q in queries]


class Foreign:
    def retrieve(self, queries, query_vectors, index):
        return [["not-a-memory"] for _ in queries]


def test_evaluate_in_process_ids_only_and_foreign_ids(tmp_path: Path, fixtures_dir: Path, monkeypatch) -> None:
    import memrepro
    from memrepro.errors import MemreproError

    monkeypatch.setenv("MEMREPRO_DATA_DIR", str(fixtures_dir))
    monkeypatch.setenv("MEMREPRO_AUTO_DOWNLOAD", "0")
    overrides = [TWO, *FAST[1:], f"paths.results_dir={tmp_path}", f"paths.cache_dir={tmp_path / 'cache'}"]
    outcome = memrepro.evaluate(IdsOnly(), dataset="locomo", encoder="fake", overrides=overrides)
    assert outcome.folder.parts[-3] == "reverse"
    for row in read_queries(outcome.folder):
        episode = _benchmark(fixtures_dir).episodes[row["episode_id"]]
        assert [m for m, _ in row["top"]] == list(reversed(episode.ids))
    assert isinstance(IdsOnly(), memrepro.Retriever)
    with pytest.raises(MemreproError, match="returned memory id 'not-a-memory' for query"):
        memrepro.evaluate(Foreign(), dataset="locomo", encoder="fake", overrides=overrides)


@pytest.mark.integration
def test_external_retriever_from_the_command_line(two_runs, tmp_path: Path, fixtures_dir: Path) -> None:
    _, _, bm25 = two_runs
    out = memrepro("run", "retriever=external", "retriever.target=memrepro.retrievers.bm25.BM25Retriever",
                   "retriever.name=bm25-via-target", TWO, *FAST, "output.top_n=1000", tmp=tmp_path,
                   data_dir=fixtures_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    assert per_query(runs_under(tmp_path, "locomo", "bm25-via-target")[0]) == per_query(bm25)
    top2 = memrepro("run", "retriever=external", "retriever.target=memrepro.retrievers.bm25.BM25Retriever",
                    "+retriever.params.mode=topk", "+retriever.params.k=2", "retriever.name=bm25-top2", TWO, *FAST,
                    tmp=tmp_path, data_dir=fixtures_dir)
    assert top2.returncode == 0, top2.stderr[-2000:]
    assert {r["n_returned"] for r in read_queries(runs_under(tmp_path, "locomo", "bm25-top2")[0])} == {2}
    bad = memrepro("run", "retriever=external", "retriever.target=no_such_pkg.Thing", TWO, *FAST, tmp=tmp_path,
                   data_dir=fixtures_dir)
    assert bad.returncode == 1 and "retriever.target='no_such_pkg.Thing' could not be built" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.integration
@pytest.mark.parametrize("dataset,overrides,n_scored", [
    ("longmemeval", ("dataset.variant=oracle", "dataset.source=longmemeval/longmemeval_tiny.json",
                     "retriever.mode=topk", "retriever.k=50"), 2),
    ("personabench", ("dataset.communities=[community_0]", "retriever.mode=topk", "retriever.k=5"), 3),
])
def test_bm25_runs_on_the_other_benchmarks(dataset, overrides, n_scored, tmp_path: Path, fixtures_dir: Path) -> None:
    out = memrepro("run", f"dataset={dataset}", "retriever=bm25", *overrides, *FAST,
                   "dataset.allow_unverified=true", tmp=tmp_path,  # fixtures sit at pinned paths
                   data_dir=fixtures_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    [folder] = [p.parent for p in (tmp_path / "results").rglob(COMPLETE)]
    metrics = metrics_of(folder)
    assert metrics["counts"]["n_scored"] == n_scored and metrics["retriever"]["name"] == "bm25"
    k = int(overrides[-1].split("=")[1])
    assert max(r["n_returned"] for r in read_queries(folder)) <= k


def test_bm25_scores_match_bm25s_directly(fixtures_dir: Path) -> None:
    """The retriever is bm25s on one episode: its scores are the library's, ranked by the tie rule."""
    import bm25s
    import numpy as np

    from memrepro.retrievers.base import RetrievalInput
    from memrepro.retrievers.bm25 import BM25Retriever
    from memrepro.search import build_index

    bench = _benchmark(fixtures_dir)
    index = build_index(bench.episodes, {e: np.zeros((len(ep), 4), np.float32) for e, ep in bench.episodes.items()})
    query = bench.queries[0]
    texts = [m.text for m in bench.episodes[query.episode_id].memories]
    model = bm25s.BM25()
    model.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    words = [w for w in bm25s.tokenize([query.text], stopwords="en", return_ids=False, show_progress=False)[0]
             if w in model.vocab_dict]
    expected = model.get_scores(words)
    [got] = BM25Retriever().retrieve([RetrievalInput(query.id, query.text, query.episode_id)], np.zeros((1, 4)), index)
    assert np.array_equal(got.hits.scores, expected.astype(np.float32))
    [top2] = BM25Retriever(mode="topk", k=2).retrieve([RetrievalInput(query.id, query.text, query.episode_id)],
                                                      np.zeros((1, 4)), index)
    order = np.lexsort((np.arange(len(expected)), -expected.astype(np.float64)))[:2]
    assert list(top2.hits.positions) == list(order)


# ------------------------------------------------------------------------------------------------ §4 compare

@pytest.mark.integration
def test_compare_uses_the_tables_bootstrap_and_refuses_mismatches(two_runs, tmp_path: Path,
                                                                  fixtures_dir: Path) -> None:
    from memrepro.compare import CompareError, check_comparable, compare, load_run

    tmp, dense, bm25 = two_runs
    frame = compare([load_run(dense), load_run(bm25)], ["mrr"], by="category", resamples=2000)
    expected = paired_bootstrap(load_run(bm25).per_unit("mrr"), load_run(dense).per_unit("mrr"), resamples=2000)
    overall = frame[frame["queries"] == "all"].iloc[0]
    assert (overall["baseline"], overall["run"]) == ("dense", "bm25")  # named by what differs, never by hash
    assert overall["Δ"].startswith(f"{expected.delta:+.4f}") and overall["p"] == expected.p_text()
    categories = frame[frame["queries"] != "all"]
    assert categories["n"].sum() == expected.n

    out = memrepro("compare", str(dense), str(bm25), "--metric", "mrr", "--latex", tmp=tmp, data_dir=fixtures_dir)
    assert out.returncode == 0 and "\\toprule" in out.stdout and "paired bootstrap" in out.stdout
    assert f"Runs: dense = {dense}; bm25 = {bm25}" in out.stdout  # which folder each name stands for

    # other data (the 10-conversation fixture file) and other query units (fewer seeds) are refused, named
    other_data = memrepro("run", "retriever=dense", *FAST, "dataset.allow_unverified=true", tmp=tmp_path,
                          data_dir=fixtures_dir)  # the one-conversation fixture sits at the pinned path
    fewer = memrepro("run", "retriever=dense", TWO, "dataset.seeds=[7,11]", *FAST, tmp=tmp_path,
                     data_dir=fixtures_dir)
    assert other_data.returncode == 0 and fewer.returncode == 0
    by_seeds = {len(metrics_of(f)["provenance"]["loader_options"].get("seeds") or
                    load_run(f).seeds): f for f in runs_under(tmp_path, "locomo", "dense")}
    with pytest.raises(CompareError, match="different data .*locomo10"):
        check_comparable(load_run(dense), load_run(by_seeds[5]), ["mrr"])
    with pytest.raises(CompareError, match="different scored query sets .* only in the first"):
        check_comparable(load_run(dense), load_run(by_seeds[2]), ["mrr"])
    refused = memrepro("compare", str(dense), str(by_seeds[2]), tmp=tmp, data_dir=fixtures_dir)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "--shared" in refused.stderr  # the fix is named
    # --shared: paired over the units both scored (the two seeds), means over those units, never the whole run's
    full, two = load_run(dense), load_run(by_seeds[2])
    units = two.per_unit("mrr")
    row = compare([full, two], ["mrr"], resamples=2000, shared=True).iloc[0]
    expected = paired_bootstrap(units, {u: v for u, v in full.per_unit("mrr").items() if u in units}, resamples=2000)
    assert row["n"] == len(units) == expected.n < len(full.per_unit("mrr")) and row["p"] == expected.p_text()
    shared_mean = sum(full.per_unit("mrr")[u] for u in units) / len(units)
    assert row["baseline mean"] == f"{shared_mean:.4f}" and row["Δ"].startswith(f"{expected.delta:+.4f}")
    with pytest.raises(CompareError, match="different data"):  # --shared never pairs other data
        check_comparable(full, load_run(by_seeds[5]), ["mrr"], shared=True)


@pytest.mark.integration
def test_compare_refuses_a_damaged_run_instead_of_comparing_its_numbers(two_runs, tmp_path: Path,
                                                                        fixtures_dir: Path) -> None:
    import shutil

    from memrepro.compare import CompareError, load_run

    tmp, dense, bm25 = two_runs
    edited = tmp_path / "runs" / bm25.name
    shutil.copytree(bm25, edited)
    edit_one_mrr(edited / "queries.jsonl")
    with pytest.raises(CompareError, match="queries.jsonl.*differs from the run's manifest"):
        load_run(edited)
    refused = memrepro("compare", str(dense), str(edited), "--metric", "mrr", tmp=tmp, data_dir=fixtures_dir)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert str(edited / "queries.jsonl") in refused.stderr and not refused.stdout.strip()


def test_leaderboard_cells_are_the_runs_numbers(two_runs) -> None:
    from memrepro.compare import load_run
    from memrepro.tables.leaderboard import Column, Setting, leaderboard

    tmp, dense, bm25 = two_runs
    column = Column("LoCoMo MRR", "locomo", "mrr", {"dense": Setting(("dense",), {"mode": "full"}),
                                                    "bm25": Setting(("bm25",), {"mode": "full"})})
    runs = [load_run(dense), load_run(bm25)]
    frame, notes = leaderboard(runs, "fake-bow-64d", resamples=2000, columns=[column])
    cells = dict(zip(frame["retriever"], frame["LoCoMo MRR"]))
    summary = metrics_of(bm25)["summary"]
    delta = paired_bootstrap(runs[1].per_unit("mrr"), runs[0].per_unit("mrr"), resamples=2000)
    assert cells["bm25"].startswith(f"{summary['split_mean']['mrr']:.4f} ± {summary['split_std']['mrr']:.4f} ")
    assert f"(Δ {delta.delta:+.4f}" in cells["bm25"]
    assert " ms" in cells["bm25"] and "Δ" not in cells["dense"] and cells["rfmem"] == "n/a"
    # the fixture file is not the paper's (a data variant) and holds fewer questions (a subset): tagged, explained
    assert "[D,N]" in cells["bm25"] and any(note.startswith("[D] data-variant") for note in notes)
    ranks = dict(zip(frame["retriever"], frame["LoCoMo MRR: rank"]))
    assert sorted(ranks[r][:1] for r in ("dense", "bm25")) in (["1", "2"], ["1", "t"])  # ranked, or tied
    assert any(note.startswith("LoCoMo MRR: best") and "minimum detectable difference" in note for note in notes)
    assert not any(re.match(r"LoCoMo MRR: \w+ = ", note) for note in notes)  # each row is the retriever it names
    # a row that stands for another retriever says which, by name (never a run id)
    stand_in = Column("stand-in", "locomo", "mrr", {"dense": Setting(("bm25",), {"mode": "full"})})
    _, notes = leaderboard(runs, "fake-bow-64d", resamples=200, columns=[stand_in])
    assert "stand-in: dense = bm25 (fake-bow-64d)" in notes  # a lone run: retriever (encoder)


@pytest.mark.integration
def test_compare_gives_the_mdd_says_not_distinguishable_and_prints_findings_first(two_runs,
                                                                                 fixtures_dir: Path) -> None:
    from memrepro.compare import compare, load_run
    from memrepro.evaluation.power import minimum_detectable_difference

    tmp, dense, bm25 = two_runs
    a, b = load_run(dense), load_run(bm25)
    row = compare([a, b], ["mrr"], resamples=2000).iloc[0]
    power = minimum_detectable_difference(b.per_unit("mrr"), a.per_unit("mrr"))
    test = paired_bootstrap(b.per_unit("mrr"), a.per_unit("mrr"), resamples=2000)
    assert row["MDD"] == f"{power.mdd:.4f}"
    assert row["verdict"] == ("" if test.significant or power.detects(test.delta)
                              else f"not distinguishable at n = {power.n:,}")
    same = compare([a, a], ["mrr"], resamples=2000).iloc[0]
    assert same["verdict"] == f"not distinguishable at n = {len(a.per_unit('mrr')):,}"
    out = memrepro("compare", str(dense), str(bm25), "--metric", "mrr", tmp=tmp, data_dir=fixtures_dir)
    assert out.returncode == 0 and out.stdout.startswith("finding ")
    table = out.stdout.index("| baseline")  # the findings come above the numbers
    for code in ("data-variant", "subset", "cutoff-at-pool"):  # another file, fewer queries, pools of ≤ 10 turns
        assert out.stdout.index(f"finding {code}: ") < table
    shown = sorted(set(re.findall(r"^finding ([a-z-]+):", out.stdout, re.M)))
    quiet = memrepro("compare", str(dense), str(bm25), "--metric", "mrr", *[a for c in shown for a in ("--ignore", c)],
                     tmp=tmp, data_dir=fixtures_dir)
    assert quiet.stdout.startswith("(6 finding(s) not shown: ignored ") and "finding " not in quiet.stdout
    refused = memrepro("compare", str(dense), str(bm25), "--ignore", "subsets", tmp=tmp, data_dir=fixtures_dir)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "valid: cutoff-at-pool" in refused.stderr


# ------------------------------------------------------------------------------------------------ §5 export

@pytest.mark.integration
def test_ir_measures_on_exported_qrels_reproduces_memrepro(two_runs, fixtures_dir: Path) -> None:
    tmp, dense, _ = two_runs
    out = memrepro("export", "dataset=locomo", TWO, "--format", "trec", "--out", str(tmp / "exp"), tmp=tmp,
                   data_dir=fixtures_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    qrels = list(ir_measures.read_trec_qrels(str(tmp / "exp" / "qrels" / "all_splits.qrels")))
    lines = [line.split() for line in (dense / "run.trec").read_text().splitlines()]
    run = [ir_measures.ScoredDoc(q, d, -int(rank)) for q, _, d, rank, _, _ in lines]  # rank order, no ties
    measures = {"mrr": ir_measures.RR, "hit@1": ir_measures.Success @ 1, "hit@10": ir_measures.Success @ 10,
                "recall@10": ir_measures.R @ 10, "ndcg@10": ir_measures.nDCG @ 10}
    theirs = ir_measures.calc_aggregate(list(measures.values()), qrels, run)
    pooled = metrics_of(dense)["summary"]["pooled"]
    for name, measure in measures.items():
        assert theirs[measure] == pytest.approx(pooled[name], abs=1e-12), name
    split7 = list(ir_measures.read_trec_qrels(str(tmp / "exp" / "qrels" / "seed7.qrels")))
    assert len({q.query_id for q in split7}) == metrics_of(dense)["summary"]["splits"]["seed7"]["n"]


def test_beir_export_layout(tmp_path: Path, fixtures_dir: Path) -> None:
    from memrepro.export import export

    bench = _benchmark(fixtures_dir)
    export(bench, tmp_path, "beir")
    corpus = [json.loads(line) for line in (tmp_path / "corpus.jsonl").read_text().splitlines()]
    assert len(corpus) == sum(len(e) for e in bench.episodes.values())
    assert len({d["_id"] for d in corpus}) == len(corpus)  # unique across episodes
    queries = [json.loads(line) for line in (tmp_path / "queries.jsonl").read_text().splitlines()]
    assert {q["_id"] for q in queries} == {q.id for q in bench.queries}
    for split in bench.splits:
        rows = (tmp_path / "qrels" / f"{split.name}.tsv").read_text().splitlines()
        assert rows[0] == "query-id\tcorpus-id\tscore"
        for row in rows[1:]:
            qid, doc, _ = row.split("\t")
            episode = next(q.episode_id for q in bench.queries if q.id == qid)
            assert doc.startswith(f"{episode}::")


@pytest.mark.real_data
def test_export_real_locomo_counts(tmp_path: Path, real_data_dir: Path) -> None:
    from memrepro.datasets.locomo import SPLIT_SEEDS, load_locomo
    from memrepro.export import export

    export(load_locomo(real_data_dir), tmp_path, "trec")
    per_seed = {seed: len({line.split()[0] for line in (tmp_path / "qrels" / f"seed{seed}.qrels").read_text()
                           .splitlines()}) for seed in SPLIT_SEEDS}
    assert per_seed == {7: 938, 11: 1135, 23: 937, 31: 990, 47: 955}  # protocols.md §1.2


# ------------------------------------------------------------------------------------------------ README

@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.real_model
def test_readme_score_your_own_system_commands_run(tmp_path: Path, fixtures_dir: Path) -> None:
    """Every command of the README section, verbatim, on the LoCoMo fixture (MiniLM, offline). The data root's
    locomo10.json is the two-conversation fixture, so that every seed has a test conversation."""
    data = tmp_path / "data" / "locomo"
    data.mkdir(parents=True)
    (data / "locomo10.json").write_bytes((fixtures_dir / "locomo" / "locomo10_two_conversations.json").read_bytes())
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(data.parent), "MEMREPRO_CACHE_DIR": str(tmp_path / "cache"),
           "MEMREPRO_LOG_DIR": str(tmp_path / "logs"), "MEMREPRO_AUTO_DOWNLOAD": "0", "PYTHONPATH": str(REPO),
           "TQDM_DISABLE": "1", "MEMREPRO_ALLOW_UNVERIFIED": "1"}  # the fixture sits at the pinned path
    env.pop("MEMREPRO_RESULTS_DIR", None)
    (tmp_path / "example.py").write_text(readme_block("python", ""))
    commands = [f"{sys.executable} example.py"] + [
        line.replace("python ", f"{sys.executable} ", 1)
        for line in readme_block("bash", "**Compare, rank, export.**").splitlines() if line.strip()]
    for command in commands:
        out = subprocess.run(command, shell=True, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
        assert out.returncode == 0, f"{command}\n{out.stderr[-2000:]}"
    results = tmp_path / "results"
    [dense] = sorted(p.parent for p in (results / "runs" / "locomo" / "dense").rglob(COMPLETE))
    [again] = sorted(p.parent for p in (results / "runs" / "locomo" / "my-dense").rglob(COMPLETE))
    assert per_query(again) == per_query(dense)
    assert (results / "tables" / "leaderboard.md").is_file() and (results / "tables" / "dense_vs_bm25.tex").is_file()
    assert (results / "export" / "locomo" / "beir" / "corpus.jsonl").is_file()
