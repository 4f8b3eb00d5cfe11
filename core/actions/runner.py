"""The execution runner: one approved proposal → at most one effect, under a fenced, delegated authority.

    claim the proposal's obligation (CAS: lease + a fence greater than any before)
    → settle runs of that obligation left behind by an earlier holder (reconcile; never re-run blindly)
    → a run authority bound to (run id, scheduler receipt, lease, fence)
    → re-check the safety conditions on current evidence (fail: record why, do not act)
    → check the fence again and that the lease outlasts the call → call the executor with an idempotency key
      derived from run id + fence
    → record the result under the same fence: applied (obligation fulfilled, "verification needed" opened),
      refused, or uncertain → reconcile → applied / not_applied / abandon_uncertain (an open question)

Every write after the claim checks the fence inside the write transaction. A holder whose fence is no longer
current (a newer holder claimed, or its lease passed) has the write rejected, and the rejection is recorded as a
``fence_rejected`` entry carrying what it attempted. A newer holder that finds a run started but not finished asks
the target (reconcile) instead of acting again.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.actions.catalog import ActionSpec, Catalog
from core.actions.conditions import RELATED_RUNS, evaluate, failing
from core.actions.executor import Executor
from core.actions.run_authority import (
    DESK_PURPOSES,
    RUNNER,
    Checkpoint,
    EvidenceSource,
    ResultOutcome,
    RunAuthority,
    RunnerStats,
    RunReport,
    RunResult,
    idempotency_key,
    new_run_id,
)
from core.actions.run_reconcile import RunReconciling
from core.actions.run_targets import TargetGate
from core.clock import Clock, parse_iso
from core.entries import NewEntry, ObligationReleased, ProposalClosed
from core.errors import Conflict, NotFound, StaleFence
from core.obligations import claim, lease_live
from core.state import ProposalState, ScopeState
from core.store.ports import Leases, LogStore

__all__ = [
    "DESK_PURPOSES",
    "RUNNER",
    "Checkpoint",
    "EvidenceSource",
    "ResultOutcome",
    "RunAuthority",
    "RunReport",
    "RunResult",
    "Runner",
    "RunnerStats",
    "idempotency_key",
    "new_run_id",
]


class Runner(RunReconciling):
    def __init__(
        self,
        store: LogStore,
        catalog: Catalog,
        executors: Mapping[str, Executor],
        *,
        clock: Clock,
        lease_seconds: float,
        evidence: EvidenceSource,
        checkpoint: Checkpoint | None = None,
        reconcile_attempts: int = 3,
        reconcile_backoff: float = 0.25,
        lease_margin: float = 1.0,
        unfenced: bool = False,
        leases: Leases | None = None,
    ) -> None:
        """``unfenced`` exists for the experiment's ``--fences off`` ablation only (``decklog experiment``): a run
        then writes and calls without checking its fence or its lease. Never set it anywhere else."""
        self.store = store
        self.catalog = catalog
        self.executors = executors
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.evidence = evidence
        self.checkpoint = checkpoint
        self.reconcile_attempts = max(1, reconcile_attempts)
        self.reconcile_backoff = reconcile_backoff
        self.lease_margin = lease_margin
        self.unfenced = unfenced
        self.stats = RunnerStats()
        self.gate = TargetGate(leases)  # the backend's leases, when replicas share its database

    def lease_for(self, executor: Executor | None) -> float:
        """A run's lease covers the call and the result write: at least twice the executor's timeout plus a
        margin (1 s), so that a holder's call is over before anyone else can claim the obligation."""
        if executor is None:
            return self.lease_seconds
        return max(self.lease_seconds, 2 * executor.timeout + self.lease_margin)

    # -- entry point ------------------------------------------------------------------------------------------

    async def execute(self, scope: str, proposal_id: str, *, receipt: str) -> RunReport:
        """Run an approved proposal (or settle its unfinished run). Safe to call any number of times, anywhere."""
        state = await self.store.get_state(scope)
        prop = state.proposals.get(proposal_id)
        if prop is None or prop.status not in ("approved", "running"):
            return RunReport("not_runnable", detail=f"{proposal_id} is not approved and waiting to run")
        ob = state.obligations.get(prop.obligation_id)
        if ob is None:
            return await self._orphaned_proposal(scope, prop)
        if lease_live(ob, self.clock.now()):
            return RunReport("busy", detail=f"{ob.id} is held by {ob.holder} (fence {ob.fence})")
        spec = self.catalog.get(prop.action) if prop.action in self.catalog else None
        executor = self.executors.get(prop.action) if spec is not None and spec.available else None
        run_id = new_run_id()
        lease_s = self.lease_for(executor)
        try:
            claimed = await self.store.append(scope, lambda s: self._claim(s, prop, run_id, lease_s))
        except (Conflict, NotFound) as exc:
            return RunReport("busy", detail=str(exc))
        granted = claimed.entries[0].payload
        fence = int(getattr(granted, "fence", 0))
        self.stats.claims += 1
        auth = RunAuthority(
            scope=scope,
            run_id=run_id,
            receipt=receipt,
            obligation_id=prop.obligation_id,
            fence=fence,
            lease_until=parse_iso(str(getattr(granted, "lease_until", ""))),
            proposal_id=prop.id,
            action=prop.action,
            params=dict(prop.params),
        )
        await self._pause("after_claim", auth)
        settled = await self._settle_unfinished(auth, claimed.state, executor)
        if settled is not None:
            return settled
        if spec is None or executor is None:
            why = f"{prop.action} is not available here" + (f" ({spec.unavailable_reason})" if spec else "")
            return await self._close(auth, "withdrawn", why)
        if prop.expires_at and parse_iso(prop.expires_at) <= self.clock.now():
            return await self._close(auth, "expired", f"approved, but not started before {prop.expires_at}")
        return await self._run(auth, spec, executor, prop)

    def _claim(self, s: ScopeState, prop: ProposalState, run_id: str, lease_s: float) -> list[NewEntry]:
        current = s.proposals.get(prop.id)
        if current is None or current.status not in ("approved", "running"):
            raise Conflict(f"{prop.id} is no longer waiting to run")
        ob = s.obligations.get(prop.obligation_id)
        if ob is None:
            raise NotFound(f"obligation {prop.obligation_id} is no longer open")
        now = self.clock.now()
        if lease_live(ob, now):
            raise Conflict(f"{ob.id} is held by {ob.holder} (fence {ob.fence})")
        return claim(s, ob.id, holder=f"run:{run_id}", now=now, lease_seconds=lease_s, actor=RUNNER)

    # -- one run ----------------------------------------------------------------------------------------------

    async def _run(self, auth: RunAuthority, spec: ActionSpec, executor: Executor, prop: ProposalState) -> RunReport:
        started = await self._start(auth, spec, executor, prop)
        if started is not None:
            return started
        await self._pause("before_call", auth)
        state = await self.store.get_state(auth.scope)
        try:
            self._check(state, auth)
        except StaleFence as exc:
            await self._reject(auth, exc, f"call {auth.action} for {auth.run_id}: not made")
            return RunReport("stale", auth.run_id, exc.message)
        left = (auth.lease_until - self.clock.now()).total_seconds()
        if left < executor.timeout and not self.unfenced:
            why = f"the lease had {left:.1f}s left, less than the call's timeout ({executor.timeout:g}s): not called"
            return await self._finish(auth, auth.run_id, RunResult("not_applied", error=why), spec, prop)
        self.stats.calls += 1
        outcome = await executor.execute(auth.request())
        await self._pause("after_call", auth)
        if outcome.outcome == "applied":
            result = RunResult("applied", outcome.effect_digest, outcome.response)
        elif outcome.outcome in ("refused", "failed"):
            why = outcome.error or f"HTTP {outcome.status}"
            result = RunResult(outcome.outcome, response=outcome.response, error=why)
        else:
            uncertain = RunResult("uncertain", response=outcome.response, error=outcome.error)
            wrote = await self._write(
                auth,
                self._fenced(auth, [self._result(auth, auth.run_id, uncertain)]),
                f"action_result uncertain for {auth.run_id} ({outcome.error})",
            )
            if wrote is None:
                return RunReport("stale", auth.run_id, "uncertain; the newer holder will reconcile")
            result = await self._resolve_uncertain(executor, auth.request())
        return await self._finish(auth, auth.run_id, result, spec, prop)

    async def _start(
        self, auth: RunAuthority, spec: ActionSpec, executor: Executor, prop: ProposalState
    ) -> RunReport | None:
        """``_start_checked``, inside the (action, target) gate when a condition reads the sibling incidents' runs
        (core/actions/run_targets.py): a sibling's runner that checks at the same instant then sees this start."""
        if RELATED_RUNS not in spec.safety_conditions:
            return await self._start_checked(auth, spec, executor, prop)
        async with self.gate.hold(spec.name, auth.params, auth.run_id) as held:
            if held:
                return await self._start_checked(auth, spec, executor, prop)
        why = "another incident was starting this action on this target; not started, the next attempt checks again"

        def give_back(s: ScopeState) -> list[NewEntry]:
            self._check(s, auth)
            return [_released(auth, why)]

        if await self._write(auth, give_back, f"defer {auth.run_id}") is None:
            return RunReport("stale", auth.run_id, "the claim was taken over before the run could start")
        return RunReport("deferred", auth.run_id, why)

    async def _start_checked(
        self, auth: RunAuthority, spec: ActionSpec, executor: Executor, prop: ProposalState
    ) -> RunReport | None:
        """Record ``action_started`` under the fence once the safety conditions hold on current evidence; a report
        when the run ends here (stale, deferred: too little lease left, skipped: a condition failed), else None."""
        state = await self.store.get_state(auth.scope)
        evidence = await self.evidence(auth.scope, state, auth.params, action=spec.name)
        started = self._started(auth, prop)
        skipped: list[str] = []
        deferred: list[str] = []

        def start(s: ScopeState) -> list[NewEntry]:
            self._check(s, auth)
            left = (auth.lease_until - self.clock.now()).total_seconds()
            if left < executor.timeout + self.lease_margin:
                # Not enough lease left to make the call safely: give the claim back, keep the approval.
                deferred.append(f"the lease had {left:.1f}s left, too little for a {executor.timeout:g}s call")
                return [_released(auth, deferred[0] + "; not started, the next attempt claims a fresh lease")]
            failed = failing(evaluate(spec.safety_conditions, s, evidence, auth.params))
            if not failed:
                return [started]
            skipped.extend(f"{r.name}: {r.detail}" for r in failed)
            why = "safety conditions no longer hold — " + "; ".join(skipped)
            result = self._result(auth, auth.run_id, RunResult("skipped", error=why))
            return [started, result, *self._dispose(s, auth, applied=False, reason=why)]

        if await self._write(auth, start, f"start {auth.run_id}") is None:
            return RunReport("stale", auth.run_id, "the claim was taken over before the run could start")
        if deferred:
            return RunReport("deferred", auth.run_id, deferred[0])
        if skipped:
            self.stats.outcomes["skipped"] += 1
            return RunReport("skipped", auth.run_id, "; ".join(skipped))
        return None

    # -- runs left behind -------------------------------------------------------------------------------------

    async def _orphaned_proposal(self, scope: str, prop: ProposalState) -> RunReport:
        """An approved proposal whose obligation was fulfilled or cancelled meanwhile: close it."""
        reason = f"its obligation {prop.obligation_id} is no longer open"

        def close(s: ScopeState) -> list[NewEntry]:
            current = s.proposals.get(prop.id)
            if current is None or current.status != "approved" or current.obligation_id in s.obligations:
                return []
            return [
                NewEntry.make(
                    "proposal_closed", RUNNER, ProposalClosed(proposal_id=prop.id, outcome="withdrawn", reason=reason)
                )
            ]

        await self.store.append(scope, close)
        return RunReport("withdrawn", detail=reason)


def _released(auth: RunAuthority, why: str) -> NewEntry:
    """The claim given back unstarted (the approval stays): the next attempt claims afresh."""
    released = ObligationReleased(obligation_id=auth.obligation_id, fence=auth.fence, reason=why)
    return NewEntry.make("obligation_released", RUNNER, released)
