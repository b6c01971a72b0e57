"""What the gold corrections change (docs/checks.md#gold-labels): each run scored with
``dataset.gold_labels=corrected`` beside its twin with the original gold (the same dataset, retriever, encoder and
settings otherwise), per primary metric (:func:`memrepro.datasets.gold_corrections.corrections_effect`)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence

from memrepro.datasets.gold_corrections import CORRECTED, corrections_effect
from memrepro.errors import MemreproError, one_line
from memrepro.tables.runs import Run, preferred

HOW_TO_PAIR = "python -m memrepro run dataset=locomo retriever=bm25 encoder=minilm dataset.gold_labels=corrected"


def is_corrected(run: Run) -> bool:
    labels = run.record.provenance.loader_options.get("gold_labels")
    return isinstance(labels, dict) and labels.get("mode") == CORRECTED


def _twin_key(run: Run) -> tuple[str, str, str, str]:
    """What a run and its twin share: everything that decides the run but the gold labels."""
    settings = json.loads(json.dumps(run.settings, default=str))
    (settings.get("dataset") or {}).pop("gold_labels", None)
    return run.dataset, run.retriever_name, run.encoder_label, json.dumps(settings, sort_keys=True)


def twins(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """``(original, corrected)`` for every corrected run whose original twin is here (the preferred one of several)."""
    originals: dict[tuple[str, str, str, str], list[Run]] = defaultdict(list)
    corrected = []
    for run in runs:
        (corrected if is_corrected(run) else originals[_twin_key(run)]).append(run)
    pairs = []
    for run in corrected:
        original = preferred(originals.get(_twin_key(run), []))
        if original is not None:
            pairs.append((original, run))
    return pairs


@dataclass(frozen=True)
class Effect:
    """One row of the table: a system, one metric, what the corrections change."""

    original: str  # run keys
    corrected: str
    dataset: str
    metric: str
    corrections: str  # which file and version corrected how many questions
    questions: int  # corrected (split, question) units the runs scored
    before: float | None  # over those units, original gold
    after: float | None
    overall_before: float
    overall_after: float

    @property
    def overall_delta(self) -> float:
        return self.overall_after - self.overall_before


def effects(pairs: Sequence[tuple[Run, Run]], skip: Callable[[str], None]) -> list[Effect]:
    """Every pair's effect on each primary metric (the rows are read again here and let go after); a pair whose rows
    do not verify is named and left out."""
    out = []
    for original, corrected in pairs:
        labels = corrected.record.provenance.loader_options["gold_labels"]
        said = f"{labels.get('file')}, version {labels.get('version')}: {labels.get('corrected')} questions"
        metrics = [m for m in original.record.primary if m in original.record.metric_names
                   and m in corrected.record.metric_names]
        try:
            for metric in metrics:
                effect = corrections_effect(original, corrected, metric)
                out.append(Effect(original.folder.name, corrected.folder.name, original.dataset, metric, said,
                                  effect.questions, effect.before, effect.after, effect.overall_before,
                                  effect.overall_after))
        except (MemreproError, OSError) as exc:
            skip(f"the gold corrections of {corrected.folder} against {original.folder} are not shown: "
                 f"{one_line(exc)}")
        finally:
            for run in (original, corrected):
                run.__dict__.pop("rows", None)
    return out


def grouped(rows: Sequence[Effect]) -> list[list[Effect]]:
    """The rows by system (one pair), in the order given."""
    groups: dict[tuple[str, str], list[Effect]] = {}
    for row in rows:
        groups.setdefault((row.original, row.corrected), []).append(row)
    return list(groups.values())
