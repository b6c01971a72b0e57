"""memrepro: reproduce, compare and extend memory-retrieval methods (see README).

Public API (imported lazily, so ``python -m memrepro --help`` stays instant): :func:`evaluate` scores your own
retriever under a benchmark's protocol; :class:`Retriever` is the Protocol it implements; :class:`RetrievalInput`
is what it receives per query.
"""

from __future__ import annotations

from typing import Any

__all__ = ["evaluate", "Retriever", "RetrievalInput"]


def __getattr__(name: str) -> Any:
    if name in ("evaluate", "Retriever"):
        from memrepro import api

        return getattr(api, name)
    if name == "RetrievalInput":
        from memrepro.retrievers.base import RetrievalInput

        return RetrievalInput
    raise AttributeError(f"module 'memrepro' has no attribute {name!r}")
