"""A user's first mistakes end in one line on stderr and the contract's exit code (2: bad input), never in Hydra's
search paths, a silently accepted key or an ``internal error``: a Python without the dependencies, a mistyped
config group option or key, an unknown metric, an impossible thread count, a missing or non-UTF-8 run file, run
folders ``compare`` refuses, ``bench --help``, and
usage mistakes on every plain command. A truncated run file is scored with one warning naming its depth.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FAST = ("encoder=fake", "latency.batch1_queries=0", "runtime.progress=false", "runtime.device=cpu")
TWO = "locomo/locomo10_two_conversations.json"  # one dev + one test conversation per seed


def memrepro(*args: str, tmp: Path, data_dir: Path, python: tuple[str, ...] = (sys.executable,)
             ) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_RESULTS_DIR": str(tmp / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp / "cache"), "MEMREPRO_LOG_DIR": str(tmp / "logs"), "TQDM_DISABLE": "1",
           "MEMREPRO_AUTO_DOWNLOAD": "0", "PYTHONPATH": str(REPO)}
    for debug in ("MEMREPRO_DEBUG", "HYDRA_FULL_ERROR"):
        env.pop(debug, None)
    return subprocess.run([*python, "-m", "memrepro", *args], capture_output=True, text=True, env=env, cwd=tmp,
                          timeout=300)


def one_error_line(out: subprocess.CompletedProcess, code: int = 2) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == code, (out.returncode, out.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("memrepro: error:"), out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
    return lines[0]


def no_results(tmp: Path) -> bool:
    return not [p for p in (tmp / "results").rglob("*") if p.is_file()]


# ------------------------------------------------------------------------------ a Python without the dependencies

@pytest.mark.integration
def test_a_python_without_the_dependencies_is_told_to_use_the_venv(tmp_path: Path, fixtures_dir: Path) -> None:
    # -S: no site-packages, so hydra cannot be imported; PYTHONPATH still finds this checkout's memrepro
    out = memrepro("run", *FAST, tmp=tmp_path, data_dir=fixtures_dir, python=(sys.executable, "-S"))
    line = one_error_line(out)
    assert "dependencies are not installed" in line and "'hydra'" in line
    assert "make install" in line and ".venv/bin/python -m memrepro" in line


# ------------------------------------------------------------------------- config group options, keys and values

CONFIG_CASES = {
    # name: (overrides, what the one line names)
    "dataset option": (("dataset=locomoo",), ("'locomoo'", "config group dataset", "nearest: locomo;")),
    "retriever option": (("retriever=cascad",), ("'cascad'", "config group retriever", "nearest: cascade",
                                                 "retriever=cascade")),
    "mistyped key": (("retriever.alpah=0.3",), ("'retriever.alpah'", "valid under retriever: mode, k")),
    "added nested key": (("retriever=rfmem", "+retriever.recolection.alpha=0.3"),
                         ("'retriever.recolection'", "nearest: retriever.recollection")),
    "added key": (("+unknown_key=1",), ("'unknown_key'", "closed schema", "dataset, retriever")),
    "added short key": (("+foo=1",), ("'foo'", "closed schema")),
    "mistyped group": (("datset=locomo",), ("'datset'", "nearest: dataset")),
    "unknown metric": (("metrics.names=[mrr,foo@10]",), ("metrics.names='foo@10'", "known: hit@k")),
    "unknown extra metric": (("metrics.extra=[mrrr]",), ("metrics.extra='mrrr'", "mrr")),
    "thread count": (("runtime.torch_threads=100000",), ("runtime.torch_threads=100000",
                                                         f"[1, {os.cpu_count()}]")),
    # a value of the wrong type: the key, the value, what it takes and an example, in memrepro's words
    "wrong type": (("retriever.k=abc",), ("config retriever.k='abc' is not allowed", "expected an integer >= 1 or "
                                          "null", "(e.g. retriever.k=1)")),
    "wrong type in a block": (("retriever=rfmem", "retriever.recollection.alpha=high"),
                              ("retriever.recollection.alpha='high'", "a number in [0, 1]",
                               "(e.g. retriever.recollection.alpha=0.8)")),
    "not a list": (("dataset.seeds=seven",), ("dataset.seeds='seven'", "a non-empty list of distinct integers",
                                              "(e.g. dataset.seeds=[7,11,23,31,47])")),
    "not a bool": (("runtime.progress=maybe",), ("runtime.progress='maybe'", "true or false")),
    # a key of other options of its group: which options have it
    "key of other options": (("retriever.recollection.alpha=0.3",),
                             ("retriever.recollection.* belongs to retriever=recollection|rfmem|",
                              "choose one of them (e.g. retriever=recollection)")),
    "key of one other option": (("dataset.variant=oracle",), ("dataset.variant belongs to dataset=longmemeval",
                                                              "choose it")),
    "unreadable override": (("retriever.k",), ("cannot read the override 'retriever.k': it has no '='",
                                               "write key=value")),
    "unreadable value": (("retriever.k=(5",), ("cannot read the override 'retriever.k=(5'", "from '(' on")),
    "missing value": (("retriever=external",), ("config retriever.target has no value and needs one",)),
}
# what no line may show: the config library's own words
LIBRARY_WORDS = ("full_key", "object_type", "reference_type", "Error merging override", "could not be converted",
                 "Config search path", "To append to your config use", "expecting {", "hydra.cc")


@pytest.fixture(scope="module")
def config_outcomes(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> dict:
    """Every case's CLI process, three at a time (each fails before any data is read)."""
    base = tmp_path_factory.mktemp("config_cases")

    def run(name: str) -> tuple[Path, subprocess.CompletedProcess]:
        tmp = base / name.replace(" ", "_")
        tmp.mkdir()
        return tmp, memrepro("run", *FAST, f"dataset.file={TWO}", *CONFIG_CASES[name][0], tmp=tmp,
                             data_dir=fixtures_dir)

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(CONFIG_CASES, pool.map(run, CONFIG_CASES)))


@pytest.mark.integration
@pytest.mark.parametrize("name", list(CONFIG_CASES))
def test_config_mistakes_are_one_line_naming_the_nearest_valid_names(name: str, config_outcomes) -> None:
    tmp, out = config_outcomes[name]
    line = one_error_line(out)
    for needle in CONFIG_CASES[name][1]:
        assert needle in line, (needle, line)
    assert not [words for words in LIBRARY_WORDS if words in line], line
    assert no_results(tmp)  # refused before anything ran: no run id was made for the added key


def _compose(*overrides: str):
    from hydra import compose, initialize_config_dir

    import memrepro.config  # noqa: F401 (the schemas)
    from memrepro.paths import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_the_closed_schema_takes_added_keys_only_where_no_schema_types_the_node() -> None:
    from memrepro.errors import UnknownNameError
    from memrepro.validate import check_closed_schema

    # retriever.params of an external retriever and a schema-less first stage take any key
    check_closed_schema(_compose("retriever=external", "retriever.target=my.Retriever", "+retriever.params.k=2"))
    check_closed_schema(_compose("retriever=cascade", "first_stage=dense", "+first_stage.chunk_bytes=64"))
    for preset in ("rfmem", "cascade", "recollection_personabench_table2_r5", "convmemory_v1", "bm25"):
        check_closed_schema(_compose(f"retriever={preset}"))  # every shipped preset fits its schema
    with pytest.raises(UnknownNameError, match=r"'first_stage.chunk_bytes' .*valid under first_stage: model"):
        check_closed_schema(_compose("retriever=cascade", "+first_stage.chunk_bytes=64"))  # typed: v1's schema


# ------------------------------------------------------------------------------------ eval, compare and bench

def _benchmark(fixtures_dir: Path):
    from memrepro.datasets.locomo import load_locomo

    return load_locomo(fixtures_dir, file=TWO)


def _trec(path: Path, lists: dict[str, list[str]]) -> Path:
    path.write_text("".join(f"{q} Q0 {m} {rank} {1.0 / rank} mine\n" for q, ids in lists.items()
                            for rank, m in enumerate(ids, start=1)))
    return path


@pytest.mark.integration
def test_eval_and_compare_refusals_are_bad_input_and_bench_help_is_help(tmp_path: Path, fixtures_dir: Path) -> None:
    missing = memrepro("eval", f"dataset.file={TWO}", "run_file=nope.trec", tmp=tmp_path, data_dir=fixtures_dir)
    assert "nope.trec: run file not found" in one_error_line(missing)
    unknown_format = memrepro("eval", "run_file=nope.trec", "format=tsv", tmp=tmp_path, data_dir=fixtures_dir)
    assert "format='tsv'" in one_error_line(unknown_format) and "auto, trec, jsonl" in unknown_format.stderr

    absent = memrepro("compare", str(tmp_path / "absent"), str(tmp_path / "other"), tmp=tmp_path,
                      data_dir=fixtures_dir)
    assert one_error_line(absent).startswith(f"memrepro: error: {tmp_path / 'absent'}: does not exist; ")
    (tmp_path / "incomplete").mkdir()
    (tmp_path / "incomplete" / "metrics.json").write_text("{}")
    incomplete = memrepro("compare", str(tmp_path / "incomplete"), str(tmp_path / "incomplete"), tmp=tmp_path,
                          data_dir=fixtures_dir)
    assert "no COMPLETE marker" in one_error_line(incomplete)

    bench = memrepro("bench", "--help", tmp=tmp_path, data_dir=fixtures_dir)
    assert bench.returncode == 0 and bench.stdout.startswith("usage: python -m memrepro bench scale")
    assert not bench.stderr.strip()
    assert "bench" in one_error_line(memrepro("bench", tmp=tmp_path, data_dir=fixtures_dir))


# A usage mistake on each plain (non-Hydra) command: argparse's usage block becomes one line, exit code 2.
USAGE_CASES = {
    "compare without run folders": (["compare"], "the following arguments are required: runs"),
    "keep with an unknown flag": (["keep", "--nope"], "unrecognized arguments: --nope"),
    "tables with an unknown flag": (["tables", "--bogus"], "unrecognized arguments: --bogus"),
    "data without a subcommand": (["data"], "the following arguments are required: command"),
    "data check of an unknown benchmark": (["data", "check", "--benchmark", "nope"], "invalid choice: 'nope'"),
    "experiments with an unknown flag": (["experiments", "--bogus"], "unrecognized arguments: --bogus"),
    "export with an unknown flag": (["export", "--bogus"], "unrecognized arguments"),
    "leaderboard with an unknown flag": (["leaderboard", "--bogus"], "unrecognized arguments: --bogus"),
    "bench scale without a value": (["bench", "scale", "--sizes"], "expected one argument"),
}


@pytest.mark.parametrize("name", list(USAGE_CASES))
def test_usage_mistakes_on_plain_commands_are_one_line(name: str, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from memrepro.__main__ import COMMANDS, _load

    argv, expected = USAGE_CASES[name]
    monkeypatch.setattr(sys, "argv", [f"memrepro {argv[0]}", *argv[1:]])
    with pytest.raises(SystemExit) as stop:
        _load(COMMANDS[argv[0]].entry)()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2
    assert len(lines) == 1 and lines[0].startswith("memrepro: error: python -m memrepro "), lines
    assert expected in lines[0] and lines[0].endswith("--help` lists the options"), lines[0]


# The same on the Hydra commands: what Hydra's own parser refuses is reported before Hydra prints its usage block.
HYDRA_USAGE_CASES = {
    "run with an unknown flag": (["run", "--bogus"], "unrecognized arguments: --bogus"),
    "train with an unknown flag": (["train", "--nope", "seeds=[7]"], "unrecognized arguments: --nope"),
    "eval with a bad --info": (["eval", "--info", "zzz"], "invalid choice: 'zzz'"),
    "run with two modes": (["run", "-m", "retriever.k=1,2", "--cfg", "job"], "--multirun and --cfg cannot be"),
}


@pytest.mark.parametrize("name", list(HYDRA_USAGE_CASES))
def test_usage_mistakes_on_hydra_commands_are_one_line(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    from memrepro.__main__ import main

    argv, expected = HYDRA_USAGE_CASES[name]
    assert main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"memrepro: error: python -m memrepro {argv[0]}: "), lines
    assert expected in lines[0], lines[0]


def test_hydra_takes_what_the_usage_check_lets_through() -> None:
    from memrepro.hydra_internals import hydra_usage_error

    for argv in ([], ["-m", "retriever.k=1,3"], ["--cfg", "job", "retriever.k=3"], ["--help"], ["-c", "hydra"],
                 ["retriever.min_sim=-1", "+experiment=rfmem_table2_r5"]):
        assert hydra_usage_error(argv) is None, argv


@pytest.mark.integration
def test_eval_of_a_truncated_run_file_warns_once_and_records_the_warning(tmp_path: Path,
                                                                         fixtures_dir: Path) -> None:
    bench = _benchmark(fixtures_dir)
    depth = 2
    assert min(len(bench.episodes[q.episode_id]) for q in bench.queries) > depth
    path = _trec(tmp_path / "top2.trec", {q.id: list(bench.episodes[q.episode_id].ids[:depth])
                                           for q in bench.queries})
    out = memrepro("eval", f"dataset.file={TWO}", f"run_file={path}", "metrics.names=[mrr,hit@1,hit@5]",
                   tmp=tmp_path, data_dir=fixtures_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    warnings = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and warnings[0].startswith("warning: "), out.stderr
    text = warnings[0].removeprefix("warning: ")
    assert f"at most {depth} memories per query" in text
    assert "mrr, hit@5 are lower bounds" in text and "hit@1 exact" in text
    [metrics] = (tmp_path / "results").rglob("metrics.json")
    assert text in json.loads(metrics.read_text())["warnings"]


def test_a_run_file_as_deep_as_every_pool_has_no_depth_warning(tmp_path: Path, fixtures_dir: Path) -> None:
    from memrepro.runs.runfile import depth_warning, read_run_file, validate

    bench = _benchmark(fixtures_dir)
    full = _trec(tmp_path / "full.trec", {q.id: list(bench.episodes[q.episode_id].ids) for q in bench.queries})
    checked = validate(read_run_file(full), bench)
    assert depth_warning(full, checked, ["mrr", "hit@1"]) is None
    short = _trec(tmp_path / "short.trec", {q.id: list(bench.episodes[q.episode_id].ids[:1]) for q in bench.queries})
    assert depth_warning(short, validate(read_run_file(short), bench), ["hit@1"]) is None  # every metric exact
    assert "mrr is a lower bound" in depth_warning(short, validate(read_run_file(short), bench), ["mrr", "hit@1"])


@pytest.mark.parametrize("name,content,line", [
    ("run.trec", b"q1 Q0 D1:1 1 0.9 x\nq1 Q0 D1:\xff2 2 0.8 x\n", 2),
    ("run.jsonl", b'{"q1": ["D1:1"]}\n\n{"q\xe92": ["D1:1"]}\n', 3),
])
def test_a_non_utf8_run_file_names_the_file_and_the_line(tmp_path: Path, name: str, content: bytes,
                                                         line: int) -> None:
    from memrepro.errors import EXIT_BAD_INPUT
    from memrepro.runs.runfile import RunFileError, read_run_file

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(RunFileError, match=rf"{name}:{line}: not UTF-8") as raised:
        read_run_file(path)
    assert raised.value.exit_code == EXIT_BAD_INPUT


@pytest.mark.integration
def test_a_non_utf8_run_file_is_one_line_exit_2_on_the_cli(tmp_path: Path, fixtures_dir: Path) -> None:
    query = _benchmark(fixtures_dir).queries[0]
    path = tmp_path / "run.trec"
    path.write_bytes(f"{query.id} Q0 D1:1 1 0.9 x\n".encode() + b"\xfe\n")
    out = memrepro("eval", f"dataset.file={TWO}", f"run_file={path}", tmp=tmp_path, data_dir=fixtures_dir)
    assert f"{path}:2: not UTF-8" in one_error_line(out) and no_results(tmp_path)
