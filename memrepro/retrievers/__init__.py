"""Retrievers: each takes queries (never their gold) and an episode index and returns ranked hits."""
