"""What a user sees first: ``run --help`` is memrepro's own (groups, common keys, ``-m``, ``--dry-run``,
``overwrite=true``, ``+experiment=<name>``; one screen; no Hydra, no torch), a skip or a restore of a complete run
imports neither torch, sentence-transformers nor pandas (their speed: ``scripts/bench_start.py``, never asserted
here), and the console is quiet: plain lines (the log file keeps Hydra's stamp), log lines above progress bars,
no raw dictionaries in the summary."""

from __future__ import annotations

import importlib.util
import io
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memrepro.runs.folder import COMPLETE

REPO = Path(__file__).resolve().parents[1]
TWO = "locomo/locomo10_two_conversations.json"  # one dev + one test conversation per seed
FAST = ("dataset=locomo", f"dataset.file={TWO}", "encoder=fake", "latency.batch1_queries=0", "runtime.device=cpu")
HEAVY = ("torch", "sentence_transformers", "pandas")


def _bench_start():
    spec = importlib.util.spec_from_file_location("bench_start", REPO / "scripts" / "bench_start.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env(tmp: Path, data_dir: Path) -> dict[str, str]:
    return {**os.environ, "MEMREPRO_DATA_DIR": str(data_dir), "MEMREPRO_HOME": str(tmp), "TQDM_DISABLE": "1",
            "MEMREPRO_CACHE_DIR": str(tmp / "cache"), "MEMREPRO_KEPT_DIR": str(tmp / "kept"),
            "PYTHONPATH": str(REPO)}


def _memrepro(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "memrepro", *args], capture_output=True, text=True, env=env, cwd=cwd,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


# ------------------------------------------------------------------------------------------------ run --help

@pytest.mark.integration
def test_run_help_is_memrepros_own_one_screen_without_hydra_or_torch(tmp_path: Path) -> None:
    loaded, text = _bench_start().loaded_modules(["run", "--help"], {**os.environ, "PYTHONPATH": str(REPO)},
                                                 cwd=tmp_path, modules=("hydra", "omegaconf", *HEAVY))
    assert loaded == set()  # read from conf/ alone
    lines = text.rstrip("\n").splitlines()
    assert lines[0].startswith("usage: python -m memrepro run ") and len(lines) <= 60
    assert max(map(len, lines)) <= 120 and "_schema" not in text
    groups: dict[str, list[str]] = {}
    for line in lines[lines.index("config groups (group=option, * the default):") + 1:]:
        if not line.strip():
            break
        if not line.startswith("   "):  # a group's first line; the others continue its options
            group = line.split()[0]
        groups.setdefault(group, []).extend(line.split()[0 if line.startswith("   ") else 1:])
    assert "locomo*" in groups["dataset"] and "mpnet*" in groups["encoder"] and "dense*" in groups["retriever"]
    assert "trained_head_lr*" in groups["cross_encoder"] and "convmemory_v1*" in groups["first_stage"]
    for needle in ("retriever.k=10", "retriever.recollection.alpha=0.3", "runtime.device=cpu", "overwrite=true",
                   "+experiment=<name>", "python -m memrepro experiments --list", "-m, --multirun", "--dry-run",
                   "--cfg job", "--hydra-help", "Project folder: "):
        assert needle in " ".join(text.split()), needle  # wherever the terminal's width wraps the lines


@pytest.mark.integration
@pytest.mark.parametrize("command,needles", [("train", ("--plan", "seeds=[23]", "model ")),
                                             ("eval", ("run_file=path/to/run.trec", "dataset "))])
def test_train_and_eval_help_are_memrepros_own(command: str, needles: tuple[str, ...], tmp_path: Path) -> None:
    text = _memrepro(command, "--help", env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path).stdout
    assert text.startswith(f"usage: python -m memrepro {command} ") and len(text.splitlines()) <= 60
    assert "_schema" not in text and all(needle in text for needle in needles)


# ------------------------------------------------------------------------------------------------ fast start

@pytest.mark.integration
def test_a_skip_and_a_restore_import_no_torch_sentence_transformers_or_pandas(tmp_path: Path,
                                                                              fixtures_dir: Path) -> None:
    probe = _bench_start().loaded_modules
    env = _env(tmp_path, fixtures_dir)
    computed, said = probe(["run", *FAST], env, cwd=tmp_path)
    assert "torch" in computed and "wrote " in said  # the probe sees what a computing run imports
    skipped, said = probe(["run", *FAST], env, cwd=tmp_path)
    assert "is complete: skipped" in said and skipped == set()
    (folder,) = [marker.parent for marker in (tmp_path / "results" / "runs").rglob(COMPLETE)]
    _memrepro("keep", str(folder), env=env, cwd=tmp_path)
    shutil.rmtree(folder)
    restored, said = probe(["run", *FAST], env, cwd=tmp_path)
    assert f"restored run {folder.name} from its kept copy" in said and restored == set()
    assert (folder / COMPLETE).is_file()
    # the cascade is built and its training plan forecast (models looked up by recipe hash) without torch either
    planned, said = probe(["run", *FAST, "retriever=cascade", "--dry-run"], env, cwd=tmp_path)
    assert "total: " in said and planned == set()


# ------------------------------------------------------------------------------------------------ quiet

@pytest.mark.integration
def test_the_console_gets_plain_lines_and_the_log_file_keeps_the_stamp(tmp_path: Path, fixtures_dir: Path) -> None:
    env = _env(tmp_path, fixtures_dir)
    out = _memrepro("run", *FAST, "runtime.progress=false", env=env, cwd=tmp_path)
    lines = out.stdout.splitlines()
    assert lines[0].startswith("wrote results/runs/locomo/dense/fake-bow-64d/")  # the message alone
    assert not [line for line in lines if line.startswith("[20") or "[INFO]" in line]
    queries = next(line for line in lines if line.startswith("queries: "))
    assert "{" not in queries and "loader: dropped empty evidence 1" in queries
    encoded = next(line for line in lines if line.startswith("encoder: "))
    assert encoded == "encoder: fake-bow-64d; encoded when computed: query 8, document 12"
    (log,) = (tmp_path / "outputs").rglob("run.log")
    assert "][memrepro][INFO] - wrote " in log.read_text()  # the file keeps time, logger and level


def test_progress_bars_are_labelled_in_english_and_log_lines_go_above_them(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tqdm.contrib.logging import _TqdmLoggingHandler

    from memrepro.logs import ConsoleFormatter, above_progress_bars
    from memrepro.models.encoder import CachedEncoder, FakeEncoder

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    bars = io.StringIO()
    monkeypatch.setattr(sys, "stderr", bars)
    CachedEncoder(FakeEncoder(dim=8), tmp_path / "cache").encode([f"q {i}" for i in range(300)], "query")
    assert "encode queries: 100%" in bars.getvalue() and "querys" not in bars.getvalue()

    root = logging.getLogger()
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(ConsoleFormatter())
    monkeypatch.setattr(root, "handlers", [console])
    with above_progress_bars():  # the console handler writes through tqdm while bars may be drawn
        assert [type(h) for h in root.handlers] == [_TqdmLoggingHandler]
    assert root.handlers == [console]
    record = logging.LogRecord("memrepro", logging.WARNING, __file__, 1, "the run is recomputed", None, None)
    assert ConsoleFormatter().format(record) == "warning: the run is recomputed"


# ------------------------------------------------------------------------------------------------ presets

def test_the_presets_are_read_only_for_a_command_line_that_picks_one() -> None:
    from memrepro.experiments import asks_for_presets

    assert asks_for_presets(["+experiment=locomo_dense_mpnet"]) and asks_for_presets(["experiment=x"])
    assert asks_for_presets(["--shell-completion"])  # Hydra completes `+experiment=<TAB>` from them
    assert not asks_for_presets(["dataset=locomo", "retriever.k=5", "condition=x"])


@pytest.mark.integration
def test_a_preset_still_composes_on_the_command_line(tmp_path: Path, fixtures_dir: Path) -> None:
    out = _memrepro("run", "+experiment=locomo_dense_mpnet", f"dataset.file={TWO}", "encoder=fake", "--cfg", "job",
                    env=_env(tmp_path, fixtures_dir), cwd=tmp_path)
    assert "condition: locomo_dense_mpnet" in out.stdout and "_target_: memrepro.retrievers.dense." in out.stdout


def _full(line: bytes, fields: tuple[str, ...]) -> dict:
    import json

    row = json.loads(line)
    return {name: row[name] for name in fields if name in row}


@pytest.mark.parametrize("row", [
    {"split": "seed7", "seed": 7, "excluded": None, "n_returned": 3, "top": [["a", 0.5]], "metrics": {}},  # no pool
    {"split": "seed7", "pool": 9, "n_returned": 3, "top": [["a", 0.5]], "latency_ms": 1.0},  # pool before top
    {"split": "seed7", "n_returned": 3, "top": [["a", 0.5]], "metrics": {"mrr": 1.0}, "pool": 9},  # pool after top
    {"split": "s", "gold_ranks": {"x": 1, "top": 2}, "top": [["top", 0.1]], "pool": 4},  # "top" nested, first
    {"split": "s", "trace": {"pool": 3}, "top": [["pool", 0.2]]},  # "pool" only inside values after the ranking
    {"split": "s", "n_returned": 0},  # no ranking at all
])
def test_row_fields_read_the_fields_a_whole_parse_reads(row: dict) -> None:
    """The protocol check's fields of a row, read without parsing its ranking, are those of the whole row: a field
    after the ranking, a nested "top" key and a missing ranking take the whole parse; an absent field stays absent."""
    import orjson

    from memrepro.checks import ROW_FIELDS
    from memrepro.runs.folder import row_fields

    line = orjson.dumps(row)
    assert row_fields(line, ROW_FIELDS) == _full(line, ROW_FIELDS)
    assert row_fields(line.decode(), ROW_FIELDS) == _full(line, ROW_FIELDS)


def test_the_check_reads_only_the_row_fields_it_declares() -> None:
    """Every per-query field memrepro.checks reads (``row["x"]``, ``row.get("x")``) is in ROW_FIELDS, the fields a
    reader that has not parsed the rankings hands it (memrepro.runs.folder.read_row_fields)."""
    import ast

    import memrepro.checks as checks

    read = set()
    for node in ast.walk(ast.parse(Path(checks.__file__).read_text())):
        target = key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            target, key = node.value, node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant)):
            target, key = node.func.value, node.args[0].value
        if isinstance(target, ast.Name) and target.id == "row":
            read.add(key)
    assert read and read <= set(checks.ROW_FIELDS), sorted(read - set(checks.ROW_FIELDS))
