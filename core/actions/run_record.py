"""Recording a run's end (core/actions/runner.py): the result under the run's fence, the obligation fulfilled,
given back or cancelled, and what an applied effect opens (a "verification needed" obligation, the compensation
record) or an unknown one (a follow-up obligation)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from core.actions.catalog import ActionSpec
from core.actions.run_authority import DESK_PURPOSES, RUNNER, RunAuthority, RunnerStats, RunReport, RunResult
from core.actions.run_fences import RunFences
from core.clock import iso
from core.entries import (
    ActionResult,
    ActionStarted,
    EffectCompensated,
    NewEntry,
    ObligationCancelled,
    ObligationFulfilled,
    ObligationReleased,
    ProposalClosed,
)
from core.obligations import open_obligation
from core.state import ProposalState, RunState, ScopeState


class RunRecording(RunFences):
    """The runner's result records (a base of ``Runner``)."""

    stats: RunnerStats

    def _started(self, auth: RunAuthority, prop: ProposalState) -> NewEntry:
        return NewEntry.make(
            "action_started",
            RUNNER,
            ActionStarted(
                run_id=auth.run_id,
                action=auth.action,
                proposal_id=auth.proposal_id,
                obligation_id=auth.obligation_id,
                fence=auth.fence,
                lease_until=iso(auth.lease_until),
                receipt=auth.receipt,
                idempotency_key=auth.idempotency_key,
                proposer=prop.proposer,
                approvers=prop.approvals,
                params=auth.params,
                compensates_run=prop.compensates_run,
            ),
        )

    async def _finish(
        self,
        auth: RunAuthority,
        run_id: str,
        result: RunResult,
        spec: ActionSpec | None,
        prop: ProposalState,
        *,
        run: RunState | None = None,
    ) -> RunReport:
        original_digest = ""
        if result.outcome == "applied" and prop.compensates_run:
            original_digest = await self.applied_digest(auth.scope, prop.compensates_run)
        action = run.action if run is not None else auth.action
        params = dict(prop.params) if run is not None else auth.params

        def record(s: ScopeState) -> list[NewEntry]:
            self._check(s, auth)
            out = [self._result(auth, run_id, result, action=action)]
            out += self._dispose(s, auth, applied=result.outcome == "applied", reason=result.error, run_id=run_id)
            if result.outcome == "applied":
                if prop.compensates_run:
                    out.append(
                        NewEntry.make(
                            "effect_compensated",
                            RUNNER,
                            EffectCompensated(
                                original_run=prop.compensates_run,
                                original_digest=original_digest,
                                compensating_run=run_id,
                                compensating_digest=result.digest,
                            ),
                        )
                    )
                out += self._verification(s, spec, run_id, params, prop.compensates_run)
            elif result.outcome == "abandon_uncertain":
                out += open_obligation(
                    s,
                    text=f"Find out whether run {run_id} ({action}) took effect: its outcome is unknown and it was not retried",
                    purpose="follow_up",
                    action=action,
                    params=params,
                    run_id=run_id,
                    actor=RUNNER,
                )
            return out

        attempted = f"action_result {result.outcome} for {run_id}" + (f" ({result.digest})" if result.digest else "")
        if await self._write(auth, record, attempted) is None:
            return RunReport("stale", run_id, f"result {result.outcome} rejected: a newer holder took over")
        self.stats.outcomes[result.outcome] += 1
        return RunReport(result.outcome, run_id, result.error)

    async def _close(self, auth: RunAuthority, outcome: Literal["expired", "withdrawn"], reason: str) -> RunReport:
        def close(s: ScopeState) -> list[NewEntry]:
            self._check(s, auth)
            out: list[NewEntry] = []
            if auth.proposal_id in s.proposals:
                out.append(
                    NewEntry.make(
                        "proposal_closed",
                        RUNNER,
                        ProposalClosed(proposal_id=auth.proposal_id, outcome=outcome, reason=reason),
                    )
                )
            return out + self._dispose(s, auth, applied=False, reason=reason)

        if await self._write(auth, close, f"close {auth.proposal_id} ({outcome})") is None:
            return RunReport("stale", auth.run_id, "taken over")
        return RunReport(outcome, auth.run_id, reason)

    def _result(self, auth: RunAuthority, run_id: str, result: RunResult, *, action: str = "") -> NewEntry:
        return NewEntry.make(
            "action_result",
            RUNNER,
            ActionResult(
                run_id=run_id,
                action=action or auth.action,
                outcome=result.outcome,
                fence=auth.fence,
                effect_digest=result.digest,
                response=result.response,
                error=result.error[:2000],
                reconciled=result.reconciled,
            ),
        )

    def _dispose(
        self, s: ScopeState, auth: RunAuthority, *, applied: bool, reason: str, run_id: str = ""
    ) -> list[NewEntry]:
        """Fulfil the obligation on an applied effect; otherwise give it back (or cancel a desk-made one)."""
        ob = s.obligations.get(auth.obligation_id)
        if ob is None:
            return []
        oid, fence = ob.id, auth.fence
        if applied:
            payload = ObligationFulfilled(obligation_id=oid, fence=fence, note=f"run {run_id} applied", run_id=run_id)
            return [NewEntry.make("obligation_fulfilled", RUNNER, payload)]
        if ob.purpose in DESK_PURPOSES:
            why = reason or "the run ended without an effect"
            return [NewEntry.make("obligation_cancelled", RUNNER, ObligationCancelled(obligation_id=oid, reason=why))]
        return [
            NewEntry.make(
                "obligation_released", RUNNER, ObligationReleased(obligation_id=oid, fence=fence, reason=reason)
            )
        ]

    def _verification(
        self, s: ScopeState, spec: ActionSpec | None, run_id: str, params: dict[str, Any], compensates: str
    ) -> list[NewEntry]:
        if spec is None or spec.verify == "none":
            return []
        check = spec.verify
        expected = spec.expected(params)
        if compensates:
            check, expected = "manual", f"the effect of run {compensates} is undone"
        due = self.clock.now() + timedelta(minutes=spec.verify_within_minutes)
        return open_obligation(
            s,
            text=f"Verification needed for run {run_id}: {expected}",
            purpose="verification",
            conditions=(check,),
            action=spec.name,
            params=params,
            expected_outcome=expected,
            due_at=iso(due),
            run_id=run_id,
            actor=RUNNER,
        )

    async def applied_digest(self, scope: str, run_id: str) -> str:
        for entry in reversed(await self.store.read(scope, kinds=["action_result"])):
            p = entry.payload
            if isinstance(p, ActionResult) and p.run_id == run_id and p.outcome == "applied":
                return p.effect_digest
        return ""
