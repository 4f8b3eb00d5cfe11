"""Proposing: validate an action and its parameters, evaluate its safety conditions, and record the proposal — at
once approved (R1), parked for approval (R2/R3) or denied by policy (R4) — in one transaction on the scope's log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from decklog.core.actions import params as pm
from decklog.core.actions.catalog import ActionSpec
from decklog.core.actions.conditions import CheckResult, Evidence, evaluate, inputs_digest
from decklog.core.actions.context import DeskContext, new_proposal_id
from decklog.core.actions.outcomes import Proposed
from decklog.core.actions.policy import R4_REASON, approvals_required, initial_status
from decklog.core.clock import iso
from decklog.core.entries import Actor, NewEntry, ProposalClosed, ProposalMade
from decklog.core.errors import Conflict, Forbidden, NotFound
from decklog.core.obligations import open_obligation
from decklog.core.state import ScopeState


@dataclass(frozen=True)
class Request:
    """One proposal to make: the action with its normalised parameters, and what it is for."""

    scope: str
    spec: ActionSpec
    params: dict[str, Any]
    rationale: str
    obligation_id: str
    actor: Actor
    compensates_run: str = ""
    text: str = ""


def incident_facts(state: ScopeState) -> dict[str, pm.Scalar]:
    """What a parameter can be derived from (``ParamSpec.from_incident``; ``params.INCIDENT_FACTS``): only the
    facts the incident has."""
    link = state.thread.permalink if state.thread else ""
    service = state.services[0] if state.services else ""
    severity = f"SEV{state.severity}" if state.severity else ""
    facts: dict[str, pm.Scalar] = {
        "title": state.title,
        "service": service,
        "services": ", ".join(state.services),
        "link": link,
        "scope": state.scope,
        "status": state.status,
        "headline": " · ".join(part for part in (severity, state.title, service, link) if part),
    }
    if state.severity:
        facts["severity"] = state.severity
    return {name: value for name, value in facts.items() if value != ""}


class Proposals:
    def __init__(self, ctx: DeskContext) -> None:
        self.ctx = ctx

    async def make(
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
        """Propose ``action``; the proposal id, its status and the one-line outcome an agent reads."""
        pid, existing = await self.record(
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
        state = await self.ctx.store.get_state(scope)
        prop = state.proposals.get(pid)
        entry = None if prop is not None else await self._find(scope, pid)
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

    async def _find(self, scope: str, pid: str) -> ProposalMade | None:
        for entry in reversed(await self.ctx.store.read(scope, kinds=["proposal"])):
            if isinstance(entry.payload, ProposalMade) and entry.payload.proposal_id == pid:
                return entry.payload
        return None

    async def record(
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
        """Append the proposal (or find an equal open one): its id, and whether it already existed."""
        spec = self.ctx.catalog.get(action)
        if not spec.available:
            raise Forbidden(f"{action} is unavailable here: {spec.unavailable_reason}; it cannot be proposed")
        state = await self.ctx.store.get_state(scope)
        normalised = spec.normalise(pm.derive(spec.params, params, incident_facts(state)))
        req = Request(scope, spec, normalised, rationale, obligation_id, actor, compensates_run, text)
        evidence = await self.ctx.evidence(scope, state, normalised, action=spec.name)
        digest = pm.args_hash(spec.name, normalised)
        pid = new_proposal_id()
        found: list[str] = []

        def decide(s: ScopeState) -> list[NewEntry]:
            for other in s.proposals.values():
                if other.action == spec.name and other.args_hash == digest and other.compensates_run == compensates_run:
                    found.append(other.id)
                    return []
            return self._entries(s, req, pid, evidence)

        result = await self.ctx.store.append(scope, decide, idempotency_key=idempotency_key)
        if result.duplicate:  # a retried request: the proposal its first delivery made
            made = [e.payload.proposal_id for e in result.entries if isinstance(e.payload, ProposalMade)]
            return (made[-1], True) if made else (found[0] if found else pid, bool(found))
        return (found[0], True) if found else (pid, False)

    def _entries(self, s: ScopeState, req: Request, pid: str, evidence: Evidence) -> list[NewEntry]:
        """Inside the transaction: bind the proposal to its obligation (opening one if none was named)."""
        out: list[NewEntry] = []
        oid = req.obligation_id
        refs: list[int] = []
        if req.spec.risk != "R4":
            if oid:
                refs.append(_supersede(s, req, pid, out))
            else:
                opened = open_obligation(
                    s,
                    text=req.text or f"Run {pm.preview(req.spec.name, req.params)}",
                    purpose="compensation" if req.compensates_run else "action",
                    action=req.spec.name,
                    params=req.params,
                    run_id=req.compensates_run,
                    actor=req.actor,
                )
                oid = opened[0].payload.obligation_id  # type: ignore[attr-defined]
                out.extend(opened)
        results = evaluate(req.spec.safety_conditions, s, evidence, req.params)
        refs += _alert_refs(s, req.params)
        out.append(
            self.entry(
                req.actor,
                pid,
                req.spec,
                req.params,
                rationale=req.rationale,
                obligation_id=oid,
                results=results,
                proposer=req.actor.id,
                compensates_run=req.compensates_run,
                refs=refs,
            )
        )
        return out

    def entry(
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
        """The ``proposal`` entry, with its initial status by risk and its expiry by policy."""
        status = initial_status(spec.risk)
        if status == "denied":
            reason = f"{R4_REASON}: {spec.description}"
            obligation_id = ""
        expires = self.ctx.clock.now() + timedelta(minutes=self.ctx.policy.expiry_minutes)
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
            approvals_required=approvals_required(spec.risk, self.ctx.policy),
            compensates_run=compensates_run,
            proposer=proposer,
            reason=reason,
            checks=tuple(r.to_json() for r in results),
        )
        return NewEntry.make("proposal", actor, payload, refs=sorted({r for r in refs if r > 0})[:12])


def _supersede(s: ScopeState, req: Request, pid: str, out: list[NewEntry]) -> int:
    """The named obligation's waiting proposals are superseded by ``pid`` (one that is further along conflicts);
    returns the seq that opened the obligation."""
    oid = req.obligation_id
    ob = s.obligations.get(oid)
    if ob is None:
        raise NotFound(f"no open obligation {oid} in {req.scope}")
    for other in s.proposals.values():
        if other.obligation_id != oid:
            continue
        if other.status != "waiting_for_approval":
            raise Conflict(f"{oid} already has {other.id}, which is {other.status.replace('_', ' ')}")
        closed = ProposalClosed(proposal_id=other.id, outcome="superseded", reason=f"superseded by {pid}")
        out.append(NewEntry.make("proposal_closed", req.actor, closed))
    return ob.opened_seq


def _alert_refs(state: ScopeState, params: Mapping[str, Any]) -> list[int]:
    service = str(params.get("service") or "")
    return [a.first_seq for a in state.alerts.values() if not service or not a.service or a.service == service][:6]
