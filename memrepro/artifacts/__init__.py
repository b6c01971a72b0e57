"""Trained models as derived artifacts, like embeddings: one per split seed, found by recipe hash, trained on demand,
verified on load (:mod:`memrepro.artifacts.per_seed`), and what finding or training each one takes
(:mod:`memrepro.artifacts.forecast`).

Retrievers hold these resolvers; the trainers (``memrepro.training``) subclass them. Nothing here imports either.
"""
