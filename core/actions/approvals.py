"""Approving and denying: one transaction that decides from the state inside it — refused (not an approver, a
self-approval of R3, …), expired, voided (the safety-condition inputs drifted since the proposal) or counted — and
the policy check an approved proposal passes again before it runs."""

from __future__ import annotations

from collections.abc import Sequence

from decklog.core.actions.catalog import ActionSpec
from decklog.core.actions.conditions import CheckResult, Evidence, describe_drift, evaluate, inputs_digest
from decklog.core.actions.context import APPROVALS, DeskContext, new_proposal_id
from decklog.core.actions.outcomes import DecisionKind, DecisionOutcome
from decklog.core.actions.policy import approvals_required, may_approve, may_deny
from decklog.core.actions.proposals import Proposals
from decklog.core.clock import parse_iso
from decklog.core.entries import Actor, Approval, ApprovalRefused, NewEntry, ProposalClosed, ProposalMade
from decklog.core.errors import NotFound
from decklog.core.state import ProposalState, ScopeState
from decklog.core.store.ports import AppendResult


class Approvals:
    def __init__(self, ctx: DeskContext, proposals: Proposals) -> None:
        self.ctx = ctx
        self.proposals = proposals

    async def find(self, proposal_id: str) -> str:
        """The open scope where ``proposal_id`` is parked (for ``/incident approve <id>`` outside a thread)."""
        if self.ctx.index is None:
            raise NotFound(f"no proposal {proposal_id} is waiting in any open scope")
        rows = await self.ctx.index.list_scopes(upkeep=True, limit=None)  # however old the scope
        rows.sort(key=lambda r: (r.pending_approvals == 0, not r.is_open))
        for row in rows:
            if not row.pending_approvals and not row.is_open:
                continue
            try:
                state = await self.ctx.store.get_state(row.id)
            except NotFound:
                continue
            if proposal_id in state.proposals:
                return row.id
        raise NotFound(f"no proposal {proposal_id} is waiting in any open scope")

    async def decide(
        self, scope: str | None, proposal_id: str, approve: bool, actor: Actor, reason: str = "", key: str = ""
    ) -> DecisionOutcome:
        """Approve or deny a parked proposal (see ``ActionDesk.decide``)."""
        scope = scope or await self.find(proposal_id)
        state = await self.ctx.store.get_state(scope)
        prop = state.proposals.get(proposal_id)
        if prop is None:
            return await self._fate(scope, proposal_id)
        spec = self.ctx.catalog.get(prop.action) if prop.action in self.ctx.catalog else None
        group = spec.approver_group if spec else ""
        member_of = await self.ctx.memberships(actor.id, group)
        original = await self._proposal_entry(scope, prop)
        evidence = await self.ctx.evidence(scope, state, prop.params, action=prop.action) if approve else Evidence()
        new_pid = new_proposal_id()
        not_waiting: list[str] = []

        def tx(s: ScopeState) -> list[NewEntry]:
            p = s.proposals.get(proposal_id)
            if p is None or p.status != "waiting_for_approval":
                not_waiting.append(p.status if p else "closed")
                return []
            if p.expires_at and parse_iso(p.expires_at) <= self.ctx.clock.now():
                why = f"not approved before it expired at {p.expires_at[:16].replace('T', ' ')} UTC"
                closed = ProposalClosed(proposal_id=p.id, outcome="expired", reason=why)
                return [NewEntry.make("proposal_closed", APPROVALS, closed)]
            check = may_approve if approve else may_deny
            refusal = check(
                self.ctx.policy, p, user_id=actor.id, actor_type=actor.type, action_group=group, member_of=member_of
            )
            if refusal:
                refused = ApprovalRefused(proposal_id=p.id, user_id=actor.id, reason=refusal)
                return [NewEntry.make("approval_refused", actor, refused)]
            if approve and spec is not None and p.inputs_digest:
                results = evaluate(p.safety_conditions, s, evidence, p.params)
                if inputs_digest(results) != p.inputs_digest:
                    return self._void(actor, p, original, spec, results, new_pid)
            decision = Approval(
                proposal_id=p.id,
                decision="approved" if approve else "denied",
                approver=actor.id,
                approver_name=actor.name,
                reason=reason,
            )
            return [NewEntry.make("approval", actor, decision)]

        result = await self.ctx.store.append(scope, tx, idempotency_key=key or None)
        return _outcome(result, proposal_id, approve, not_waiting)

    def _void(
        self,
        actor: Actor,
        p: ProposalState,
        original: ProposalMade | None,
        spec: ActionSpec,
        results: Sequence[CheckResult],
        new_pid: str,
    ) -> list[NewEntry]:
        why = describe_drift(original.checks if original else (), results)
        closed = ProposalClosed(
            proposal_id=p.id,
            outcome="voided",
            reason=f"the approval by {actor.label()} is void: the scope changed since it was proposed — {why}",
        )
        again = self.proposals.entry(
            APPROVALS,
            new_pid,
            spec,
            dict(p.params),
            rationale=original.rationale if original else "",
            obligation_id=p.obligation_id,
            results=results,
            proposer=p.proposer,
            compensates_run=p.compensates_run,
            reason=f"re-evaluated after {p.id} was voided: {why}",
            refs=[p.proposed_seq],
        )
        return [NewEntry.make("proposal_closed", APPROVALS, closed), again]

    async def _fate(self, scope: str, pid: str) -> DecisionOutcome:
        """What became of a proposal that is not open any more (the newest entry that says so)."""
        kinds = ["proposal_closed", "approval", "proposal"]
        for entry in reversed(await self.ctx.store.read(scope, kinds=kinds)):
            p = entry.payload
            if isinstance(p, ProposalClosed) and p.proposal_id == pid:
                return DecisionOutcome(DecisionKind.CLOSED, pid, outcome=p.outcome, reason=p.reason)
            if isinstance(p, Approval) and p.proposal_id == pid and p.decision == "denied":
                return DecisionOutcome(DecisionKind.ALREADY_DENIED, pid, by=p.approver_name or p.approver)
            if isinstance(p, ProposalMade) and p.proposal_id == pid:
                if p.status == "denied":
                    return DecisionOutcome(DecisionKind.DENIED_BY_POLICY, pid, reason=p.reason)
                return DecisionOutcome(DecisionKind.DECIDED, pid)
        raise NotFound(f"no proposal {pid} in {scope}")

    async def _proposal_entry(self, scope: str, prop: ProposalState) -> ProposalMade | None:
        found = await self.ctx.store.read_seqs(scope, [prop.proposed_seq]) if prop.proposed_seq else []
        payload = found[0].payload if found else None
        return payload if isinstance(payload, ProposalMade) else None

    async def policy_problem(self, prop: ProposalState) -> str:
        """Why an approved proposal may not run under the policy as configured now ("" when it may)."""
        catalog, policy = self.ctx.catalog, self.ctx.policy
        spec = catalog.get(prop.action) if prop.action in catalog else None
        if spec is None:
            return f"{prop.action} is not a configured action"
        if prop.risk != spec.risk:
            return f"it was recorded as {prop.risk}, but {spec.name} is {spec.risk}"
        need = approvals_required(spec.risk, policy)
        if spec.risk == "R4" or prop.approvals_required < need:
            return (
                f"{spec.name} ({spec.risk}) needs {need} approval(s); the proposal asked for {prop.approvals_required}"
            )
        valid: list[str] = []
        for approver in dict.fromkeys(prop.approvals):
            member_of = await self.ctx.memberships(approver, spec.approver_group)
            others = prop.model_copy(update={"approvals": tuple(valid)})
            if not may_approve(
                policy,
                others,
                user_id=approver,
                actor_type="human",
                action_group=spec.approver_group,
                member_of=member_of,
            ):
                valid.append(approver)
        if len(valid) < need:
            return f"its approvals do not satisfy the policy ({len(valid)} valid of the {need} needed)"
        return ""


def withdraw(s: ScopeState, *, pid: str, reason: str) -> list[NewEntry]:
    """Close an approved proposal unrun (its approvals no longer satisfy the policy)."""
    p = s.proposals.get(pid)
    if p is None or p.status != "approved":
        return []
    closed = ProposalClosed(proposal_id=pid, outcome="withdrawn", reason=f"not run: {reason}")
    return [NewEntry.make("proposal_closed", APPROVALS, closed)]


def _outcome(result: AppendResult, pid: str, approve: bool, not_waiting: list[str]) -> DecisionOutcome:
    if not result.entries:
        status = (not_waiting or ["closed"])[0]
        return DecisionOutcome(DecisionKind.NOT_WAITING, pid, approve, status=status)
    first = result.entries[0].payload
    if isinstance(first, ApprovalRefused):
        return DecisionOutcome(DecisionKind.REFUSED, pid, approve, reason=first.reason)
    if isinstance(first, ProposalClosed) and first.outcome == "expired":
        return DecisionOutcome(DecisionKind.EXPIRED, pid, approve, reason=first.reason)
    if isinstance(first, ProposalClosed) and first.outcome == "voided":
        again = result.entries[-1].payload
        new_id = again.proposal_id if isinstance(again, ProposalMade) else "?"
        return DecisionOutcome(DecisionKind.VOIDED, pid, approve, reason=first.reason, new_proposal_id=new_id)
    if isinstance(first, Approval) and first.decision == "denied":
        return DecisionOutcome(DecisionKind.DENIED, pid, approve)
    prop = result.state.proposals.get(pid)
    if prop is not None and prop.status == "waiting_for_approval":
        return DecisionOutcome(
            DecisionKind.APPROVED_WAITING,
            pid,
            approve,
            action=prop.action,
            approvals=len(prop.approvals),
            approvals_required=prop.approvals_required,
        )
    return DecisionOutcome(DecisionKind.APPROVED, pid, approve, action=prop.action if prop else "it")
