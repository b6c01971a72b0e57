"""Frozen rankings → per-query metrics → aggregates. Nothing here sees a retriever."""
