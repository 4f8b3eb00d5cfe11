"""The post-incident report as data: what ``build_report`` derives from a log and every format renders.

The JSON format is this model dumped with sorted keys, so the field names here are part of the external contract.
Nothing here holds wall-clock time or entry ids: the same log always gives the same model.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.entries import Actor

Origin = Literal["human", "agent", "system"]
MilestoneName = Literal["declared", "first_human_response", "mitigated", "resolved"]
FORMAT_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Summary(_Model):
    scope: str
    kind: str
    title: str
    status: str
    severity: int | None = None
    worst_severity: int | None = None
    services: tuple[str, ...] = ()
    declared_at: str | None = None
    declared_by: Actor | None = None
    declared_via: str = ""
    resolved_at: str | None = None
    duration_s: float | None = None  # declared → resolved; None while open
    description: str = ""  # what the declaration said
    resolution: str = ""  # what the last resolution said
    goals: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    thread_permalink: str = ""


class SeverityStep(_Model):
    seq: int
    at: str
    severity: int
    by: Actor
    reason: str = ""


class AlertLine(_Model):
    fingerprint: str
    title: str
    service: str = ""
    source: str = ""
    status: str = ""
    first_at: str
    last_at: str
    resolved_at: str | None = None
    notifications: int = 1


class Impact(_Model):
    services: tuple[str, ...] = ()
    worst_severity: int | None = None
    severity_history: tuple[SeverityStep, ...] = ()
    alerts: tuple[AlertLine, ...] = ()
    started_at: str | None = None  # the first firing alert, or the declaration if earlier
    mitigated_at: str | None = None
    duration_s: float | None = None  # started → mitigated


class Milestone(_Model):
    name: MilestoneName
    label: str
    reached: bool
    seq: int | None = None
    at: str | None = None
    by: Actor | None = None
    since_declared_s: float | None = None
    since_previous_s: float | None = None
    link: str = ""


class TimelineLine(_Model):
    scope: str  # the report's scope, or a linked scope whose entries are merged in
    seq: int
    at: str
    offset_s: float | None  # since the declaration
    origin: Origin  # human-recorded, agent-inferred or system
    actor: Actor
    kind: str
    text: str
    link: str = ""
    refs: tuple[int, ...] = ()


class DecisionLine(_Model):
    seq: int
    at: str
    by: Actor
    origin: Origin
    text: str
    rationale: str = ""
    expected_outcome: str = ""
    link: str = ""


class FindingCount(_Model):
    """Issue 15: one reasoner's findings of one kind, by what people answered (core/reports/sections/findings.py)."""

    reasoner: str
    kind: str
    total: int
    confirmed: int = 0
    ruled_out: int = 0
    accepted: int = 0
    dismissed: int = 0
    unanswered: int = 0


class InferenceLine(_Model):
    """A hypothesis, suggestion or answer — what someone (usually an agent) inferred, and its verdict."""

    seq: int
    at: str
    by: Actor
    origin: Origin
    kind: Literal["hypothesis", "suggestion", "answer"]
    text: str
    confidence: float | None = None
    suspect_scope: str = ""
    verdict: str = ""  # suggestions: accepted | dismissed | open
    verdict_by: str = ""


class ApprovalLine(_Model):
    seq: int
    at: str
    decision: Literal["approved", "denied"]
    approver: str
    approver_name: str = ""
    reason: str = ""


class RefusalLine(_Model):
    seq: int
    at: str
    user_id: str
    reason: str


class ResultLine(_Model):
    seq: int
    at: str
    outcome: str
    fence: int = 0
    effect_digest: str = ""
    error: str = ""
    reconciled: bool = False
    by: Actor


class VerificationLine(_Model):
    seq: int
    at: str
    by: Actor
    origin: Origin
    outcome: str
    run_id: str = ""
    obligation_id: str = ""
    expected: str = ""
    observed: str = ""


class RunLine(_Model):
    """One execution under delegated authority: who proposed and approved it, the fence it held, what it did."""

    run_id: str
    action: str
    seq: int
    at: str
    started_by: Actor
    proposal_id: str = ""
    obligation_id: str = ""
    fence: int = 0
    lease_until: str = ""
    receipt: str = ""
    idempotency_key: str = ""
    proposer: str = ""
    approvers: tuple[str, ...] = ()
    params: dict[str, Any] = Field(default_factory=dict)
    compensates_run: str = ""
    outcome: str = "no result recorded"  # the last result's outcome
    effect_digest: str = ""  # the last non-empty effect digest
    results: tuple[ResultLine, ...] = ()
    verification: str = ""  # the last verification outcome for this run


class ProposalLine(_Model):
    proposal_id: str
    seq: int
    at: str
    by: Actor  # who recorded the proposal
    origin: Origin
    proposer: str  # on whose behalf (a proposal re-evaluated after drift keeps its original proposer)
    action: str
    risk: str
    preview: str = ""
    args_hash: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    rationale: str = ""
    safety_conditions: tuple[str, ...] = ()
    obligation_id: str = ""
    approvals_required: int = 1
    expires_at: str = ""
    compensates_run: str = ""
    inputs_digest: str = ""  # what the scope looked like when proposed (an approval is void if it drifted)
    checks: tuple[dict[str, Any], ...] = ()  # the safety conditions as evaluated when proposed
    reason: str = ""  # why the policy decided as it did (e.g. why an R4 action is denied)
    status: str  # waiting_for_approval | approved | denied | expired | voided | superseded | withdrawn | ran
    closed_reason: str = ""
    approvals: tuple[ApprovalLine, ...] = ()
    refusals: tuple[RefusalLine, ...] = ()


class ActionLine(_Model):
    """A proposal and the runs it led to, or a run that needed no proposal (R1)."""

    action: str
    risk: str = ""
    proposal: ProposalLine | None = None
    runs: tuple[RunLine, ...] = ()


class FenceRejection(_Model):
    seq: int
    at: str
    obligation_id: str
    fence: int
    current_fence: int
    holder: str = ""
    attempted: str = ""
    reason: str = ""


class CompensationLine(_Model):
    original_run: str
    original_action: str = ""
    original_digest: str = ""
    compensating_run: str = ""
    compensating_action: str = ""
    proposal_id: str = ""
    status: str  # proposed | waiting_for_approval | denied | … | running | applied | … | compensated
    compensating_digest: str = ""
    recorded_seq: int | None = None  # the effect_compensated entry, once recorded
    seq: int
    at: str


class OpenQuestion(_Model):
    kind: Literal["uncertain_effect", "abandoned_uncertain", "no_result", "verification_inconclusive"]
    seq: int
    at: str
    text: str
    run_id: str = ""
    action: str = ""
    fence: int = 0
    idempotency_key: str = ""
    note: str = ""


class ObligationLine(_Model):
    obligation_id: str
    text: str
    purpose: str
    status: Literal["open", "claimed", "fulfilled", "cancelled"]
    seq: int
    at: str
    by: Actor
    conditions: tuple[str, ...] = ()
    action: str = ""
    expected_outcome: str = ""
    due_at: str = ""
    run_id: str = ""
    holder: str = ""
    fence: int = 0
    lease_until: str = ""
    closed_seq: int | None = None
    note: str = ""


class FollowUpLine(_Model):
    """A ``follow_up`` entry and what its tracker said: ``open`` (not filed yet), ``synced`` (filed, open in the
    tracker) or ``closed`` (closed there; a reopen makes it ``synced`` again). Issue 18."""

    seq: int
    at: str
    by: Actor
    text: str
    owner: str = ""
    due: str = ""
    obligation_id: str = ""
    state: Literal["open", "synced", "closed"] = "open"
    tracker: str = ""
    number: str = ""
    url: str = ""
    closed_by: str = ""
    reason: str = ""  # the tracker's state_reason (completed, not_planned)
    changed_seq: int | None = None  # the entry that set the state (synced / closed / reopened)


class Participant(_Model):
    actor: Actor
    roles: tuple[str, ...] = ()
    entries: int = 0
    first_at: str | None = None
    last_at: str | None = None


class TurnLine(_Model):
    seq: int
    at: str
    reasoner: str
    model: str = ""
    view: str = ""
    trigger: str = ""
    seq_from: int = 0
    seq_to: int = 0
    view_bytes: int = 0
    view_tokens: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    duration_ms: int = 0
    outcome: str = "ok"
    error: str = ""


class TurnTotals(_Model):
    turns: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    duration_ms: int = 0


class LinkedScope(_Model):
    scope: str
    relation: str = "related"
    reason: str = ""
    linked_seq: int
    linked_at: str
    found: bool = True
    kind: str = ""
    title: str = ""
    status: str = ""
    severity: int | None = None
    services: tuple[str, ...] = ()
    declared_at: str | None = None
    resolved_at: str | None = None
    merged_into_timeline: bool = False


class Integrity(_Model):
    """Whether a scope's hash chain verifies, and which head the report was built from."""

    scope: str
    checked: bool
    ok: bool
    last_seq: int = 0  # the last entry the report covers (``report_exported`` entries are not part of it)
    head_hash: str = ""  # that entry's chained hash
    first_bad_seq: int | None = None
    reason: str = ""


class Report(_Model):
    format_version: int = FORMAT_VERSION
    generator: str = "decklog"
    scope: str
    summary: Summary
    impact: Impact
    milestones: tuple[Milestone, ...]
    timeline: tuple[TimelineLine, ...]
    decisions: tuple[DecisionLine, ...]
    inferences: tuple[InferenceLine, ...]
    findings: tuple[FindingCount, ...] = ()  # issue 15
    actions: tuple[ActionLine, ...]
    verifications: tuple[VerificationLine, ...]
    fence_rejections: tuple[FenceRejection, ...]
    compensations: tuple[CompensationLine, ...]
    open_questions: tuple[OpenQuestion, ...]
    obligations: tuple[ObligationLine, ...]  # still open (or claimed), follow-ups excluded
    follow_ups: tuple[ObligationLine, ...]  # every follow-up, whatever its status
    tracker_follow_ups: tuple[FollowUpLine, ...] = ()  # issue 18: follow_up entries, with their tracker state
    participants: tuple[Participant, ...]
    agent_turns: tuple[TurnLine, ...]
    agent_totals: TurnTotals
    linked_scopes: tuple[LinkedScope, ...]
    integrity: tuple[Integrity, ...]  # the report's scope first, then each linked scope

    @property
    def verified(self) -> bool:
        return all(i.checked and i.ok for i in self.integrity)
