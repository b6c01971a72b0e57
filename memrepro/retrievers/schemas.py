"""The config schemas of the retrievers that check their own arguments when built in Python (dense, BM25,
Recollection, RF-Mem): declared here, next to their code, so a constructor reads its schema without the config tree
(:mod:`memrepro.config` gathers these with the others). Each field is the one declaration of its default and range:
the constructors take their defaults from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from memrepro.errors import ConfigError
from memrepro.limits import DEFAULT_CHUNK_BYTES
from memrepro.parameters import Rule, integer_at_least, number_above, number_in, one_of, param
from memrepro.retrievers.rfmem.params import (COSINE, ENGINES, LATENCY_SCOPES, FamiliarityParams, GateParams,
                                              RecollectionParams, refuse_faithful_only_variants)


MODES = ("full", "topk")  # a full ranking of every memory | the k best (dense, BM25)


def _topk_needs_k(values: Mapping[str, Any], prefix: str) -> None:
    """``check_together`` of the retrievers with ``mode=topk``: it returns the ``k`` best, so it needs a ``k``."""
    if values["mode"] == "topk" and values["k"] is None:
        raise ConfigError(f"{prefix}.k", None, f"an integer >= 1 when {prefix}.mode=topk")


def _chunk_bytes() -> Any:
    """The memory bound of a similarity search, in bytes; results do not depend on it."""
    return param(DEFAULT_CHUNK_BYTES, integer_at_least(1), changes_results=False)


@dataclass
class DenseRetrieverConfig:
    _target_: str = "memrepro.retrievers.dense.DenseRetriever"
    mode: str = param("full", one_of(*MODES))
    k: Optional[int] = param(None, integer_at_least(1))
    min_sim: Optional[float] = param(None, COSINE)  # cosine floor of mode=topk
    chunk_bytes: int = _chunk_bytes()
    name: str = "dense"

    check_together = staticmethod(_topk_needs_k)


@dataclass
class RecollectionRetrieverConfig:
    """RF-Mem Recollection alone (docs/retrievers.md#recollection): ``retriever.recollection.<field>``; the
    parameters and their defaults are ``RecollectionParams``'s (one place), which the engines take whole."""

    _target_: str = "memrepro.retrievers.rfmem.retriever.RecollectionRetriever"
    # the engines rank identically; each still has runs of its own, so the two can be compared
    engine: str = param("faithful", one_of(*ENGINES),  # faithful (per-query reference) | compiled (numba)
                        changes_results=False, in_run_id=True)
    recollection: RecollectionParams = field(default_factory=RecollectionParams)
    # path_only | gate_plus_path: what a query's latency_ms covers
    latency_scope: str = param("path_only", one_of(*LATENCY_SCOPES), changes_results=False)

    @staticmethod
    def check_together(values: Mapping[str, Any], prefix: str) -> None:
        if values["engine"] != "faithful":
            refuse_faithful_only_variants(values["recollection"], values["engine"], f"{prefix}.recollection")


@dataclass
class RFMemRetrieverConfig(RecollectionRetrieverConfig):
    """RF-Mem (docs/retrievers.md#rf-mem): familiarity gate (``retriever.gate``) → dense top-K
    (``retriever.familiarity``) or Recollection (``retriever.recollection``)."""

    _target_: str = "memrepro.retrievers.rfmem.retriever.RFMemRetriever"
    gate: GateParams = field(default_factory=GateParams)
    familiarity: FamiliarityParams = field(default_factory=FamiliarityParams)
    chunk_bytes: int = _chunk_bytes()  # memory bound of the faithful engine's Familiarity-path search


BM25_METHODS = ("robertson", "lucene", "atire", "bm25l", "bm25+")  # the BM25 variants bm25s scores


def _bm25_stopwords_ok(value: Any) -> bool:
    """Whether bm25s has stop words for ``value`` (a language name or code), asked of bm25s itself."""
    import bm25s

    try:
        bm25s.tokenize(["a"], stopwords=value, show_progress=False)
    except (ValueError, TypeError):
        return False
    return True


def _stemmer_ok(value: Any) -> bool:
    try:
        import Stemmer  # PyStemmer
    except ImportError:
        return False
    return value in Stemmer.algorithms()


@dataclass
class BM25RetrieverConfig:
    _target_: str = "memrepro.retrievers.bm25.BM25Retriever"
    mode: str = param("full", one_of(*MODES))
    k: Optional[int] = param(None, integer_at_least(1))
    k1: float = param(1.5, number_above(0.0, inclusive=True))  # term-frequency saturation (0: binary)
    b: float = param(0.75, number_in(0.0, 1.0))  # length normalisation
    method: str = param("lucene", one_of(*BM25_METHODS))  # bm25s variants: lucene | robertson | atire | bm25l | bm25+
    stopwords: Optional[str] = param("en", Rule(lambda v: isinstance(v, str) and _bm25_stopwords_ok(v),
                                                "a language bm25s has stop words for (en, de, fr, es, ...)", "en"))
    # english: Snowball stemming (needs PyStemmer)
    stemmer: Optional[str] = param(None, Rule(lambda v: isinstance(v, str) and _stemmer_ok(v),
                                              "a Snowball stemmer PyStemmer knows (english, ...; pip install "
                                              "PyStemmer)", "english"))
    name: str = "bm25"

    check_together = staticmethod(_topk_needs_k)
