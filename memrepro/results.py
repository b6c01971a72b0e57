"""Run folders: written atomically, completion marker last, skipped when complete.

Layout of one run (``results/runs/<dataset>/<retriever>/<encoder>/<run id>/``):
``config.yaml`` (resolved config), ``queries.jsonl`` (one row per (split, query): top-N ids and scores, the rank
of every gold item, per-query metrics, category, split seed, latency), ``run.trec`` (TREC run file of the
top-N), ``metrics.json`` (aggregates + provenance) and ``COMPLETE`` (written last). The folder is assembled
under a temporary name and renamed into place, so a crash never leaves a folder that reads back as complete.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping

COMPLETE = "COMPLETE"


def run_dir(results_dir: str | os.PathLike[str], dataset: str, retriever: str, encoder: str, run_id: str) -> Path:
    safe = lambda s: "".join(c if c.isalnum() or c in "-_.+" else "_" for c in s)  # noqa: E731
    return Path(results_dir) / "runs" / safe(dataset) / safe(retriever) / safe(encoder) / run_id


def is_complete(folder: Path) -> bool:
    return (folder / COMPLETE).is_file()


def read_metrics(folder: Path) -> dict[str, Any]:
    if not is_complete(folder):
        raise FileNotFoundError(f"{folder} is not a complete run (no {COMPLETE} marker)")
    return json.loads((folder / "metrics.json").read_text())


def read_queries(folder: Path) -> list[dict[str, Any]]:
    if not is_complete(folder):
        raise FileNotFoundError(f"{folder} is not a complete run (no {COMPLETE} marker)")
    with open(folder / "queries.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


class RunWriter:
    """Collects a run's files in a temporary sibling folder; ``commit()`` writes the marker and renames."""

    def __init__(self, final: Path) -> None:
        self.final = final
        final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = final.parent / f".{final.name}.tmp-{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir()

    def write_text(self, name: str, text: str) -> None:
        (self.tmp / name).write_text(text, encoding="utf-8")

    def write_json(self, name: str, data: Mapping[str, Any]) -> None:
        self.write_text(name, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")

    def write_jsonl(self, name: str, rows: Iterable[Mapping[str, Any]]) -> None:
        with open(self.tmp / name, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, separators=(",", ":"), default=str) + "\n")

    def commit(self) -> Path:
        (self.tmp / COMPLETE).write_text("ok\n")
        if self.final.exists():  # overwrite: move the old run aside first, then swap
            trash = self.final.parent / f".{self.final.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(self.final, trash)
            os.replace(self.tmp, self.final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(self.tmp, self.final)
        return self.final

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
