"""Actions and authority: every proposal with its approvals and refusals, every run with its results, the
verifications and the fence rejections — in log order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.clock import iso
from core.entries import (
    ActionResult,
    ActionStarted,
    Approval,
    ApprovalRefused,
    FenceRejected,
    ProposalClosed,
    ProposalMade,
    Verification,
)
from core.reports.model import (
    ActionLine,
    ApprovalLine,
    FenceRejection,
    ProposalLine,
    RefusalLine,
    ResultLine,
    RunLine,
    VerificationLine,
)
from core.reports.sections.source import Source, origin


@dataclass
class _Proposal:
    line: dict[str, Any]
    approvals: list[ApprovalLine] = field(default_factory=list)
    refusals: list[RefusalLine] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)


@dataclass
class _Run:
    line: dict[str, Any]
    results: list[ResultLine] = field(default_factory=list)
    verification: str = ""


def actions(
    src: Source,
) -> tuple[tuple[ActionLine, ...], tuple[VerificationLine, ...], tuple[FenceRejection, ...], dict[str, RunLine]]:
    proposals: dict[str, _Proposal] = {}
    runs: dict[str, _Run] = {}
    order: list[tuple[int, str, str]] = []  # (first seq, "proposal"|"run", id)
    verifications: list[VerificationLine] = []
    rejections: list[FenceRejection] = []
    for e in src.entries:
        p = e.payload
        at = iso(e.at)
        if isinstance(p, ProposalMade):
            if p.proposal_id in proposals:
                continue  # a proposal id is made once; a repeat is ignored like the fold ignores it
            line = {
                "proposal_id": p.proposal_id,
                "seq": e.seq,
                "at": at,
                "by": e.actor,
                "origin": origin(e.actor),
                "proposer": p.proposer or e.actor.id,
                "action": p.action,
                "risk": p.risk,
                "preview": p.preview,
                "args_hash": p.args_hash,
                "params": p.params,
                "rationale": p.rationale,
                "safety_conditions": p.safety_conditions,
                "obligation_id": p.obligation_id,
                "approvals_required": p.approvals_required,
                "expires_at": p.expires_at,
                "compensates_run": p.compensates_run,
                "inputs_digest": p.inputs_digest,
                "checks": p.checks,
                "reason": p.reason,
                "status": p.status,
            }
            proposals[p.proposal_id] = _Proposal(line)
            order.append((e.seq, "proposal", p.proposal_id))
        elif isinstance(p, Approval):
            prop = proposals.get(p.proposal_id)
            if prop is None:
                continue
            prop.approvals.append(
                ApprovalLine(
                    seq=e.seq,
                    at=at,
                    decision=p.decision,
                    approver=p.approver,
                    approver_name=p.approver_name,
                    reason=p.reason,
                )
            )
            approved = sum(1 for a in prop.approvals if a.decision == "approved")
            if p.decision == "denied":
                prop.line["status"] = "denied"
            elif approved >= int(prop.line["approvals_required"]) and prop.line["status"] == "waiting_for_approval":
                prop.line["status"] = "approved"
        elif isinstance(p, ApprovalRefused):
            if p.proposal_id in proposals:
                proposals[p.proposal_id].refusals.append(
                    RefusalLine(seq=e.seq, at=at, user_id=p.user_id, reason=p.reason)
                )
        elif isinstance(p, ProposalClosed):
            if p.proposal_id in proposals:
                proposals[p.proposal_id].line.update(status=p.outcome, closed_reason=p.reason)
        elif isinstance(p, ActionStarted):
            if p.run_id in runs:
                continue
            line = {
                "run_id": p.run_id,
                "action": p.action,
                "seq": e.seq,
                "at": at,
                "started_by": e.actor,
                "proposal_id": p.proposal_id,
                "obligation_id": p.obligation_id,
                "fence": p.fence,
                "lease_until": p.lease_until,
                "receipt": p.receipt,
                "idempotency_key": p.idempotency_key,
                "proposer": p.proposer,
                "approvers": p.approvers,
                "params": p.params,
                "compensates_run": p.compensates_run,
            }
            runs[p.run_id] = _Run(line)
            prop = proposals.get(p.proposal_id) if p.proposal_id else None
            if prop is not None:
                prop.runs.append(p.run_id)
                prop.line["status"] = "ran"
                if not line["proposer"]:
                    line["proposer"] = prop.line["proposer"]
                if not line["approvers"]:
                    line["approvers"] = tuple(a.approver for a in prop.approvals if a.decision == "approved")
            else:
                order.append((e.seq, "run", p.run_id))
        elif isinstance(p, ActionResult):
            run = runs.get(p.run_id)
            if run is None:  # a result for a run this log never saw start: show it as a run of its own
                run = _Run({"run_id": p.run_id, "action": p.action, "seq": e.seq, "at": at, "started_by": e.actor})
                runs[p.run_id] = run
                order.append((e.seq, "run", p.run_id))
            run.results.append(
                ResultLine(
                    seq=e.seq,
                    at=at,
                    outcome=p.outcome,
                    fence=p.fence,
                    effect_digest=p.effect_digest,
                    error=p.error,
                    reconciled=p.reconciled,
                    by=e.actor,
                )
            )
        elif isinstance(p, Verification):
            verifications.append(
                VerificationLine(
                    seq=e.seq,
                    at=at,
                    by=e.actor,
                    origin=origin(e.actor),
                    outcome=p.outcome,
                    run_id=p.run_id,
                    obligation_id=p.obligation_id,
                    expected=p.expected,
                    observed=p.observed,
                )
            )
            if p.run_id in runs:
                runs[p.run_id].verification = p.outcome
        elif isinstance(p, FenceRejected):
            rejections.append(
                FenceRejection(
                    seq=e.seq,
                    at=at,
                    obligation_id=p.obligation_id,
                    fence=p.fence,
                    current_fence=p.current_fence,
                    holder=p.holder,
                    attempted=p.attempted,
                    reason=p.reason,
                )
            )
    finished: dict[str, RunLine] = {rid: _run_line(run) for rid, run in runs.items()}
    actions: list[ActionLine] = []
    for _seq, what, ident in sorted(order):
        if what == "proposal":
            prop = proposals[ident]
            pline = ProposalLine(**prop.line, approvals=tuple(prop.approvals), refusals=tuple(prop.refusals))
            actions.append(
                ActionLine(
                    action=pline.action,
                    risk=pline.risk,
                    proposal=pline,
                    runs=tuple(finished[r] for r in prop.runs),
                )
            )
        else:
            rline = finished[ident]
            actions.append(ActionLine(action=rline.action, runs=(rline,)))
    return tuple(actions), tuple(verifications), tuple(rejections), finished


def _run_line(run: _Run) -> RunLine:
    line = dict(run.line)
    if run.results:
        line["outcome"] = run.results[-1].outcome
    digests = [r.effect_digest for r in run.results if r.effect_digest]
    line["effect_digest"] = digests[-1] if digests else ""
    return RunLine(**line, results=tuple(run.results), verification=run.verification)
