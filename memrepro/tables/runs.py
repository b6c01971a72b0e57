"""Reading complete runs back from ``results/runs`` for tables: config, metrics, per-query rows."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from memrepro.results import COMPLETE, read_metrics, read_queries


@dataclass(frozen=True)
class Run:
    folder: Path

    @cached_property
    def config(self) -> dict[str, Any]:
        return yaml.safe_load((self.folder / "config.yaml").read_text())

    @cached_property
    def metrics(self) -> dict[str, Any]:
        return read_metrics(self.folder)

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        return read_queries(self.folder)

    @property
    def dataset(self) -> str:
        return self.metrics["dataset"]

    @property
    def retriever(self) -> dict[str, Any]:
        return self.config["retriever"]

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(self.config["dataset"].get("seeds") or ())

    def per_unit(self, metric: str) -> dict[str, float]:
        """``{"split::query_id": value}`` over scored rows: the units of a paired test."""
        return {f"{r['split']}::{r['query_id']}": r["metrics"][metric] for r in self.rows if r["excluded"] is None}


def complete_runs(results_dir: str | Path) -> list[Run]:
    return [Run(marker.parent) for marker in sorted(Path(results_dir).glob(f"runs/*/*/*/*/{COMPLETE}"))]
