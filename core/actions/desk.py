"""The action desk: the one door to actions — propose, decide (approve / deny), execute, compensate, verify, sweep.

Agents reach it through their ``Proposer`` port (``propose``); Slack through ``decide`` and ``compensate`` (the
``SlackHooks``); the ``actions`` outbox sender and the periodic sweep through ``execute`` / ``verify`` /
``sweep``. Every decision is one transaction on the scope's log, decided from the state inside it.

>>> desk = ActionDesk(store, index, catalog, executors, policy, clock=clock, lease_seconds=120)  # doctest: +SKIP
>>> await desk.propose("incident/payments-5xx", action="rollback_deploy", params={"service": "payments"},
...                    rationale="r41 raised 5xx", obligation_id="ob-1a2b3c", actor=Actor.agent("triage"))  # doctest: +SKIP
'parked p-1a2b3c for approval (R2): rollback_deploy(service="payments")'
>>> await desk.decide(None, "p-1a2b3c", True, Actor.human("U0ALICE"), "", "slack:act:1")  # doctest: +SKIP
':white_check_mark: Approved `p-1a2b3c`: rollback_deploy runs now; the result will be posted in the thread.'
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from core.actions import params as pm
from core.actions.catalog import ActionSpec, Catalog
from core.actions.conditions import (
    ChangeFact,
    CheckResult,
    Evidence,
    describe_drift,
    evaluate,
    inputs_digest,
)
from core.actions.executor import Executor
from core.actions.policy import R4_REASON, ApproverPolicy, approvals_required, initial_status, may_approve, may_deny
from core.actions.runner import Checkpoint, Runner, RunReport
from core.actions.verification import judge
from core.clock import Clock, iso, parse_iso
from core.entries import (
    ActionResult,
    ActionStarted,
    Actor,
    Approval,
    ApprovalRefused,
    EffectCompensated,
    NewEntry,
    ObligationFulfilled,
    ProposalClosed,
    ProposalMade,
    Verification,
)
from core.errors import Conflict, DecklogError, Forbidden, InvalidInput, NotFound, StaleFence
from core.index import Index
from core.obligations import check_fence, claim, expire_leases, lease_live, open_obligation, reject_stale
from core.state import ProposalState, ScopeState
from core.store import AppendResult, LogStore

log = logging.getLogger(__name__)

GroupResolver = Callable[[str], Awaitable[frozenset[str]]]  # Slack user group id → its members' user ids
APPROVALS = Actor.system("approvals")
VERIFIER = Actor.agent("verifier", "rule-based verifier")


def new_proposal_id() -> str:
    return f"p-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class ActionInfo:
    """What the catalog offers, as agents and people see it (the shape of ``core.agents.ports.ActionInfo`` plus
    availability)."""

    name: str
    description: str
    risk: str
    params_schema: dict[str, Any]
    safety_conditions: tuple[str, ...]
    available: bool = True
    unavailable_reason: str = ""
    compensable: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "risk": self.risk,
            "params": self.params_schema,
            "safety_conditions": list(self.safety_conditions),
            "available": self.available,
            "unavailable_reason": self.unavailable_reason,
            "compensable": self.compensable,
        }


@dataclass(frozen=True)
class Proposed:
    """What ``make_proposal`` did. ``text`` is the one-line outcome ``propose`` returns."""

    proposal_id: str
    status: str  # waiting_for_approval | approved | denied
    existing: bool = False
    text: str = ""


@dataclass
class SweepReport:
    scopes: int = 0
    leases_expired: int = 0
    proposals_expired: int = 0
    runs: list[RunReport] = field(default_factory=list)
    verifications: list[str] = field(default_factory=list)


class ActionDesk:
    def __init__(
        self,
        store: LogStore,
        index: Index | None,
        catalog: Catalog,
        executors: Mapping[str, Executor],
        policy: ApproverPolicy,
        *,
        clock: Clock,
        lease_seconds: float = 120.0,
        groups: GroupResolver | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        self.store = store
        self.index = index
        self.catalog = catalog
        self.policy = policy
        self.clock = clock
        self.groups = groups
        self.runner = Runner(
            store,
            catalog,
            executors,
            clock=clock,
            lease_seconds=lease_seconds,
            evidence=self.evidence,
            checkpoint=checkpoint,
        )

    # -- the catalog ------------------------------------------------------------------------------------------

    def listing(self) -> list[ActionInfo]:
        """Every configured action, available or not (with the reason)."""
        return [
            ActionInfo(
                name=a.name,
                description=a.description,
                risk=a.risk,
                params_schema={k: v.model_dump(exclude_defaults=True) | {"type": v.type} for k, v in a.params.items()},
                safety_conditions=a.safety_conditions,
                available=a.available,
                unavailable_reason=a.unavailable_reason,
                compensable=a.compensation is not None,
            )
            for a in self.catalog
        ]

    def available(self) -> list[ActionInfo]:
        """The actions that may be proposed here (their executor is configured)."""
        return [a for a in self.listing() if a.available]

    # -- evidence ---------------------------------------------------------------------------------------------

    async def evidence(self, scope: str, state: ScopeState, params: Mapping[str, Any]) -> Evidence:
        """Facts from outside the scope's own state: the change scopes linked to it or touching the service."""
        facts: dict[str, ChangeFact] = {}
        for other in state.linked:
            if not other.startswith("change/"):
                continue
            try:
                cs = await self.store.get_state(other)
            except NotFound:
                continue
            facts[other] = ChangeFact(other, cs.services, cs.created_at, cs.status, cs.title)
        service = str(params.get("service") or "")
        if service and self.index is not None:
            for row in await self.index.list_scopes(kind="change", service=service, limit=200):
                facts.setdefault(row.id, ChangeFact(row.id, row.services, row.created_at, row.status, row.title))
        return Evidence(tuple(sorted(facts.values(), key=lambda c: c.scope)))

    # -- proposing --------------------------------------------------------------------------------------------

    async def propose(
        self,
        scope: str,
        *,
        action: str,
        params: dict[str, Any],
        rationale: str,
        obligation_id: str | None,
        actor: Actor,
    ) -> str:
        """Propose an action (the agents' ``Proposer`` port); returns a one-line outcome naming the proposal id:
        ``parked p-1a2b3c for approval (R2): rollback_deploy(service="payments")``.

        R1 is approved at once (the ``actions`` sender runs it), R2/R3 park for approval, R4 is recorded as
        denied with the reason. An equal open proposal is not repeated (its id is returned). Raises ``NotFound``
        (unknown action or obligation), ``Forbidden`` (unavailable action), ``InvalidInput`` (bad parameters,
        naming the parameter), ``Conflict`` (the obligation already has an approved proposal).
        """
        made = await self.make_proposal(
            scope, action=action, params=params, rationale=rationale, obligation_id=obligation_id or "", actor=actor
        )
        return made.text

    async def make_proposal(
        self,
        scope: str,
        *,
        action: str,
        params: Mapping[str, Any],
        rationale: str,
        obligation_id: str = "",
        actor: Actor,
        compensates_run: str = "",
        idempotency_key: str | None = None,
        text: str = "",
    ) -> Proposed:
        """``propose`` with the details: the proposal id and its status."""
        pid, existing = await self._propose(
            scope,
            action=action,
            params=params,
            rationale=rationale,
            obligation_id=obligation_id,
            actor=actor,
            compensates_run=compensates_run,
            idempotency_key=idempotency_key,
            text=text,
        )
        state = await self.store.get_state(scope)
        prop = state.proposals.get(pid)
        entry = None if prop is not None else await self._find_proposal(scope, pid)
        status = prop.status if prop is not None else entry.status if entry is not None else "closed"
        preview = prop.preview if prop is not None else entry.preview if entry is not None else action
        risk = prop.risk if prop is not None else entry.risk if entry is not None else "?"
        if status == "denied":
            why = entry.reason if entry is not None else ""
            line = f"denied {pid} by policy ({risk}): {why}"
        elif status == "waiting_for_approval":
            line = f"{'already parked as' if existing else 'parked'} {pid} for approval ({risk}): {preview}"
        else:
            line = f"{'already proposed as' if existing else 'approved'} {pid} ({risk}, {status.replace('_', ' ')}): {preview}"
        return Proposed(pid, status, existing, line)

    async def _find_proposal(self, scope: str, pid: str) -> ProposalMade | None:
        for entry in reversed(await self.store.read(scope, kinds=["proposal"])):
            if isinstance(entry.payload, ProposalMade) and entry.payload.proposal_id == pid:
                return entry.payload
        return None

    async def _propose(
        self,
        scope: str,
        *,
        action: str,
        params: Mapping[str, Any],
        rationale: str,
        obligation_id: str,
        actor: Actor,
        compensates_run: str = "",
        idempotency_key: str | None = None,
        text: str = "",
    ) -> tuple[str, bool]:
        spec = self.catalog.get(action)
        if not spec.available:
            raise Forbidden(f"{action} is unavailable here: {spec.unavailable_reason}; it cannot be proposed")
        normalised = spec.normalise(params)
        state = await self.store.get_state(scope)
        evidence = await self.evidence(scope, state, normalised)
        digest = pm.args_hash(spec.name, normalised)
        pid = new_proposal_id()
        found: list[str] = []

        def decide(s: ScopeState) -> list[NewEntry]:
            for other in s.proposals.values():
                if other.action == spec.name and other.args_hash == digest and other.compensates_run == compensates_run:
                    found.append(other.id)
                    return []
            out: list[NewEntry] = []
            oid = obligation_id
            refs: list[int] = []
            if spec.risk != "R4":
                if oid:
                    ob = s.obligations.get(oid)
                    if ob is None:
                        raise NotFound(f"no open obligation {oid} in {scope}")
                    refs.append(ob.opened_seq)
                    for other in s.proposals.values():
                        if other.obligation_id != oid:
                            continue
                        if other.status != "waiting_for_approval":
                            raise Conflict(f"{oid} already has {other.id}, which is {other.status.replace('_', ' ')}")
                        closed = ProposalClosed(
                            proposal_id=other.id, outcome="superseded", reason=f"superseded by {pid}"
                        )
                        out.append(NewEntry.make("proposal_closed", actor, closed))
                else:
                    opened = open_obligation(
                        s,
                        text=text or f"Run {pm.preview(spec.name, normalised)}",
                        purpose="compensation" if compensates_run else "action",
                        action=spec.name,
                        params=normalised,
                        run_id=compensates_run,
                        actor=actor,
                    )
                    oid = opened[0].payload.obligation_id  # type: ignore[attr-defined]
                    out.extend(opened)
            results = evaluate(spec.safety_conditions, s, evidence, normalised)
            refs += _alert_refs(s, normalised)
            out.append(
                self._proposal(
                    actor,
                    pid,
                    spec,
                    normalised,
                    rationale=rationale,
                    obligation_id=oid,
                    results=results,
                    proposer=actor.id,
                    compensates_run=compensates_run,
                    refs=refs,
                )
            )
            return out

        await self.store.append(scope, decide, idempotency_key=idempotency_key)
        return (found[0], True) if found else (pid, False)

    def _proposal(
        self,
        actor: Actor,
        pid: str,
        spec: ActionSpec,
        normalised: dict[str, Any],
        *,
        rationale: str,
        obligation_id: str,
        results: Sequence[CheckResult],
        proposer: str,
        compensates_run: str = "",
        reason: str = "",
        refs: Sequence[int] = (),
    ) -> NewEntry:
        status = initial_status(spec.risk)
        if status == "denied":
            reason = f"{R4_REASON}: {spec.description}"
            obligation_id = ""
        expires = self.clock.now() + timedelta(minutes=self.policy.expiry_minutes)
        payload = ProposalMade(
            proposal_id=pid,
            action=spec.name,
            params=normalised,
            preview=pm.preview(spec.name, normalised),
            args_hash=pm.args_hash(spec.name, normalised),
            risk=spec.risk,
            obligation_id=obligation_id,
            rationale=rationale,
            safety_conditions=spec.safety_conditions,
            expires_at="" if status == "denied" else iso(expires),
            inputs_digest=inputs_digest(results),
            status=status,
            approvals_required=approvals_required(spec.risk, self.policy),
            compensates_run=compensates_run,
            proposer=proposer,
            reason=reason,
            checks=tuple(r.to_json() for r in results),
        )
        return NewEntry.make("proposal", actor, payload, refs=sorted({r for r in refs if r > 0})[:12])

    # -- deciding ---------------------------------------------------------------------------------------------

    async def find(self, proposal_id: str) -> str:
        """The open scope where ``proposal_id`` is parked (for ``/incident approve <id>`` outside a thread)."""
        if self.index is None:
            raise NotFound(f"no proposal {proposal_id} is waiting in any open scope")
        rows = await self.index.list_scopes(limit=5000)
        rows.sort(key=lambda r: (r.pending_approvals == 0, not r.is_open))
        for row in rows:
            if not row.pending_approvals and not row.is_open:
                continue
            try:
                state = await self.store.get_state(row.id)
            except NotFound:
                continue
            if proposal_id in state.proposals:
                return row.id
        raise NotFound(f"no proposal {proposal_id} is waiting in any open scope")

    async def decide(
        self, scope: str | None, proposal_id: str, approve: bool, actor: Actor, reason: str = "", key: str = ""
    ) -> str:
        """Approve or deny a parked proposal; returns the reply for the person who asked (an ephemeral in Slack).

        Refusals (not an approver, self-approval of R3, …) are recorded as ``approval_refused``. An expired
        proposal is closed. An approval whose safety-condition inputs drifted since the proposal is void: the
        proposal is closed as ``voided`` and re-evaluated as a new proposal, and the reply says what changed.
        """
        scope = scope or await self.find(proposal_id)
        state = await self.store.get_state(scope)
        prop = state.proposals.get(proposal_id)
        if prop is None:
            return await self._fate(scope, proposal_id)
        spec = self.catalog.get(prop.action) if prop.action in self.catalog else None
        group = spec.approver_group if spec else ""
        member_of = await self._memberships(actor.id, group)
        original = await self._proposal_entry(scope, prop)
        evidence = await self.evidence(scope, state, prop.params) if approve else Evidence()
        new_pid = new_proposal_id()
        not_waiting: list[str] = []

        def tx(s: ScopeState) -> list[NewEntry]:
            p = s.proposals.get(proposal_id)
            if p is None or p.status != "waiting_for_approval":
                not_waiting.append(p.status if p else "closed")
                return []
            if p.expires_at and parse_iso(p.expires_at) <= self.clock.now():
                why = f"not approved before it expired at {p.expires_at[:16].replace('T', ' ')} UTC"
                closed = ProposalClosed(proposal_id=p.id, outcome="expired", reason=why)
                return [NewEntry.make("proposal_closed", APPROVALS, closed)]
            check = may_approve if approve else may_deny
            refusal = check(
                self.policy, p, user_id=actor.id, actor_type=actor.type, action_group=group, member_of=member_of
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

        result = await self.store.append(scope, tx, idempotency_key=key or None)
        return self._decision_reply(result, proposal_id, approve, not_waiting)

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
        again = self._proposal(
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

    def _decision_reply(self, result: AppendResult, pid: str, approve: bool, not_waiting: list[str]) -> str:
        if not result.entries:
            status = (not_waiting or ["closed"])[0].replace("_", " ")
            return f"`{pid}` is not waiting for approval any more ({status})."
        first = result.entries[0].payload
        if isinstance(first, ApprovalRefused):
            verb = "approve" if approve else "deny"
            return f":no_entry: You may not {verb} `{pid}`: {first.reason}. (The attempt is recorded.)"
        if isinstance(first, ProposalClosed) and first.outcome == "expired":
            return f":hourglass: `{pid}` {first.reason}; it is closed and nothing will run. Propose it again if still needed."
        if isinstance(first, ProposalClosed) and first.outcome == "voided":
            again = result.entries[-1].payload
            new_id = again.proposal_id if isinstance(again, ProposalMade) else "?"
            return (
                f":warning: Your approval of `{pid}` is void — {first.reason.split(' — ', 1)[-1]}. "
                f"It was re-evaluated as `{new_id}`: review it and approve again if it still makes sense."
            )
        if isinstance(first, Approval) and first.decision == "denied":
            return f":no_entry_sign: Denied `{pid}`. Nothing will run."
        prop = result.state.proposals.get(pid)
        if prop is not None and prop.status == "waiting_for_approval":
            need = prop.approvals_required - len(prop.approvals)
            return f":white_check_mark: Approved `{pid}` ({len(prop.approvals)} of {prop.approvals_required}); waiting for {need} more approver(s)."
        action = prop.action if prop else "it"
        return f":white_check_mark: Approved `{pid}`: {action} runs now; the result will be posted in the thread."

    async def _fate(self, scope: str, pid: str) -> str:
        for entry in reversed(await self.store.read(scope, kinds=["proposal_closed", "approval", "proposal"])):
            p = entry.payload
            if isinstance(p, ProposalClosed) and p.proposal_id == pid:
                return f"`{pid}` is closed ({p.outcome}{': ' + p.reason if p.reason else ''})."
            if isinstance(p, Approval) and p.proposal_id == pid and p.decision == "denied":
                return f"`{pid}` was already denied by {p.approver_name or p.approver}."
            if isinstance(p, ProposalMade) and p.proposal_id == pid:
                if p.status == "denied":
                    return f"`{pid}` was denied by policy: {p.reason}"
                return f"`{pid}` is not waiting for approval any more (it ran or was decided)."
        raise NotFound(f"no proposal {pid} in {scope}")

    async def _proposal_entry(self, scope: str, prop: ProposalState) -> ProposalMade | None:
        found = await self.store.read_seqs(scope, [prop.proposed_seq]) if prop.proposed_seq else []
        payload = found[0].payload if found else None
        return payload if isinstance(payload, ProposalMade) else None

    async def _memberships(self, user_id: str, action_group: str) -> frozenset[str]:
        """The Slack user groups (of those that may approve) that ``user_id`` belongs to."""
        slack_groups = self.policy.slack_groups(action_group)
        if self.groups is None:
            if slack_groups:
                log.warning("approvals: Slack user groups %s are configured but cannot be resolved here", slack_groups)
            return frozenset()
        out = set()
        for group in slack_groups:
            try:
                if user_id in await self.groups(group):
                    out.add(group)
            except Exception:
                log.warning("approvals: could not read the members of Slack user group %s", group, exc_info=True)
        return frozenset(out)

    # -- compensating -----------------------------------------------------------------------------------------

    async def compensate(self, scope: str, run_id: str, actor: Actor, key: str = "") -> str:
        """Propose the compensation of an applied run: a new proposal, approval and run of its own."""
        started: ActionStarted | None = None
        applied: ActionResult | None = None
        for entry in await self.store.read(scope, kinds=["action_started", "action_result", "effect_compensated"]):
            p = entry.payload
            if isinstance(p, ActionStarted) and p.run_id == run_id:
                started = p
            elif isinstance(p, ActionResult) and p.run_id == run_id and p.outcome == "applied":
                applied = p
            elif isinstance(p, EffectCompensated) and p.original_run == run_id:
                return f"`{run_id}` was already compensated by `{p.compensating_run}`."
        if started is None:
            raise NotFound(f"no run {run_id} in {scope}")
        if applied is None:
            return f"`{run_id}` has no applied effect to compensate (nothing was changed, or the outcome is unknown)."
        spec = self.catalog.get(started.action)
        if spec.compensation is None:
            return f"`{run_id}` ({spec.name}) has no compensation configured in decklog.toml; undo it by hand."
        state = await self.store.get_state(scope)
        pending = next((p for p in state.proposals.values() if p.compensates_run == run_id), None)
        if pending is not None:
            return f"The compensation of `{run_id}` is already proposed as `{pending.id}` ({pending.status.replace('_', ' ')})."
        comp = spec.compensation
        params = {k: _template(v, started.params, applied.response) for k, v in comp.params.items()}
        pid, _existing = await self._propose(
            scope,
            action=comp.action,
            params=params,
            rationale=f"compensate {run_id} ({spec.name}, effect {applied.effect_digest[:19]}) on request of {actor.label()}",
            obligation_id="",
            actor=actor,
            compensates_run=run_id,
            idempotency_key=key or None,
            text=f"Compensate run {run_id} ({spec.name})",
        )
        after = await self.store.get_state(scope)
        prop = after.proposals.get(pid)
        status = prop.status.replace("_", " ") if prop else "recorded"
        return f":leftwards_arrow_with_hook: Proposed `{pid}` to compensate `{run_id}`: {comp.action} — {status}."

    # -- running ----------------------------------------------------------------------------------------------

    async def execute(self, scope: str, proposal_id: str, *, receipt: str) -> RunReport:
        """Run an approved proposal — after checking that its approvals satisfy the policy as configured now.

        Approvals normally come through ``decide``; this also stops one appended to the log some other way (a
        hand-written ``decklog append``, a forged risk level): such a proposal is closed as withdrawn, unrun.
        """
        state = await self.store.get_state(scope)
        prop = state.proposals.get(proposal_id)
        if prop is not None and prop.status == "approved":
            problem = await self._policy_problem(prop)
            if problem:
                await self.store.append(scope, functools.partial(self._withdraw, pid=proposal_id, reason=problem))
                return RunReport("withdrawn", detail=problem)
        return await self.runner.execute(scope, proposal_id, receipt=receipt)

    async def _policy_problem(self, prop: ProposalState) -> str:
        spec = self.catalog.get(prop.action) if prop.action in self.catalog else None
        if spec is None:
            return f"{prop.action} is not a configured action"
        if prop.risk != spec.risk:
            return f"it was recorded as {prop.risk}, but {spec.name} is {spec.risk}"
        need = approvals_required(spec.risk, self.policy)
        if spec.risk == "R4" or prop.approvals_required < need:
            return (
                f"{spec.name} ({spec.risk}) needs {need} approval(s); the proposal asked for {prop.approvals_required}"
            )
        valid: list[str] = []
        for approver in dict.fromkeys(prop.approvals):
            member_of = await self._memberships(approver, spec.approver_group)
            others = prop.model_copy(update={"approvals": tuple(valid)})
            if not may_approve(
                self.policy,
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

    def _withdraw(self, s: ScopeState, *, pid: str, reason: str) -> list[NewEntry]:
        p = s.proposals.get(pid)
        if p is None or p.status != "approved":
            return []
        closed = ProposalClosed(proposal_id=pid, outcome="withdrawn", reason=f"not run: {reason}")
        return [NewEntry.make("proposal_closed", APPROVALS, closed)]

    # -- verifying --------------------------------------------------------------------------------------------

    async def verify(self, scope: str, *, due_only: bool = False) -> list[str]:
        """Judge the scope's open "verification needed" obligations by the rules; record the decidable ones
        (with ``due_only``, only those whose due time has passed: the sweep's backstop)."""
        state = await self.store.get_state(scope)
        done: list[str] = []
        now = self.clock.now()
        for ob in list(state.obligations.values()):
            if ob.purpose != "verification" or lease_live(ob, now):
                continue
            if due_only and not (ob.due_at and parse_iso(ob.due_at) <= now):
                continue
            if judge(ob, state, self.clock.now()) is None:
                continue
            outcome = await self._verify_one(scope, ob.id)
            if outcome:
                done.append(outcome)
        return done

    async def _verify_one(self, scope: str, obligation_id: str) -> str:
        holder = f"verify:{secrets.token_hex(3)}"
        try:
            claimed = await self.store.append(
                scope,
                lambda s: claim(
                    s, obligation_id, holder=holder, now=self.clock.now(), lease_seconds=30.0, actor=VERIFIER
                ),
            )
        except (Conflict, NotFound):
            return ""
        fence = int(getattr(claimed.entries[0].payload, "fence", 0))
        verdicts: list[str] = []

        def record(s: ScopeState) -> list[NewEntry]:
            now = self.clock.now()
            ob = check_fence(s, obligation_id, fence, now)
            verdict = judge(ob, s, now)
            if verdict is None:
                return [
                    NewEntry.make(
                        "obligation_released",
                        VERIFIER,
                        {"obligation_id": ob.id, "fence": fence, "reason": "not decidable yet"},
                    )
                ]
            verdicts.append(verdict.outcome)
            out = [
                NewEntry.make(
                    "verification",
                    VERIFIER,
                    Verification(
                        obligation_id=ob.id,
                        run_id=ob.run_id,
                        outcome=verdict.outcome,
                        expected=ob.expected_outcome,
                        observed=verdict.observed,
                    ),
                    refs=verdict.refs,
                ),
                NewEntry.make(
                    "obligation_fulfilled",
                    VERIFIER,
                    ObligationFulfilled(obligation_id=ob.id, fence=fence, note=verdict.outcome, run_id=ob.run_id),
                ),
            ]
            if verdict.outcome != "verified":
                out += open_obligation(
                    s,
                    text=f"Run {ob.run_id} did not show its expected outcome ({ob.expected_outcome}): decide what "
                    f"next — `/incident compensate {ob.run_id}` undoes it",
                    purpose="follow_up",
                    action=ob.action,
                    params=dict(ob.params),
                    run_id=ob.run_id,
                    actor=VERIFIER,
                )
            return out

        try:
            await self.store.append(scope, record)
        except StaleFence as exc:
            stale = exc
        else:
            return f"{obligation_id}: {verdicts[0]}" if verdicts else ""

        def rejected(s: ScopeState) -> list[NewEntry]:
            return reject_stale(
                s, stale, obligation_id=obligation_id, holder=holder, attempted="verification", actor=VERIFIER
            )

        await self.store.append(scope, rejected)
        return ""

    # -- the sweep --------------------------------------------------------------------------------------------

    async def sweep(self, scopes: Sequence[str] | None = None) -> SweepReport:
        """Periodic upkeep: expire leases and approvals, run approved proposals nobody is running (and settle
        runs whose holder vanished), decide verifications that fell due (new evidence triggers the others)."""
        if scopes is None:
            rows = await self.index.list_scopes(limit=10_000) if self.index is not None else []
            scopes = [r.id for r in rows if r.is_open or r.pending_approvals]
        report = SweepReport()
        jobs: list[Awaitable[RunReport]] = []
        receipt = f"sweep:{iso(self.clock.now())}"
        for scope in scopes:
            try:
                state = await self.store.get_state(scope)
            except NotFound:
                continue
            report.scopes += 1
            now = self.clock.now()
            if any(o.status == "claimed" and not lease_live(o, now) for o in state.obligations.values()):
                res = await self.store.append(scope, lambda s: expire_leases(s, now=self.clock.now()))
                report.leases_expired += len(res.entries)
                state = res.state
            expired = [
                p.id
                for p in state.proposals.values()
                if p.status == "waiting_for_approval" and p.expires_at and parse_iso(p.expires_at) <= now
            ]
            if expired:
                res = await self.store.append(scope, functools.partial(self._expire, ids=tuple(expired)))
                report.proposals_expired += len(res.entries)
                state = res.state
            for p in state.proposals.values():
                ob = state.obligations.get(p.obligation_id)
                if p.status in ("approved", "running") and (ob is None or not lease_live(ob, now)):
                    jobs.append(self.execute(scope, p.id, receipt=receipt))
            if any(o.purpose == "verification" for o in state.obligations.values()):
                report.verifications += await self.verify(scope, due_only=True)
        for outcome in await asyncio.gather(*jobs, return_exceptions=True):
            if isinstance(outcome, RunReport):
                report.runs.append(outcome)
            elif isinstance(outcome, DecklogError):
                log.info("sweep: a run could not proceed: %s", outcome)
            elif isinstance(outcome, BaseException):
                log.error("sweep: a run failed", exc_info=outcome)
        return report

    def _expire(self, s: ScopeState, ids: Sequence[str]) -> list[NewEntry]:
        now = self.clock.now()
        out = []
        for pid in ids:
            p = s.proposals.get(pid)
            if p is None or p.status != "waiting_for_approval" or not p.expires_at or parse_iso(p.expires_at) > now:
                continue
            why = f"not approved within {self.policy.expiry_minutes:g} minutes"
            out.append(
                NewEntry.make(
                    "proposal_closed", APPROVALS, ProposalClosed(proposal_id=pid, outcome="expired", reason=why)
                )
            )
        return out


def _alert_refs(state: ScopeState, params: Mapping[str, Any]) -> list[int]:
    service = str(params.get("service") or "")
    return [a.first_seq for a in state.alerts.values() if not service or not a.service or a.service == service][:6]


def _template(value: Any, params: Mapping[str, Any], response: Mapping[str, Any]) -> Any:
    """``"{params.service}"`` / ``"{effect.rolled_back_from}"`` → the recorded value; other values pass as-is."""
    if not isinstance(value, str) or not (value.startswith("{") and value.endswith("}")):
        return value
    source, _, name = value[1:-1].partition(".")
    table = {"params": params, "effect": response}.get(source)
    if table is None or name not in table:
        raise InvalidInput(
            f"cannot fill {value}: the original run recorded no {source} field {name!r}", field="compensation"
        )
    return table[name]
