"""The fold of a scope's state: ``fold(state, entry)`` applies one entry, ``fold_all`` a whole log from scratch.

Every entry gets the bookkeeping (version, times, counts, the last human entry); then the handler of its payload's
type in ``HANDLERS`` returns the fields that entry changes (one function per entry kind that changes the state).
Pure: no I/O, no clock; a handler reads the state before the entry. The store applies the fold in the same
transaction that appends the entry and stores the result, and ``decklog verify`` checks that folding the whole log
from scratch gives exactly the stored state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from decklog.core.clock import iso
from decklog.core.entries import (
    ActionResult,
    ActionStarted,
    AgentTurn,
    Approval,
    Declared,
    Entry,
    Evidence,
    Forked,
    Hypothesis,
    ObligationCancelled,
    ObligationClaimed,
    ObligationExpired,
    ObligationFulfilled,
    ObligationOpened,
    ObligationReleased,
    Observation,
    ProposalClosed,
    ProposalMade,
    Retracted,
    RoleAssigned,
    ScopeLinked,
    SeverityChanged,
    StatusChanged,
    Suggestion,
    SuggestionFeedback,
    ThreadLinked,
)
from decklog.core.entries.oncall import Acknowledged, Page
from decklog.core.state.model import (
    AlertState,
    ObligationState,
    ProposalState,
    RoleHolder,
    RunState,
    ScopeState,
    ThreadRef,
    empty_state,
)

Changes = dict[str, Any]
Handler = Callable[[ScopeState, Entry, Any], Changes]

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
    return _with(counts, kind, counts.get(kind, 0) + 1)


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
    return fold_many(empty_state(scope), entries)


def fold_many(state: ScopeState, entries: Iterable[Entry]) -> ScopeState:
    """Apply entries in order: the same state as ``fold`` one at a time, in time linear in the entries.

    ``fold`` copies a map it changes, so that a state once returned never changes. Folding 10,000 alerts into one
    incident that way copies the alert map 10,000 times (quadratic: most of the time a large notification took
    to route). Here the states between the first entry and the last are never seen by anyone, so a map this batch
    copied is updated in place for the rest of the batch (``private_folds``). ``state`` itself is never changed.
    """
    with private_folds():
        for entry in entries:
            state = fold(state, entry)
    return state


# The maps the current batch made (id -> the map, which keeps the id from being reused while the batch runs).
# None outside a batch: every change copies.
_OWNED: ContextVar[dict[int, dict[str, Any]] | None] = ContextVar("decklog_fold_owned", default=None)


@contextmanager
def private_folds() -> Iterator[None]:
    """Within this block, a map that a fold inside the block copied is updated in place by the folds after it.

    Only for a caller that keeps nothing but the last state of the block (no intermediate state may escape it),
    and that does not await inside it. The states passed in from outside the block are never changed.
    """
    token = _OWNED.set({})
    try:
        yield
    finally:
        _OWNED.reset(token)


def _with(mapping: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    owned = _OWNED.get()
    if owned is not None and owned.get(id(mapping)) is mapping:
        mapping[key] = value
        return mapping
    updated = dict(mapping)
    updated[key] = value
    if owned is not None:
        owned[id(updated)] = updated
    return updated


def _without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


# -- the incident's frame -----------------------------------------------------------------------------------------


def _declared(state: ScopeState, entry: Entry, p: Declared) -> Changes:
    at = iso(entry.at)
    changes: Changes = dict(title=p.title, severity=p.severity, services=p.services, created_at=at)
    changes["status"] = "investigating" if state.kind == "incident" else "recorded"
    if entry.actor.type == "human":
        changes["acknowledged_at"] = at
    return changes


def _status(state: ScopeState, entry: Entry, p: StatusChanged) -> Changes:
    at = iso(entry.at)
    changes: Changes = {"status": p.status}
    if p.status == "mitigated" and not state.mitigated_at:
        changes["mitigated_at"] = at
    if p.status == "resolved":
        changes["resolved_at"] = at
        if not state.mitigated_at:
            changes["mitigated_at"] = at
    elif state.resolved_at:
        changes["resolved_at"] = ""
    return changes


def _severity(state: ScopeState, entry: Entry, p: SeverityChanged) -> Changes:
    changes: Changes = {"severity": p.severity}
    if entry.actor.type == "system":
        changes["source_severity_changes"] = state.source_severity_changes + 1
    return changes


def _forked(_state: ScopeState, _entry: Entry, p: Forked) -> Changes:
    return {"forked_from": p.source, "forked_at": p.seq}


def _role(state: ScopeState, _entry: Entry, p: RoleAssigned) -> Changes:
    return {"roles": _with(state.roles, p.role, RoleHolder(user_id=p.user_id, user_name=p.user_name))}


def _thread(_state: ScopeState, _entry: Entry, p: ThreadLinked) -> Changes:
    thread = ThreadRef(channel=p.channel, ts=p.ts, permalink=p.permalink, dedicated_channel=p.dedicated_channel)
    return {"thread": thread}


def _linked(state: ScopeState, _entry: Entry, p: ScopeLinked) -> Changes:
    return {"linked": (*state.linked, p.scope)} if p.scope not in state.linked else {}


def _hypothesis(state: ScopeState, _entry: Entry, _p: Hypothesis) -> Changes:
    return {"hypotheses": state.hypotheses + 1}


def _evidence(state: ScopeState, _entry: Entry, _p: Evidence) -> Changes:
    return {"evidence": state.evidence + 1}


def _retracted(state: ScopeState, _entry: Entry, p: Retracted) -> Changes:
    """Evidence taken back no longer counts; feedback taken back leaves its suggestion open again."""
    if p.what == "evidence":
        return {"evidence": max(0, state.evidence - 1)}
    if not p.suggestion_id or not p.text:
        return {}
    changes: Changes = {"suggestions": _with(state.suggestions, p.suggestion_id, p.text)}
    if p.action:
        changes["suggestion_actions"] = _with(state.suggestion_actions, p.suggestion_id, p.action)
    return changes


# -- alerts -------------------------------------------------------------------------------------------------------


def _observation(state: ScopeState, entry: Entry, p: Observation) -> Changes:
    changes: Changes = {}
    if p.service and p.service not in state.services:
        changes["services"] = (*state.services, p.service)
    if p.fingerprint:
        changes.update(_fold_alert(state, entry, p))
    if p.data:
        changes.update(_fold_alert_data(state, p))
    if p.alert_status == "acknowledged" and not state.acknowledged_at:
        changes["acknowledged_at"] = iso(entry.at)
    return changes


def _fold_alert(state: ScopeState, entry: Entry, p: Observation) -> dict[str, Any]:
    existing = state.alerts.get(p.fingerprint)
    status = p.alert_status or (existing.status if existing else "firing")
    if existing is None:
        alert = AlertState(
            fingerprint=p.fingerprint,
            status=status,
            service=p.service,
            title=p.text,
            source=p.source,
            first_seq=entry.seq,
            last_seq=entry.seq,
        )
        return {"alerts": _with(state.alerts, p.fingerprint, alert)}
    repeat = existing.status == status
    alert = existing.model_copy(update={"status": status, "count": existing.count + 1, "last_seq": entry.seq})
    out: dict[str, Any] = {"alerts": _with(state.alerts, p.fingerprint, alert)}
    if repeat:
        out["alert_repeats"] = state.alert_repeats + 1
    return out


def _fold_alert_data(state: ScopeState, p: Observation) -> dict[str, Any]:
    """The alert bookkeeping an observation's ``data`` carries (``key``, ``group``, ``left_out``, ``note``)."""
    out: dict[str, Any] = {}
    data = p.data
    key, group, note, left = data.get("key"), data.get("group"), data.get("note"), data.get("left_out")
    if p.fingerprint and isinstance(key, str) and key and state.alert_keys.get(p.fingerprint) != key:
        out["alert_keys"] = _with(state.alert_keys, p.fingerprint, key)
    if isinstance(group, str) and group and group not in state.alert_groups:
        out["alert_groups"] = (*state.alert_groups, group)
    if isinstance(note, str) and note and note not in state.alert_notes:
        out["alert_notes"] = (*state.alert_notes, note)
    if isinstance(left, int) and not isinstance(left, bool) and p.source:
        kept = _without(state.alerts_left_out, p.source)
        out["alerts_left_out"] = _with(kept, p.source, left) if left > 0 else kept
    return out


# -- obligations --------------------------------------------------------------------------------------------------


def _obligation_opened(state: ScopeState, entry: Entry, p: ObligationOpened) -> Changes:
    ob = ObligationState(
        id=p.obligation_id,
        text=p.text,
        purpose=p.purpose,
        action=p.action,
        params=p.params,
        conditions=p.conditions,
        expected_outcome=p.expected_outcome,
        run_id=p.run_id,
        due_at=p.due_at,
        opened_seq=entry.seq,
    )
    return {"obligations": _with(state.obligations, p.obligation_id, ob)}


def _obligation_claimed(state: ScopeState, _entry: Entry, p: ObligationClaimed) -> Changes:
    changes: Changes = {}
    ob = state.obligations.get(p.obligation_id)
    if ob is not None:
        claimed = ob.model_copy(
            update={"status": "claimed", "holder": p.holder, "fence": p.fence, "lease_until": p.lease_until}
        )
        changes["obligations"] = _with(state.obligations, p.obligation_id, claimed)
    changes["max_fence"] = max(state.max_fence, p.fence)
    return changes


def _obligation_released(state: ScopeState, _entry: Entry, p: ObligationReleased | ObligationExpired) -> Changes:
    ob = state.obligations.get(p.obligation_id)
    if ob is None or ob.fence != p.fence:
        return {}
    released = ob.model_copy(update={"status": "open", "holder": "", "lease_until": ""})
    return {"obligations": _with(state.obligations, p.obligation_id, released)}


def _obligation_closed(state: ScopeState, _entry: Entry, p: ObligationFulfilled | ObligationCancelled) -> Changes:
    return {"obligations": _without(state.obligations, p.obligation_id)}


# -- proposals and runs -------------------------------------------------------------------------------------------


def _approval(state: ScopeState, _entry: Entry, p: Approval) -> Changes:
    prop = state.proposals.get(p.proposal_id)
    if prop is None:
        return {}
    if p.decision == "denied":
        return {"proposals": _without(state.proposals, p.proposal_id)}
    approvals = (*prop.approvals, p.approver)
    status = "approved" if len(approvals) >= prop.approvals_required else prop.status
    updated = prop.model_copy(update={"approvals": approvals, "status": status})
    return {"proposals": _with(state.proposals, p.proposal_id, updated)}


def _proposal_closed(state: ScopeState, _entry: Entry, p: ProposalClosed) -> Changes:
    return {"proposals": _without(state.proposals, p.proposal_id)}


def _action_started(state: ScopeState, entry: Entry, p: ActionStarted) -> Changes:
    run = RunState(
        run_id=p.run_id,
        action=p.action,
        fence=p.fence,
        proposal_id=p.proposal_id,
        obligation_id=p.obligation_id,
        started_seq=entry.seq,
    )
    changes: Changes = {"runs": _with(state.runs, p.run_id, run)}
    if p.proposal_id in state.proposals:
        prop = state.proposals[p.proposal_id]
        running = prop.model_copy(update={"status": "running", "run_id": p.run_id})
        changes["proposals"] = _with(state.proposals, p.proposal_id, running)
    return changes


def _fold_proposal(state: ScopeState, entry: Entry, p: ProposalMade) -> Changes:
    if p.status == "denied":
        return {}
    prop = ProposalState(
        id=p.proposal_id,
        action=p.action,
        params=p.params,
        preview=p.preview,
        args_hash=p.args_hash,
        risk=p.risk,
        proposer=p.proposer or entry.actor.id,
        proposed_seq=entry.seq,
        status=p.status,
        approvals_required=p.approvals_required,
        expires_at=p.expires_at,
        inputs_digest=p.inputs_digest,
        obligation_id=p.obligation_id,
        safety_conditions=p.safety_conditions,
        compensates_run=p.compensates_run,
    )
    return {"proposals": _with(state.proposals, p.proposal_id, prop)}


def _fold_result(state: ScopeState, _entry: Entry, p: ActionResult) -> Changes:
    run = state.runs.get(p.run_id)
    out: dict[str, Any] = {}
    if p.outcome == "uncertain" and run is not None:
        out["runs"] = _with(state.runs, p.run_id, run.model_copy(update={"outcome": "uncertain"}))
    else:
        out["runs"] = _without(state.runs, p.run_id)
    if run is not None and run.proposal_id in state.proposals and p.outcome != "uncertain":
        out["proposals"] = _without(state.proposals, run.proposal_id)
    return out


# -- agents -------------------------------------------------------------------------------------------------------


def _suggestion(state: ScopeState, _entry: Entry, p: Suggestion) -> Changes:
    changes: Changes = {"suggestions": _with(state.suggestions, p.suggestion_id, p.text)}
    if p.action:
        changes["suggestion_actions"] = _with(state.suggestion_actions, p.suggestion_id, p.action)
    return changes


def _suggestion_feedback(state: ScopeState, _entry: Entry, p: SuggestionFeedback) -> Changes:
    return {
        "suggestions": _without(state.suggestions, p.suggestion_id),
        "suggestion_actions": _without(state.suggestion_actions, p.suggestion_id),
    }


def _agent_turn(state: ScopeState, _entry: Entry, p: AgentTurn) -> Changes:
    if p.trigger == "ask":  # an answer to a question does not cover the range for the scheduled turns
        return {}
    return {"last_turn_seq": max(state.last_turn_seq, p.seq_to)}


#: Payload type → its handler. Kinds not here (messages, questions, exports, …) change only the bookkeeping.
def _paged(state: ScopeState, entry: Entry, _p: Page) -> Changes:
    return {} if state.paged_at else {"paged_at": iso(entry.at)}


def _page_acknowledged(state: ScopeState, entry: Entry, p: Acknowledged) -> Changes:
    if not state.paged_at or state.page_acknowledged_at:
        return {}
    return {"page_acknowledged_at": iso(entry.at), "page_acknowledged_by": p.user}


HANDLERS: dict[type, Handler] = {
    Page: _paged,
    Acknowledged: _page_acknowledged,
    Declared: _declared,
    StatusChanged: _status,
    SeverityChanged: _severity,
    Forked: _forked,
    RoleAssigned: _role,
    ThreadLinked: _thread,
    ScopeLinked: _linked,
    Observation: _observation,
    Hypothesis: _hypothesis,
    Evidence: _evidence,
    Retracted: _retracted,
    ObligationOpened: _obligation_opened,
    ObligationClaimed: _obligation_claimed,
    ObligationReleased: _obligation_released,
    ObligationExpired: _obligation_released,
    ObligationFulfilled: _obligation_closed,
    ObligationCancelled: _obligation_closed,
    ProposalMade: _fold_proposal,
    Approval: _approval,
    ProposalClosed: _proposal_closed,
    ActionStarted: _action_started,
    ActionResult: _fold_result,
    Suggestion: _suggestion,
    SuggestionFeedback: _suggestion_feedback,
    AgentTurn: _agent_turn,
}
