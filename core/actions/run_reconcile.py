"""Reconciling (core/actions/runner.py): an uncertain outcome, or a run an earlier holder started and never
finished, is settled by asking the target what happened (its reconcile lookup), never by calling the effect
again."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from core.actions.catalog import Catalog
from core.actions.executor import ExecutionRequest, Executor, ReconcileOutcome
from core.actions.run_authority import RunAuthority, RunReport, RunResult
from core.actions.run_record import RunRecording
from core.entries import ActionStarted
from core.state import ProposalState, ScopeState


class RunReconciling(RunRecording):
    """The runner's reconcile steps (a base of ``Runner``)."""

    catalog: Catalog
    reconcile_attempts: int
    reconcile_backoff: float

    async def _resolve_uncertain(self, executor: Executor | None, request: ExecutionRequest) -> RunResult:
        """Ask the target what happened; never call the effect again."""
        if executor is None or not executor.can_reconcile:
            why = "the outcome is unknown and the target has no reconcile lookup; not retried"
            return RunResult("abandon_uncertain", error=why, reconciled=False)
        rec = await self._reconcile(executor, request)
        if rec.status == "applied":
            return RunResult("applied", rec.effect_digest, rec.response, reconciled=True)
        if rec.status == "not_applied":
            return RunResult(
                "not_applied", response=rec.response, error="the target says it was not applied", reconciled=True
            )
        why = f"the outcome is still unknown after {self.reconcile_attempts} lookups ({rec.error}); not retried"
        return RunResult("abandon_uncertain", response=rec.response, error=why, reconciled=False)

    async def _reconcile(self, executor: Executor, request: ExecutionRequest) -> ReconcileOutcome:
        self.stats.reconciles += 1
        rec = await executor.reconcile(request)
        for attempt in range(1, self.reconcile_attempts):
            if rec.status != "unknown":
                break
            await asyncio.sleep(self.reconcile_backoff * attempt)
            rec = await executor.reconcile(request)
        return rec

    async def _settle_unfinished(
        self, auth: RunAuthority, state: ScopeState, executor: Executor | None
    ) -> RunReport | None:
        """Runs of this obligation that started under an older fence and never recorded a final result.

        Their effect may exist: ask the target. Applied → recorded as applied (under our fence) and we stop;
        unknown → abandon_uncertain and we stop; not applied → recorded, and our own run may proceed.
        """
        unfinished = sorted(
            (r for r in state.runs.values() if r.obligation_id == auth.obligation_id), key=lambda r: r.started_seq
        )
        for run in unfinished:
            found = await self.store.read_seqs(auth.scope, [run.started_seq])
            started = found[0].payload if found else None
            if not isinstance(started, ActionStarted):
                continue
            request = ExecutionRequest(
                started.action, dict(started.params), auth.scope, run.run_id, started.fence, started.idempotency_key
            )
            result = await self._resolve_uncertain(executor, request)
            if result.outcome == "not_applied":
                result = replace(
                    result,
                    error=f"run {run.run_id} (fence {run.fence}) lost its lease before recording a result; "
                    "the target says it was not applied",
                )
                prior = self._result(auth, run.run_id, result, action=run.action)
                if await self._write(auth, self._fenced(auth, [prior]), f"settle {run.run_id}") is None:
                    return RunReport("stale", auth.run_id, "taken over while settling an earlier run")
                continue
            spec = self.catalog.get(run.action) if run.action in self.catalog else None
            orphan = ProposalState(
                id=run.proposal_id,
                action=run.action,
                params=dict(started.params),
                compensates_run=started.compensates_run,
            )
            return await self._finish(auth, run.run_id, result, spec, orphan, run=run)
        return None
