"""Sizes that bound how much memory one step may take (light: the config schemas import it without torch)."""

from __future__ import annotations

# One block of a similarity or candidate matrix is cut to at most this many bytes; results do not depend on it.
DEFAULT_CHUNK_BYTES = 256 << 20
