"""Derived state of a scope: a pure fold over its entries.

``fold(state, entry)`` never does I/O and never reads the clock; the store applies it in the same transaction
that appends the entry and stores the result, and ``decklog verify`` checks that folding the whole log from
scratch gives exactly the stored state.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from core.clock import iso
from core.entries import (
    ActionResult,
    ActionStarted,
    AgentTurn,
    Approval,
    Declared,
    Entry,
    Evidence,
    Forked,
    Hypothesis,
    Message,
    ObligationCancelled,
    ObligationClaimed,
    ObligationExpired,
    ObligationFulfilled,
    ObligationOpened,
    ObligationReleased,
    Observation,
    ProposalClosed,
    ProposalMade,
    RoleAssigned,
    ScopeLinked,
    SeverityChanged,
    StatusChanged,
    Suggestion,
    SuggestionFeedback,
    ThreadLinked,
)

#: ``ScopeState`` fields added after logs existed: absent from the stored JSON while empty (old logs verify).
OMITTED_WHEN_EMPTY = (
    "source_severity_changes",
    "alert_keys",
    "alert_groups",
    "alerts_left_out",
    "alert_notes",
    "forked_from",
    "forked_at",
)

# Entries a person records that are not a response to the incident (an export, a bookkeeping note).
NOT_A_RESPONSE = frozenset({"declared", "report_exported", "delivery_failed", "thread_linked", "agent_turn"})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RoleHolder(_Frozen):
    user_id: str
    user_name: str = ""


class ThreadRef(_Frozen):
    channel: str
    ts: str = ""
    permalink: str = ""
    dedicated_channel: bool = False


class ObligationState(_Frozen):
    id: str
    text: str
    purpose: str = "task"
    status: str = "open"  # open | claimed
    holder: str = ""
    fence: int = 0
    lease_until: str = ""
    action: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    conditions: tuple[str, ...] = ()
    expected_outcome: str = ""
    run_id: str = ""
    due_at: str = ""
    opened_seq: int = 0


class ProposalState(_Frozen):
    id: str
    action: str
    params: dict[str, Any] = Field(default_factory=dict)
    preview: str = ""
    args_hash: str = ""
    risk: str = "R2"
    proposer: str = ""
    proposed_seq: int = 0
    status: str = "waiting_for_approval"  # waiting_for_approval | approved | running
    approvals: tuple[str, ...] = ()
    approvals_required: int = 1
    expires_at: str = ""
    inputs_digest: str = ""
    obligation_id: str = ""
    safety_conditions: tuple[str, ...] = ()
    run_id: str = ""
    compensates_run: str = ""


class AlertState(_Frozen):
    fingerprint: str
    status: str
    service: str = ""
    title: str = ""
    source: str = ""
    count: int = 1
    first_seq: int = 0
    last_seq: int = 0


class RunState(_Frozen):
    run_id: str
    action: str
    fence: int = 0
    proposal_id: str = ""
    obligation_id: str = ""
    started_seq: int = 0
    outcome: str = "running"  # running | uncertain


class ScopeState(_Frozen):
    """Everything a reader needs without replaying the log. ``version`` is the seq of the last entry."""

    scope: str
    kind: str = "incident"
    title: str = ""
    status: str = "investigating"
    severity: int | None = None
    services: tuple[str, ...] = ()
    version: int = 0
    created_at: str = ""
    updated_at: str = ""
    acknowledged_at: str = ""
    mitigated_at: str = ""
    resolved_at: str = ""
    roles: dict[str, RoleHolder] = Field(default_factory=dict)
    thread: ThreadRef | None = None
    linked: tuple[str, ...] = ()
    obligations: dict[str, ObligationState] = Field(default_factory=dict)
    max_fence: int = 0
    proposals: dict[str, ProposalState] = Field(default_factory=dict)
    runs: dict[str, RunState] = Field(default_factory=dict)
    alerts: dict[str, AlertState] = Field(default_factory=dict)
    alert_repeats: int = 0
    suggestions: dict[str, str] = Field(default_factory=dict)
    suggestion_actions: dict[str, str] = Field(default_factory=dict)
    hypotheses: int = 0
    evidence: int = 0
    last_human_seq: int = 0
    last_turn_seq: int = 0  # the last seq a (non-ask) agent turn covered; see core/agents/runtime.py
    kind_counts: dict[str, int] = Field(default_factory=dict)  # entries per kind: views summarise what they omit
    # -- alert bookkeeping (core/alerts); left out of the stored JSON while empty, so logs written before these
    # fields existed fold to exactly the state they stored (``decklog verify``) --
    source_severity_changes: int = 0  # severity_changed entries by the system (alert sources); fewer than all = a
    # person (or an agent) has set the severity
    alert_keys: dict[str, str] = Field(default_factory=dict)  # fingerprint → its last notification's identity
    alert_groups: tuple[str, ...] = ()  # the sources' groups (``AlertSignal.group``) this incident holds
    alerts_left_out: dict[str, int] = Field(default_factory=dict)  # source → alerts its last notification left out
    alert_notes: tuple[str, ...] = ()  # one-time thread notes already given (``Observation.data["note"]``)
    # -- a fork (core/fork.py): the source scope and seq its ``forked`` entry names; the outbox then delivers the
    # scope to the index only (core/outbox.py FORK_TOPICS) --
    forked_from: str = ""
    forked_at: int = 0

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in OMITTED_WHEN_EMPTY:
            if name in data and not data[name]:
                del data[name]
        return data

    @property
    def severity_set_by_person(self) -> bool:
        """A severity_changed entry not made by the system exists (alert sources then no longer lower it)."""
        return self.kind_counts.get("severity_changed", 0) > self.source_severity_changes

    @property
    def is_open(self) -> bool:
        return self.status != "resolved"

    @property
    def firing_alerts(self) -> list[AlertState]:
        return [a for a in self.alerts.values() if a.status != "resolved"]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def empty_state(scope: str) -> ScopeState:
    kind = scope.split("/", 1)[0]
    return ScopeState(scope=scope, kind=kind)


def _with(mapping: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    updated = dict(mapping)
    updated[key] = value
    return updated


def _without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


def fold(state: ScopeState, entry: Entry) -> ScopeState:
    """Apply one entry to the state. Pure: same inputs, same output."""
    at = iso(entry.at)
    changes: dict[str, Any] = {"version": entry.seq, "updated_at": at}
    changes["kind_counts"] = _with(state.kind_counts, entry.kind, state.kind_counts.get(entry.kind, 0) + 1)
    p = entry.payload
    human = entry.actor.type == "human"
    if human and entry.kind not in NOT_A_RESPONSE:
        changes["last_human_seq"] = entry.seq
        if not state.acknowledged_at:
            changes["acknowledged_at"] = at
    match p:
        case Declared():
            changes.update(title=p.title, severity=p.severity, services=p.services, created_at=at)
            changes["status"] = "investigating" if state.kind == "incident" else "recorded"
            if human:
                changes["acknowledged_at"] = at
        case StatusChanged():
            changes["status"] = p.status
            if p.status == "mitigated" and not state.mitigated_at:
                changes["mitigated_at"] = at
            if p.status == "resolved":
                changes["resolved_at"] = at
                if not state.mitigated_at:
                    changes["mitigated_at"] = at
            elif state.resolved_at:
                changes["resolved_at"] = ""
        case SeverityChanged():
            changes["severity"] = p.severity
            if entry.actor.type == "system":
                changes["source_severity_changes"] = state.source_severity_changes + 1
        case Forked():
            changes.update(forked_from=p.source, forked_at=p.seq)
        case RoleAssigned():
            changes["roles"] = _with(state.roles, p.role, RoleHolder(user_id=p.user_id, user_name=p.user_name))
        case ThreadLinked():
            changes["thread"] = ThreadRef(
                channel=p.channel, ts=p.ts, permalink=p.permalink, dedicated_channel=p.dedicated_channel
            )
        case ScopeLinked():
            if p.scope not in state.linked:
                changes["linked"] = (*state.linked, p.scope)
        case Observation():
            if p.service and p.service not in state.services:
                changes["services"] = (*state.services, p.service)
            if p.fingerprint:
                changes.update(_fold_alert(state, entry, p))
            if p.data:
                changes.update(_fold_alert_data(state, p))
            if p.alert_status == "acknowledged" and not state.acknowledged_at:
                changes["acknowledged_at"] = at
        case Hypothesis():
            changes["hypotheses"] = state.hypotheses + 1
        case Evidence():
            changes["evidence"] = state.evidence + 1
        case Message():
            pass
        case ObligationOpened():
            changes["obligations"] = _with(
                state.obligations,
                p.obligation_id,
                ObligationState(
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
                ),
            )
        case ObligationClaimed():
            ob = state.obligations.get(p.obligation_id)
            if ob is not None:
                changes["obligations"] = _with(
                    state.obligations,
                    p.obligation_id,
                    ob.model_copy(
                        update={
                            "status": "claimed",
                            "holder": p.holder,
                            "fence": p.fence,
                            "lease_until": p.lease_until,
                        }
                    ),
                )
            changes["max_fence"] = max(state.max_fence, p.fence)
        case ObligationReleased() | ObligationExpired():
            ob = state.obligations.get(p.obligation_id)
            if ob is not None and ob.fence == p.fence:
                changes["obligations"] = _with(
                    state.obligations,
                    p.obligation_id,
                    ob.model_copy(update={"status": "open", "holder": "", "lease_until": ""}),
                )
        case ObligationFulfilled() | ObligationCancelled():
            changes["obligations"] = _without(state.obligations, p.obligation_id)
        case ProposalMade():
            changes.update(_fold_proposal(state, entry, p))
        case Approval():
            prop = state.proposals.get(p.proposal_id)
            if prop is not None:
                if p.decision == "denied":
                    changes["proposals"] = _without(state.proposals, p.proposal_id)
                else:
                    approvals = (*prop.approvals, p.approver)
                    status = "approved" if len(approvals) >= prop.approvals_required else prop.status
                    changes["proposals"] = _with(
                        state.proposals,
                        p.proposal_id,
                        prop.model_copy(update={"approvals": approvals, "status": status}),
                    )
        case ProposalClosed():
            changes["proposals"] = _without(state.proposals, p.proposal_id)
        case ActionStarted():
            changes["runs"] = _with(
                state.runs,
                p.run_id,
                RunState(
                    run_id=p.run_id,
                    action=p.action,
                    fence=p.fence,
                    proposal_id=p.proposal_id,
                    obligation_id=p.obligation_id,
                    started_seq=entry.seq,
                ),
            )
            if p.proposal_id in state.proposals:
                prop = state.proposals[p.proposal_id]
                changes["proposals"] = _with(
                    state.proposals,
                    p.proposal_id,
                    prop.model_copy(update={"status": "running", "run_id": p.run_id}),
                )
        case ActionResult():
            changes.update(_fold_result(state, p))
        case Suggestion():
            changes["suggestions"] = _with(state.suggestions, p.suggestion_id, p.text)
            if p.action:
                changes["suggestion_actions"] = _with(state.suggestion_actions, p.suggestion_id, p.action)
        case SuggestionFeedback():
            changes["suggestions"] = _without(state.suggestions, p.suggestion_id)
            changes["suggestion_actions"] = _without(state.suggestion_actions, p.suggestion_id)
        case AgentTurn():
            if p.trigger != "ask":  # an answer to a question does not cover the range for the scheduled turns
                changes["last_turn_seq"] = max(state.last_turn_seq, p.seq_to)
        case _:
            pass
    return _evolve(state, changes)


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


def _fold_proposal(state: ScopeState, entry: Entry, p: ProposalMade) -> dict[str, Any]:
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


def _fold_result(state: ScopeState, p: ActionResult) -> dict[str, Any]:
    run = state.runs.get(p.run_id)
    out: dict[str, Any] = {}
    if p.outcome == "uncertain" and run is not None:
        out["runs"] = _with(state.runs, p.run_id, run.model_copy(update={"outcome": "uncertain"}))
    else:
        out["runs"] = _without(state.runs, p.run_id)
    if run is not None and run.proposal_id in state.proposals and p.outcome != "uncertain":
        out["proposals"] = _without(state.proposals, run.proposal_id)
    return out


def fold_all(scope: str, entries: list[Entry]) -> ScopeState:
    state = empty_state(scope)
    for entry in entries:
        state = fold(state, entry)
    return state
