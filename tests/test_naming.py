"""Runs side by side are named by the settings that tell them apart (memrepro.tables.naming), never by hash."""

from dataclasses import dataclass, field
from pathlib import Path

from memrepro.tables.naming import MAX_LABEL, distinguishing, labels, short_paths


@dataclass
class FakeRun:
    retriever_name: str
    settings: dict
    encoder_label: str = "all-MiniLM-L6-v2"
    folder: Path = field(default_factory=lambda: Path("results/runs/x/y/z/0123456789abcdef"))


def rfmem(alpha, tau, run_id="0123456789abcdef"):
    return FakeRun("rfmem", {"dataset": {"name": "personabench"},
                             "retriever": {"_target_": "memrepro.R", "k": 5,
                                           "recollection": {"alpha": alpha, "k": 50}, "gate": {"tau": tau}}},
                   folder=Path(f"results/runs/personabench/rfmem/m/{run_id}"))


def test_a_sweep_is_named_by_its_swept_settings():
    runs = [rfmem(a, t) for a in (0.1, 0.5) for t in (0.2, 0.3)]
    assert labels(runs) == ["alpha=0.1, tau=0.2", "alpha=0.1, tau=0.3", "alpha=0.5, tau=0.2", "alpha=0.5, tau=0.3"]


def test_a_lone_run_is_named_by_retriever_and_encoder():
    assert labels([rfmem(0.1, 0.2)]) == ["rfmem (all-MiniLM-L6-v2)"]
    assert distinguishing([rfmem(0.1, 0.2)]) == [{}]


def test_different_retrievers_lead_with_the_retriever_and_compare_own_keys_within_their_group():
    dense = [FakeRun("familiarity", {"dataset": {"name": "personabench"}, "retriever": {"k": k}}) for k in (5, 10)]
    assert labels([*dense, rfmem(0.1, 0.2)]) == ["familiarity, k=5", "familiarity, k=10", "rfmem"]


def test_identical_settings_get_the_run_id_prefix():
    runs = [rfmem(0.1, 0.2, "aaaaaaaa11111111"), rfmem(0.1, 0.2, "bbbbbbbb22222222")]
    assert labels(runs) == ["rfmem (all-MiniLM-L6-v2) [aaaaaaaa]", "rfmem (all-MiniLM-L6-v2) [bbbbbbbb]"]


def test_labels_fit_on_a_screen_and_stay_unique():
    runs = [FakeRun("rfmem", {"retriever": {f"a_very_long_setting_name_{i}": v for i in range(6)}},
                    folder=Path(f"r/{v:016d}")) for v in (1, 2)]
    out = labels(runs)
    assert all(len(text) <= MAX_LABEL for text in out) and len(set(out)) == 2


def test_short_paths_are_the_shortest_unambiguous_suffix():
    assert short_paths(["retriever.k", "retriever.recollection.k", "retriever.gate.tau"]) == {
        "retriever.k": "retriever.k", "retriever.recollection.k": "recollection.k", "retriever.gate.tau": "tau"}
