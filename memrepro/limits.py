"""Sizes that bound how much memory one step may take, and how wide a table's row label may be (light: the config
schemas import it without torch)."""

from __future__ import annotations

# One block of a similarity or candidate matrix is cut to at most this many bytes; results do not depend on it.
DEFAULT_CHUNK_BYTES = 256 << 20

# characters: a table's row label fits on a screen beside its numbers (tables, compare, sweeps, the experiment list)
MAX_LABEL = 60
