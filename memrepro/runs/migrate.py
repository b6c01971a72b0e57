"""Move run folders written before run ids hashed algorithm versions (run record schema 1) to the ids the runner
computes now, so that ``run`` / ``experiments`` find them instead of recomputing (``python -m memrepro migrate``).

A folder moves only when its stored ``config.yaml`` reproduces the id it was written under by the old rule: the
stored config then is exactly what was hashed, and the new id is computed from it by
:func:`memrepro.runs.identity.run_id_payload`, as the runner does. Such a run was computed by version 1 of every
retriever: one whose ``ALGORITHM_VERSION`` has been bumped since is left in place, to be recomputed. An RF-Mem run
recorded in the flat parameter form is hashed in today's nested form (``nest_flat_config``); where that is not
exactly what the runner composes, the run is simply recomputed. Rankings, metrics and rows are copied unchanged;
``metrics.json`` is rewritten at the current schema with the new id (``run_id``, ``provenance.config_hash``,
``migrated_from``; run it while no run computes), and ``run.trec``'s tag column carries the new id. Anything that
does not verify is left where it is and named. Eval runs (scored run files) keep their ids.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from omegaconf import DictConfig, OmegaConf

from memrepro.provenance import config_hash
from memrepro.retrievers.rfmem.params import nest_flat_config
from memrepro.runs.folder import COMPLETE, RunWriter, discard, is_hidden, run_problem
from memrepro.runs.identity import run_id_payload, semantic_config
from memrepro.runs.record import SCHEMA_VERSION, RunRecord

ENCODER_RECORD_ONLY = ("label", "resolved")  # what metrics.json's encoder adds to the encoder's identity


@dataclass(frozen=True)
class Moved:
    old: Path
    new: Path | None  # None: left where it is
    note: str


def legacy_run_id(config: DictConfig, data_sha256: str, encoder_identity: Mapping[str, Any]) -> str:
    """The id schema-1 runs were written under: no algorithm versions, and the retriever node hashed whole
    (``chunk_bytes`` and ``latency_scope`` included)."""
    semantic = semantic_config(config)
    if "retriever" in semantic:  # schema 1 hashed these; the current rule drops them
        semantic["retriever"] = OmegaConf.to_container(config.retriever, resolve=True)
    return config_hash({"config": semantic, "data_sha256": data_sha256, "encoder": dict(encoder_identity)})


def migrate_run(folder: Path) -> Moved:
    problem = run_problem(folder)
    if problem:
        return Moved(folder, None, f"not migrated: {problem}")
    record = RunRecord.read(folder / "metrics.json")
    if record.provenance.run_file is not None:
        return Moved(folder, None, "an eval run: its id is unchanged")
    config = OmegaConf.load(folder / "config.yaml")
    identity = {k: v for k, v in record.encoder.items() if k not in ENCODER_RECORD_ONLY}
    # an RF-Mem run recorded before the nested parameter schema is hashed in today's form, as the runner composes it
    current = OmegaConf.merge(config, {"retriever": None})
    current.retriever = nest_flat_config(OmegaConf.to_container(config.retriever, resolve=True))
    payload = run_id_payload(current, record.provenance.data_sha256, identity)
    bumped = sorted(target for target, version in payload["algorithm"].items() if version != 1)
    if bumped:  # computed by version 1 of everything: a retriever fixed since must recompute
        return Moved(folder, None, f"left for recomputation: {', '.join(bumped)} changed since it was computed "
                                   f"(ALGORITHM_VERSION {payload['algorithm'][bumped[0]]}); rerun its command")
    new_id = config_hash(payload)
    if new_id == folder.name:
        return Moved(folder, None, "already at its current id")
    if legacy_run_id(config, record.provenance.data_sha256, identity) != folder.name:
        return Moved(folder, None, "not migrated: its config.yaml does not reproduce its id under either rule "
                                   "(edited, or written by another version); rerun its command")
    target = folder.with_name(new_id)
    if target.exists():
        return Moved(folder, None, f"not migrated: {target.name} already exists (a newer run of the same setting)")
    moved = dataclasses.replace(record, run_id=new_id, schema_version=SCHEMA_VERSION, migrated_from=folder.name,
                                provenance=dataclasses.replace(record.provenance, config_hash=new_id,
                                                               algorithm_versions=payload["algorithm"]))
    writer = RunWriter(target)
    try:
        for name in ("config.yaml", "queries.jsonl"):
            writer.write_text(name, (folder / name).read_text(encoding="utf-8"))
        writer.rows = sum(1 for _ in open(folder / "queries.jsonl", encoding="utf-8"))
        if (folder / "run.trec").exists():
            writer.write_text("run.trec", _retag((folder / "run.trec").read_text(encoding="utf-8"), folder.name,
                                                 new_id))
        writer.write_json("metrics.json", moved.to_json())
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    removed = discard(folder, target)  # a user's own files in the old folder move into the new one, not lost
    kept = removed.partition("; kept ")[2]
    return Moved(folder, target, f"moved to {new_id}" + (f"; kept {kept}" if kept else ""))


def migrate(results_dir: str | os.PathLike[str], echo: Callable[[str], None] = print) -> list[Moved]:
    """Every complete run under ``results_dir/runs``."""
    out = []
    for marker in sorted(Path(results_dir).glob(f"runs/*/*/*/*/{COMPLETE}")):
        folder = marker.parent
        if is_hidden(folder):
            continue
        result = migrate_run(folder)
        echo(f"{folder}: {result.note}")
        out.append(result)
    return out


def _retag(trec: str, old: str, new: str) -> str:
    lines = []
    for line in trec.splitlines():
        head, _, tag = line.rpartition(" ")
        lines.append(f"{head} {new}" if tag == old else line)
    return "\n".join(lines) + ("\n" if lines else "")
