"""A table of bad inputs walked through the real CLI (``python -m memrepro run``): each must end with exit code 2,
one line on stderr naming the config key or the file (and no traceback), and nothing written to the results."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

pytestmark = pytest.mark.integration  # every test here runs the CLI in a subprocess

REPO = Path(__file__).resolve().parents[1]
FAST = ("encoder=fake", "latency.batch1_queries=0", "runtime.progress=false", "runtime.device=cpu")
TWO = "dataset.file=locomo/locomo10_two_conversations.json"
LOCOMO = "locomo/locomo10_two_conversations.json"


def _edit_locomo(edit: Callable[[list], None]) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / LOCOMO
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return apply


def _rename_session_1(data: list) -> None:
    conversation = data[0]["conversation"]
    conversation["session_one"] = conversation.pop("session_1")


def _empty_conversation(data: list) -> None:
    data[0]["conversation"] = {k: v for k, v in data[0]["conversation"].items() if not k.startswith("session_")}


def _session_as_string(data: list) -> None:
    data[0]["conversation"]["session_2"] = "Caroline: hi; Melanie: hello"


def _lone_surrogate(data: list) -> None:
    turn = data[0]["conversation"]["session_1"][2]  # conv-26, D1:3
    turn["text"] += " \ud800"  # written as the JSON escape \ud800, a UTF-16 half with no pair


def _non_utf8(relative: str, needle: bytes) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / relative
        data = path.read_bytes()
        assert needle in data, (relative, needle)
        path.write_bytes(data.replace(needle, needle[:1] + b"\xff\xfe" + needle[1:], 1))
    return apply


def _truncated_archive(root: Path) -> None:
    questions = json.loads((root / "longmemeval" / "longmemeval_tiny.json").read_text())
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for question in questions:
            payload = json.dumps(question).encode() * 20  # big enough that half the archive is a real cut
            info = tarfile.TarInfo(f"lme/{question['question_id']}.json")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    data = buffer.getvalue()
    (root / "longmemeval" / "cut.tar.xz").write_bytes(data[: len(data) // 2])


def _no_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


@dataclass(frozen=True)
class Case:
    name: str
    overrides: tuple[str, ...]
    named: tuple[str, ...]  # what the one line must name (a key, a file: "{root}" is the case's data root)
    setup: Callable[[Path], None] | None = None
    code: int = 2
    when: Callable[[], bool] = field(default=lambda: True)


CASES = [
    # §2 config values: key, value and allowed range in one line
    Case("alpha above 1", ("retriever=rfmem", "retriever.recollection.alpha=1.5"),
         ("retriever.recollection.alpha=1.5", "[0, 1]")),
    Case("mmr_lambda 2", ("retriever=rfmem", "retriever.recollection.mmr_lambda=2"),
         ("retriever.recollection.mmr_lambda", "[0, 1]")),
    Case("top_n negative", ("output.top_n=-5",), ("output.top_n=-5", ">= 1")),
    Case("top_n zero", ("output.top_n=0",), ("output.top_n=0",)),
    Case("batch_size zero", ("runtime.batch_size=0",), ("runtime.batch_size=0",)),
    Case("batch_size negative", ("runtime.batch_size=-1",), ("runtime.batch_size=-1",)),
    Case("k zero", ("retriever=familiarity", "retriever.k=0"), ("retriever.k=0",)),
    Case("beam zero", ("retriever=rfmem", "retriever.recollection.beam=0"), ("retriever.recollection.beam=0",)),
    Case("fanout zero", ("retriever=rfmem", "retriever.recollection.fanout=0"),
         ("retriever.recollection.fanout=0",)),
    Case("rounds zero", ("retriever=rfmem", "retriever.recollection.rounds=0"),
         ("retriever.recollection.rounds=0",)),
    Case("threshold above 1", ("retriever=rfmem", "retriever.gate.theta_high=1.5"),
         ("retriever.gate.theta_high=1.5",)),
    Case("thresholds crossed", ("retriever=rfmem", "retriever.gate.theta_low=0.9"),
         ("retriever.gate.theta_low=0.9",)),
    Case("familiarity k zero", ("retriever=rfmem", "retriever.familiarity.k=0"), ("retriever.familiarity.k=0",)),
    Case("tau negative", ("retriever=rfmem", "retriever.gate.tau=-0.1"), ("retriever.gate.tau=-0.1",)),
    Case("min_sim above 1", ("retriever=familiarity", "retriever.min_sim=3"), ("retriever.min_sim=3",)),
    Case("noise level", ("dataset=personabench", "dataset.noise=0.4"), ("dataset.noise='0.4'", "0.0, 0.3")),
    Case("engine name", ("retriever=rfmem", "retriever.engine=fast"), ("retriever.engine='fast'", "compiled")),
    Case("cuda without a GPU", ("runtime.device=cuda",), ("runtime.device='cuda'", "no CUDA"), when=_no_cuda),
    Case("bm25 k1 negative", ("retriever=bm25", "retriever.k1=-5", "retriever.b=7"), ("retriever.k1=-5.0", ">= 0")),
    Case("bm25 b above 1", ("retriever=bm25", "retriever.b=7"), ("retriever.b=7.0", "[0, 1]")),
    Case("bm25 method", ("retriever=bm25", "retriever.method=bogus"), ("retriever.method='bogus'", "lucene")),
    Case("bm25 stop words", ("retriever=bm25", "retriever.stopwords=xx"), ("retriever.stopwords='xx'",)),
    Case("search backend", ("search.backend=bogus",), ("search.backend='bogus'", "faiss_hnsw")),
    Case("faiss_min_memories zero", ("search.backend=faiss_ivf", "search.faiss_min_memories=0"),
         ("search.faiss_min_memories=0", ">= 1")),
    Case("max_seq_length beyond the model", (TWO, "encoder=minilm", "encoder.max_seq_length=100000"),
         ("encoder.max_seq_length=100000", "[1, 512]")),
    Case("metric cutoff zero", ("metrics.extra=[recall@0]",), ("metrics.extra='recall@0'", ">= 1")),
    Case("metric listed twice", ("metrics.extra=[mrr,mrr]",), ("metrics.extra=['mrr', 'mrr']", "distinct")),
    Case("seed listed twice", ("dataset.seeds=[23,23]",), ("dataset.seeds=[23, 23]", "distinct")),
    Case("no community", ("dataset=personabench", "dataset.communities=[]"), ("dataset.communities=[]",)),
    Case("community listed twice", ("dataset=personabench", "dataset.communities=[community_0,community_0]"),
         ("dataset.communities=['community_0', 'community_0']", "distinct")),
    Case("unknown key", ("retriever.nonsense=1",), ("nonsense",)),
    Case("wrong type", ("retriever=familiarity", "retriever.k=ten"), ("retriever.k", "ten")),
    # §2 data files
    Case("LoCoMo not UTF-8", (TWO,), ("{root}/" + LOCOMO, "not UTF-8"), _non_utf8(LOCOMO, b"Caroline")),
    Case("LongMemEval not UTF-8", ("dataset=longmemeval", "dataset.variant=oracle",
                                   "dataset.source=longmemeval/longmemeval_tiny.json"),
         ("{root}/longmemeval/longmemeval_tiny.json", "not UTF-8"),
         _non_utf8("longmemeval/longmemeval_tiny.json", b"question_id")),
    Case("PersonaBench not UTF-8", ("dataset=personabench", "dataset.communities=[community_0]"),
         ("conversation_data_all.json", "not UTF-8"),
         _non_utf8("personabench/eval_data/eval_data_v1/synthetic_data/community_0/private_data/noise_0.0/"
                   "conversation_data_all.json", b"Name")),
    Case("truncated .tar.xz", ("dataset=longmemeval", "dataset.variant=s", "dataset.source=longmemeval/cut.tar.xz"),
         ("{root}/longmemeval/cut.tar.xz", "truncated"), _truncated_archive),
    Case("LoCoMo session_1 renamed", (TWO,), ("{root}/" + LOCOMO, "session_one"), _edit_locomo(_rename_session_1)),
    Case("LoCoMo empty conversation", (TWO,), ("{root}/" + LOCOMO, "conv-26", "empty"),
         _edit_locomo(_empty_conversation)),
    Case("LoCoMo session_N a string", (TWO,), ("{root}/" + LOCOMO, "session_2", "expected a list"),
         _edit_locomo(_session_as_string)),
    Case("LoCoMo lone surrogate", (TWO,), ("{root}/" + LOCOMO, "conv-26/D1:3", "'text'", "lone surrogate"),
         _edit_locomo(_lone_surrogate)),
    Case("checksum mismatch", (), ("{root}/locomo/locomo10.json", "79fa87e9", "dataset.allow_unverified=true")),
    Case("missing data file", ("dataset.file=locomo/absent.json",), ("{root}/locomo/absent.json", "not found")),
]


def _run(case: Case, base: Path, fixtures_dir: Path) -> tuple[Path, subprocess.CompletedProcess]:
    tmp = base / case.name.replace(" ", "_")
    root = tmp / "data"
    shutil.copytree(fixtures_dir, root)
    if case.setup:
        case.setup(root)
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(root), "MEMREPRO_RESULTS_DIR": str(tmp / "results"),
           "MEMREPRO_CACHE_DIR": str(tmp / "cache"), "MEMREPRO_LOG_DIR": str(tmp / "logs"), "TQDM_DISABLE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("HYDRA_FULL_ERROR", None)
    out = subprocess.run([sys.executable, "-m", "memrepro", "run", *FAST, *case.overrides], capture_output=True,
                         text=True, env=env, cwd=tmp, timeout=300)
    return tmp, out


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> dict[str, tuple[Path, object]]:
    """Every case's CLI process, run four at a time (each is a fresh Python: the suite stays fast)."""
    base = tmp_path_factory.mktemp("bad_inputs")
    cases = [c for c in CASES if c.when()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(lambda c: _run(c, base, fixtures_dir), cases))
    return {case.name: result for case, result in zip(cases, done)}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(case: Case, outcomes) -> None:
    if case.name not in outcomes:
        pytest.skip("not applicable on this machine")
    tmp, out = outcomes[case.name]
    assert out.returncode == case.code, (out.returncode, out.stderr[-3000:])
    assert "Traceback" not in out.stderr + out.stdout
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("memrepro: error:"), out.stderr[-3000:]
    for needle in case.named:
        assert needle.replace("{root}", str(tmp / "data")) in lines[0], (needle, lines[0])
    results = tmp / "results"
    assert not results.exists() or not [p for p in results.rglob("*") if p.is_file()], list(results.rglob("*"))


def test_debug_shows_the_traceback(tmp_path: Path, fixtures_dir: Path) -> None:
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(fixtures_dir), "MEMREPRO_RESULTS_DIR": str(tmp_path / "r"),
           "MEMREPRO_LOG_DIR": str(tmp_path / "logs")}
    out = subprocess.run([sys.executable, "-m", "memrepro", "run", "--debug", *FAST, "output.top_n=0"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 2 and "Traceback" in out.stderr and "output.top_n=0" in out.stderr
