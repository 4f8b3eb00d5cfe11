"""Payloads of proposals, approvals, action runs and their verification."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from decklog.core.entries.base import Payload, Risk


class ProposalMade(Payload):
    proposal_id: str = Field(min_length=1)
    action: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)
    preview: str = ""
    args_hash: str = ""
    risk: Risk
    obligation_id: str = ""
    rationale: str = ""
    safety_conditions: tuple[str, ...] = ()
    expires_at: str = ""
    inputs_digest: str = ""
    status: Literal["waiting_for_approval", "approved", "denied"] = "waiting_for_approval"
    approvals_required: int = 1
    compensates_run: str = ""
    # on whose behalf (a proposal re-evaluated after drift keeps its original proposer); empty: the entry's actor
    proposer: str = ""
    # why the policy decided as it did (R4: why it is denied; re-evaluated: what drifted)
    reason: str = ""
    # the safety conditions as evaluated at proposal time: {name, ok, detail, inputs}
    checks: tuple[dict[str, Any], ...] = ()


class Approval(Payload):
    proposal_id: str
    decision: Literal["approved", "denied"]
    approver: str = Field(min_length=1)
    approver_name: str = ""
    reason: str = ""


class ApprovalRefused(Payload):
    """Someone tried to approve or deny and was not allowed to (recorded, and told why)."""

    proposal_id: str
    user_id: str
    reason: str


class ProposalClosed(Payload):
    """A parked proposal left the park without running: expired, voided by drift, or superseded."""

    proposal_id: str
    outcome: Literal["expired", "voided", "superseded", "withdrawn"]
    reason: str = ""


class ActionStarted(Payload):
    run_id: str = Field(min_length=1)
    action: str
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


class ActionResult(Payload):
    run_id: str
    action: str = ""
    outcome: Literal["applied", "refused", "uncertain", "not_applied", "abandon_uncertain", "skipped", "failed"]
    fence: int = 0
    effect_digest: str = ""
    response: dict[str, Any] = Field(default_factory=dict)
    error: str = ""
    reconciled: bool = False


class EffectCompensated(Payload):
    original_run: str
    original_digest: str = ""
    compensating_run: str
    compensating_digest: str = ""


class Verification(Payload):
    obligation_id: str = ""
    run_id: str = ""
    outcome: Literal["verified", "failed", "inconclusive"]
    expected: str = ""
    observed: str = ""
