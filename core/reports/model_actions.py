"""The action part of the report model: proposals, approvals and refusals, runs with their results and
verifications, fence rejections and compensations (re-exported by ``core.reports.model``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from decklog.core.entries import Actor
from decklog.core.reports.model_base import Model as _Model
from decklog.core.reports.model_base import Origin


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
