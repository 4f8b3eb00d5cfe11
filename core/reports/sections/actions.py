"""Actions and authority: every proposal with its approvals and refusals, every run with its results, the
verifications and the fence rejections — in log order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decklog.core.clock import iso
from decklog.core.entries import (
    ActionResult,
    ActionStarted,
    Approval,
    ApprovalRefused,
    Entry,
    FenceRejected,
    ProposalClosed,
    ProposalMade,
    Verification,
)
from decklog.core.reports.model_actions import (
    ActionLine,
    ApprovalLine,
    FenceRejection,
    ProposalLine,
    RefusalLine,
    ResultLine,
    RunLine,
    VerificationLine,
)
from decklog.core.reports.sections.source import Source, origin


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


ActionsSection = tuple[
    tuple[ActionLine, ...], tuple[VerificationLine, ...], tuple[FenceRejection, ...], dict[str, RunLine]
]


def actions(src: Source) -> ActionsSection:
    """Actions (proposals with their runs, and runs of no proposal) in log order, the verifications, the fence
    rejections, and every run's line by run id."""
    fold = _Fold()
    for e in src.entries:
        fold.add(e)
    return fold.finish()


class _Fold:
    """The actions of one log, folded entry by entry the way the state fold reads them."""

    def __init__(self) -> None:
        self.proposals: dict[str, _Proposal] = {}
        self.runs: dict[str, _Run] = {}
        self.order: list[tuple[int, str, str]] = []  # (first seq, "proposal"|"run", id)
        self.verifications: list[VerificationLine] = []
        self.rejections: list[FenceRejection] = []

    def add(self, e: Entry) -> None:
        p = e.payload
        if isinstance(p, ProposalMade):
            self._proposal(e, p)
        elif isinstance(p, Approval):
            self._approval(e, p)
        elif isinstance(p, ApprovalRefused):
            if p.proposal_id in self.proposals:
                self.proposals[p.proposal_id].refusals.append(
                    RefusalLine(seq=e.seq, at=iso(e.at), user_id=p.user_id, reason=p.reason)
                )
        elif isinstance(p, ProposalClosed):
            if p.proposal_id in self.proposals:
                self.proposals[p.proposal_id].line.update(status=p.outcome, closed_reason=p.reason)
        elif isinstance(p, ActionStarted):
            self._started(e, p)
        elif isinstance(p, ActionResult):
            self._result(e, p)
        elif isinstance(p, Verification):
            self._verification(e, p)
        elif isinstance(p, FenceRejected):
            self.rejections.append(
                FenceRejection(
                    seq=e.seq,
                    at=iso(e.at),
                    obligation_id=p.obligation_id,
                    fence=p.fence,
                    current_fence=p.current_fence,
                    holder=p.holder,
                    attempted=p.attempted,
                    reason=p.reason,
                )
            )

    def _proposal(self, e: Entry, p: ProposalMade) -> None:
        if p.proposal_id in self.proposals:
            return  # a proposal id is made once; a repeat is ignored like the fold ignores it
        line = {
            "proposal_id": p.proposal_id,
            "seq": e.seq,
            "at": iso(e.at),
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
        self.proposals[p.proposal_id] = _Proposal(line)
        self.order.append((e.seq, "proposal", p.proposal_id))

    def _approval(self, e: Entry, p: Approval) -> None:
        prop = self.proposals.get(p.proposal_id)
        if prop is None:
            return
        prop.approvals.append(
            ApprovalLine(
                seq=e.seq,
                at=iso(e.at),
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

    def _started(self, e: Entry, p: ActionStarted) -> None:
        if p.run_id in self.runs:
            return
        line = {
            "run_id": p.run_id,
            "action": p.action,
            "seq": e.seq,
            "at": iso(e.at),
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
        self.runs[p.run_id] = _Run(line)
        prop = self.proposals.get(p.proposal_id) if p.proposal_id else None
        if prop is None:
            self.order.append((e.seq, "run", p.run_id))
            return
        prop.runs.append(p.run_id)
        prop.line["status"] = "ran"
        if not line["proposer"]:
            line["proposer"] = prop.line["proposer"]
        if not line["approvers"]:
            line["approvers"] = tuple(a.approver for a in prop.approvals if a.decision == "approved")

    def _result(self, e: Entry, p: ActionResult) -> None:
        at = iso(e.at)
        run = self.runs.get(p.run_id)
        if run is None:  # a result for a run this log never saw start: show it as a run of its own
            run = _Run({"run_id": p.run_id, "action": p.action, "seq": e.seq, "at": at, "started_by": e.actor})
            self.runs[p.run_id] = run
            self.order.append((e.seq, "run", p.run_id))
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

    def _verification(self, e: Entry, p: Verification) -> None:
        self.verifications.append(
            VerificationLine(
                seq=e.seq,
                at=iso(e.at),
                by=e.actor,
                origin=origin(e.actor),
                outcome=p.outcome,
                run_id=p.run_id,
                obligation_id=p.obligation_id,
                expected=p.expected,
                observed=p.observed,
            )
        )
        if p.run_id in self.runs:
            self.runs[p.run_id].verification = p.outcome

    def finish(self) -> ActionsSection:
        finished: dict[str, RunLine] = {rid: _run_line(run) for rid, run in self.runs.items()}
        lines: list[ActionLine] = []
        for _seq, what, ident in sorted(self.order):
            if what == "proposal":
                prop = self.proposals[ident]
                pline = ProposalLine(**prop.line, approvals=tuple(prop.approvals), refusals=tuple(prop.refusals))
                runs = tuple(finished[r] for r in prop.runs)
                lines.append(ActionLine(action=pline.action, risk=pline.risk, proposal=pline, runs=runs))
            else:
                rline = finished[ident]
                lines.append(ActionLine(action=rline.action, runs=(rline,)))
        return tuple(lines), tuple(self.verifications), tuple(self.rejections), finished


def _run_line(run: _Run) -> RunLine:
    line = dict(run.line)
    if run.results:
        line["outcome"] = run.results[-1].outcome
    digests = [r.effect_digest for r in run.results if r.effect_digest]
    line["effect_digest"] = digests[-1] if digests else ""
    return RunLine(**line, results=tuple(run.results), verification=run.verification)
