"""LongMemEval's retrieval metrics, as pure functions of one ranked id list.

Sources: LongMemEval official ``src/retrieval/eval_utils.py`` (``evaluate_retrieval``,
``evaluate_retrieval_turn2session``) and RF-Mem's ``RF_mem/LongMemEval`` evaluation, which uses the same
``recall_all`` on session ids; docs/protocols.md#metrics and docs/protocols.md#longmemeval-protocol.
"""

from __future__ import annotations

from typing import Collection, Iterable, Mapping, Sequence

from memrepro.types import Memory


def recall_all_at_k(ranked_ids: Sequence[str], gold: Collection[str], k: int) -> float:
    """1.0 iff every gold id is among the first ``k`` ranked ids (official ``recall_all``; RF-Mem's Recall@k).

    Set semantics: duplicate ids in ``gold`` count once. An empty gold scores 0.0 (the official code's
    ``all([])`` would give 1.0, but memrepro excludes gold-less queries before averaging:
    docs/protocols.md#query-universe).
    A list shorter than ``k`` is used whole.
    """
    _check_k(k)
    wanted = set(gold)
    if not wanted:
        return 0.0
    return float(wanted <= set(ranked_ids[:k]))


def recall_any_at_k(ranked_ids: Sequence[str], gold: Collection[str], k: int) -> float:
    """1.0 iff at least one gold id is among the first ``k`` ranked ids (official ``recall_any`` = Hit@k)."""
    _check_k(k)
    wanted = set(gold)
    return float(any(memory_id in wanted for memory_id in ranked_ids[:k]))


def sessions_from_turn_ranking(ranked_turn_ids: Sequence[str], session_of: Mapping[str, str], k: int) -> list[str]:
    """The sessions of the shortest turn-ranking prefix that holds ``k`` distinct sessions (or all of it).

    Official ``evaluate_retrieval_turn2session``: turn ids are mapped to their session and the cutoff grows
    from ``k`` until ``k`` distinct sessions are seen, so ``recall_*_at_k(result, gold_sessions, k)`` on the
    returned list equals the official turn→session score at ``k``. Returned in first-seen order, deduplicated,
    at most ``k`` long. ``session_of`` maps turn (memory) id → session id (``Memory.session``); using it
    instead of the official string-splitting keeps repeated or ``#k``-suffixed session ids right; build it
    with :func:`official_session_of` to reproduce the official ``noans`` relabel exactly.
    """
    _check_k(k)
    sessions: list[str] = []
    seen: set[str] = set()
    for turn_id in ranked_turn_ids:
        try:
            session = session_of[turn_id]
        except KeyError:
            raise ValueError(f"turn id {turn_id!r} has no session in session_of") from None
        if session not in seen:
            seen.add(session)
            sessions.append(session)
            if len(sessions) == k:
                break
    return sessions


def official_session_of(turn_memories: Iterable[Memory], gold_turn_ids: Collection[str]) -> dict[str, str]:
    """Turn id → session id as the official turn→session evaluation sees it.

    The official ``run_retrieval.py`` renames a user turn of an ``answer_*`` session that is not marked
    ``has_answer`` to ``noans_*``, so after stripping the turn suffix it belongs to a *different* session than
    the evidence turns of the same session: it neither hits the gold session nor shares its slot among the k
    distinct sessions. Gold turns (the loader's turn-level gold) keep their real session id.
    """
    gold = set(gold_turn_ids)
    mapping: dict[str, str] = {}
    for memory in turn_memories:
        session = memory.session if memory.session is not None else memory.id
        if "answer" in session and memory.id not in gold:
            session = session.replace("answer", "noans")
        mapping[memory.id] = session
    return mapping


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
