"""Derived state of a scope: a pure fold over its entries.

``fold(state, entry)`` never does I/O and never reads the clock; the store applies it in the same transaction
that appends the entry and stores the result, and ``decklog verify`` checks that folding the whole log from
scratch gives exactly the stored state. The state's shapes live in core/state_model.py, the per-kind handlers in
core/state_fold.py; this module is what the rest of decklog imports.
"""

from __future__ import annotations

from typing import Any

from core.clock import iso
from core.entries import Entry
from core.state_fold import HANDLERS
from core.state_model import (
    OMITTED_WHEN_EMPTY,
    AlertState,
    ObligationState,
    ProposalState,
    RoleHolder,
    RunState,
    ScopeState,
    ThreadRef,
    empty_state,
)

__all__ = [
    "NOT_A_RESPONSE",
    "OMITTED_WHEN_EMPTY",
    "AlertState",
    "ObligationState",
    "ProposalState",
    "RoleHolder",
    "RunState",
    "ScopeState",
    "ThreadRef",
    "empty_state",
    "fold",
    "fold_all",
]

# Entries a person records that are not a response to the incident (an export, a bookkeeping note).
NOT_A_RESPONSE = frozenset({"declared", "report_exported", "delivery_failed", "thread_linked", "agent_turn"})


def fold(state: ScopeState, entry: Entry) -> ScopeState:
    """Apply one entry to the state. Pure: same inputs, same output."""
    at = iso(entry.at)
    changes: dict[str, Any] = {"version": entry.seq, "updated_at": at}
    changes["kind_counts"] = _with_count(state.kind_counts, entry.kind)
    if entry.actor.type == "human" and entry.kind not in NOT_A_RESPONSE:
        changes["last_human_seq"] = entry.seq
        if not state.acknowledged_at:
            changes["acknowledged_at"] = at
    handler = HANDLERS.get(type(entry.payload))
    if handler is not None:
        changes.update(handler(state, entry, entry.payload))
    return _evolve(state, changes)


def _with_count(counts: dict[str, int], kind: str) -> dict[str, int]:
    updated = dict(counts)
    updated[kind] = counts.get(kind, 0) + 1
    return updated


def _evolve(state: ScopeState, changes: dict[str, Any]) -> ScopeState:
    """``state.model_copy(update=changes)`` without pydantic's generic copy (the fold's hot path: one per
    entry). Same fields, same fields-set, no validation (every value here was built by the fold)."""
    new = object.__new__(type(state))
    values = state.__dict__.copy()
    values.update(changes)
    object.__setattr__(new, "__dict__", values)
    object.__setattr__(new, "__pydantic_fields_set__", state.__pydantic_fields_set__ | changes.keys())
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


def fold_all(scope: str, entries: list[Entry]) -> ScopeState:
    state = empty_state(scope)
    for entry in entries:
        state = fold(state, entry)
    return state
