"""Encoders, their name resolution and their on-disk embedding cache."""
