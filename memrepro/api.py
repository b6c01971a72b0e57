"""The public entry points for scoring your own system (README "Score your own system").

``Retriever`` is the Protocol a system implements; ``evaluate`` runs it through exactly the pipeline of
``python -m memrepro run`` (embedding cache, batching, freeze with the tie rule, the benchmark's metrics and
aggregation, a results folder with provenance naming the retriever), so ``tables``, ``compare`` and
``leaderboard`` treat the result like any run.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

from memrepro.context import RunContext
from memrepro.paths import CONFIG_DIR
from memrepro.retrievers.base import Ranked, RetrievalInput, Retrieved, Retriever, RetrieverBase

__all__ = ["Ranked", "RetrievalInput", "Retrieved", "Retriever", "RetrieverBase", "compose", "evaluate"]


def compose(dataset: str = "locomo", encoder: str = "mpnet", retriever: str = "dense",
            overrides: Sequence[str] = ()) -> Any:
    """The ``run`` config with the given groups and Hydra overrides (as on the command line)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import memrepro.config  # noqa: F401  (registers the schemas)
    from memrepro.experiments import asks_for_presets, register_presets

    if asks_for_presets(overrides):
        register_presets()
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR), job_name="memrepro_evaluate"):
        return hydra_compose("config", overrides=[f"dataset={dataset}", f"encoder={encoder}",
                                                  f"retriever={retriever}", *overrides])


def evaluate(retriever: Any, dataset: str = "locomo", encoder: str = "mpnet", overrides: Sequence[str] = (),
             name: str | None = None, order: Literal["score", "native"] | None = None,
             context: RunContext | None = None):
    """Score ``retriever`` (any object with :class:`Retriever`'s ``retrieve``) on ``dataset``.

    ``overrides`` are Hydra overrides as for ``run`` (``"dataset.variant=oracle"``, ``"paths.results_dir=/tmp/r"``,
    ``"latency.batch1_queries=0"``). Returns the runner's outcome: ``.folder`` (the results folder) and
    ``.metrics`` (the ``metrics.json`` document: ``metrics["summary"]["pooled"]["mrr"]`` …). A run already
    complete for the same retriever description, data and config is read back, not recomputed
    (``overrides=["overwrite=true"]`` redoes it). ``context``: pass one :class:`memrepro.context.RunContext` to
    several calls to load the dataset and encoder, and encode, once for all of them.
    """
    from omegaconf import OmegaConf

    from memrepro.retrievers.external import ExternalRetriever
    from memrepro.runner import run

    adapter = retriever if isinstance(retriever, ExternalRetriever) else ExternalRetriever(
        instance=retriever, name=name, order=order)
    cfg = compose(dataset, encoder, "dense", overrides)
    OmegaConf.set_struct(cfg, False)
    cfg.retriever = OmegaConf.create({"external": True, **_plain(adapter.describe())})
    return run(cfg, retriever=adapter, context=context)


def _plain(value: Any) -> Any:
    """JSON-able copy of a describe() dict (numpy scalars, tuples …) for the run's config."""
    import json

    return json.loads(json.dumps(value, default=str))
