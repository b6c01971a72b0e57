"""memrepro: reproduce, compare and extend memory-retrieval methods (see README).

Public API (imported lazily, so ``python -m memrepro --help`` stays instant): :func:`evaluate` scores your own
retriever under a benchmark's protocol; :class:`Retriever` is the Protocol it implements (:class:`RetrieverBase`
gives every optional lifecycle hook a default); :class:`RetrievalInput` is what it receives per query.
"""

from __future__ import annotations

from typing import Any

__all__ = ["evaluate", "Retriever", "RetrieverBase", "RetrievalInput"]


def __getattr__(name: str) -> Any:
    if name in ("evaluate", "Retriever"):
        from memrepro import api

        return getattr(api, name)
    if name in ("RetrievalInput", "RetrieverBase"):
        from memrepro.retrievers import base

        return getattr(base, name)
    raise AttributeError(f"module 'memrepro' has no attribute {name!r}")
