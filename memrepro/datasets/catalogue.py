"""Every benchmark file memrepro knows: where it lives under the data root, where the official copy is served,
and the checksum that identifies it (docs/benchmarks.md#data-files-and-checksums).

Two kinds of entries: ``DOWNLOADS`` are the official files an online machine fetches (``data download``);
``LOCAL_LAYOUT`` adds the derived local copies (per-question folders, the S archive) that ``data check`` verifies.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

LOCOMO_COMMIT = "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376"
LOCOMO_CORRECTED_COMMIT = "82e6cbc81f1f82d166c7622a6583bc30c0192294"
LONGMEMEVAL_REVISION = "98d7416c24c778c2fee6e6f3006e7a073259d48f"
PERSONABENCH_COMMIT = "cf1a9550f36d5a5deb9fadcb3919131f8d82cf54"
PERSONABENCH_PREFIX = "personabench/"


@dataclass(frozen=True)
class DataFile:
    benchmark: str
    path: str  # relative to the data root
    url: str | None  # official location (None: derived locally, nothing to download)
    sha256: str | None  # pinned identity (None: no trustworthy pin known; the served hash is recorded)
    size: int | None = None
    note: str = ""


def _checksums(name: str) -> list[tuple[str, str]]:
    text = resources.files("memrepro.datasets.checksums").joinpath(name).read_text()
    return [(line.split()[0], line.split(maxsplit=1)[1].strip()) for line in text.splitlines() if line.strip()]


def _personabench() -> list[DataFile]:
    base = f"https://raw.githubusercontent.com/SalesforceAIResearch/personabench/{PERSONABENCH_COMMIT}/"
    return [DataFile("personabench", PERSONABENCH_PREFIX + rel, base + rel, sha) for sha, rel in
            _checksums("personabench.SHA256SUMS")]


_HF_LME = f"https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned/resolve/{LONGMEMEVAL_REVISION}/"
_HF_PM = "https://huggingface.co/datasets/bowen-upenn/PersonaMem/resolve/main/"

DOWNLOADS: tuple[DataFile, ...] = (
    DataFile("locomo", "locomo/locomo10.json",
             f"https://raw.githubusercontent.com/snap-research/locomo/{LOCOMO_COMMIT}/data/locomo10.json",
             "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4", 2_805_274,
             "original LoCoMo (the papers' file)"),
    DataFile("locomo", "locomo/corrected/locomo10.json",
             f"https://raw.githubusercontent.com/dial481/locomo/{LOCOMO_CORRECTED_COMMIT}/data/locomo10.json",
             "8f941d1c22ab3dee4cb72521fbccc82d24c30208590a15b0b4005a2f927ff769", 2_804_832,
             "community-corrected revision (not for paper numbers)"),
    DataFile("longmemeval", "longmemeval/longmemeval_oracle.json", _HF_LME + "longmemeval_oracle.json",
             "821a2034d219ab45846873dd14c14f12cfe7776e73527a483f9dac095d38620c", 15_388_478, "third-party pin"),
    DataFile("longmemeval", "longmemeval/longmemeval_s_cleaned.json", _HF_LME + "longmemeval_s_cleaned.json",
             "d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442", 277_383_467, "third-party pin"),
    DataFile("longmemeval", "longmemeval/longmemeval_m_cleaned.json", _HF_LME + "longmemeval_m_cleaned.json",
             None, None, "about 2.7 GB; no pin known"),
    DataFile("personamem", "personamem/questions_32k.csv", _HF_PM + "questions_32k.csv",
             "23f306a8d28b7ffcf133fe7dad09ade06fcb862fc7c3f19691362a5cd69409bd", 1_304_777),
    DataFile("personamem", "personamem/shared_contexts_32k.jsonl", _HF_PM + "shared_contexts_32k.jsonl", None,
             None, "no pin known"),
    DataFile("personamem", "personamem/questions_128k.csv", _HF_PM + "questions_128k.csv", None),
    DataFile("personamem", "personamem/shared_contexts_128k.jsonl", _HF_PM + "shared_contexts_128k.jsonl", None),
    DataFile("personamem", "personamem/questions_1M.csv", _HF_PM + "questions_1M.csv", None),
    DataFile("personamem", "personamem/shared_contexts_1M.jsonl", _HF_PM + "shared_contexts_1M.jsonl", None),
    *_personabench(),
)

LOCAL_LAYOUT: tuple[DataFile, ...] = (
    DataFile("longmemeval", "longmemeval/longmemeval_oracle.reassembled.json", None,
             "54470afe8bcb104fc9cb0b53b02b39e044ac2af394d80c654ee7cf3f7487acaa", 14_820_154,
             "derived: the 500 oracle objects sorted by question_id"),
    DataFile("longmemeval", "longmemeval/longmemeval_s_cleaned_lme_jsons_498.tar.xz", None,
             "e6921e1ef1e2b4669f08084efbcb135cd5aabd85f21bf879642c74a40842c05b", 42_304_332,
             "cleaned S, 498 of 500 questions, per-question files"),
    *(DataFile("longmemeval", f"longmemeval/oracle_lme_jsons/{rel}", None, sha) for sha, rel in
      _checksums("longmemeval_oracle_per_question.SHA256SUMS")),
)


def catalogue(benchmarks: list[str] | None = None) -> list[DataFile]:
    entries = [*DOWNLOADS, *LOCAL_LAYOUT]
    return [e for e in entries if not benchmarks or e.benchmark in benchmarks]
