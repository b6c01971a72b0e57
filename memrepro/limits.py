"""Sizes that bound how much memory one step may take, how wide a table's row label may be, and the search
backends (light: the config schemas import it without torch)."""

from __future__ import annotations

# One block of a similarity or candidate matrix is cut to at most this many bytes; results do not depend on it.
DEFAULT_CHUNK_BYTES = 256 << 20

# characters: a table's row label fits on a screen beside its numbers (tables, compare, sweeps, the experiment list)
MAX_LABEL = 60

# ``search.backend`` (memrepro.search): every one, and the exact ones (same rankings, so never part of a run id)
SEARCH_BACKENDS = ("auto", "torch", "faiss", "faiss_ivf", "faiss_hnsw")
EXACT_BACKENDS = ("auto", "torch", "faiss")
