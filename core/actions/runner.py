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
the target (reconcile) instead of acting again: an uncertain outcome is settled by the target's reconcile lookup,
never by calling the effect again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal, Protocol

from decklog.core.actions.catalog import ActionSpec, Catalog
from decklog.core.actions.conditions import RELATED_RUNS, Evidence, evaluate, failing
from decklog.core.actions.executor import ExecutionRequest, Executor, ReconcileOutcome
from decklog.core.actions.run_authority import RunAuthority, new_run_id
from decklog.core.actions.run_targets import TargetGate
from decklog.core.clock import Clock, iso, parse_iso
from decklog.core.entries import (
    ActionResult,
    ActionStarted,
    Actor,
    EffectCompensated,
    NewEntry,
    ObligationCancelled,
    ObligationFulfilled,
    ObligationReleased,
    ProposalClosed,
)
from decklog.core.errors import Conflict, NotFound, StaleFence
from decklog.core.obligations import check_fence, claim, lease_live, open_obligation, reject_stale
from decklog.core.state import ObligationState, ProposalState, RunState, ScopeState
from decklog.core.store.ports import AppendResult, Leases, LogStore

log = logging.getLogger("decklog.core.actions.runner")

RUNNER = Actor.system("runner")
DESK_PURPOSES = ("action", "compensation")  # obligations the desk opened for one proposal only


class EvidenceSource(Protocol):
    """What the runner reads besides the scope's state before it acts (``DeskContext.evidence``)."""

    def __call__(
        self, scope: str, state: ScopeState, params: Mapping[str, Any], *, action: str = ...
    ) -> Awaitable[Evidence]: ...


Checkpoint = Callable[[str, RunAuthority], Awaitable[None]]
"""Awaited at ``after_claim``, ``before_call`` and ``after_call`` with the run's authority (a test or a harness
pauses or kills a holder there)."""


@dataclass(frozen=True)
class RunReport:
    """What ``execute`` did, for callers and logs: applied, refused, failed, not_applied, abandon_uncertain,
    skipped, stale (a newer holder took over), busy (someone holds the lease), deferred (the claim was given back:
    too little lease left to call; try again), not_runnable, expired, withdrawn."""

    status: str
    run_id: str = ""
    detail: str = ""


ResultOutcome = Literal["applied", "refused", "uncertain", "not_applied", "abandon_uncertain", "skipped", "failed"]


@dataclass(frozen=True)
class RunResult:
    outcome: ResultOutcome
    digest: str = ""
    response: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    reconciled: bool = False


@dataclass
class RunnerStats:
    claims: int = 0
    calls: int = 0
    stale: int = 0
    reconciles: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)


class Runner:
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
        leases: Leases | None = None,
    ) -> None:
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
        too_late = self._too_late_to_call(auth, executor)
        if too_late:
            return await self._finish(auth, auth.run_id, RunResult("not_applied", error=too_late), spec, prop)
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

    # -- the fence --------------------------------------------------------------------------------------------

    def _check(self, s: ScopeState, auth: RunAuthority) -> ObligationState | None:
        """The check every write after the claim makes inside its transaction, and the call before it is made: the
        obligation is still open and ``auth.fence`` is its current, live fence. Raises ``StaleFence`` otherwise."""
        if auth.obligation_id not in s.obligations:
            raise StaleFence(
                f"obligation {auth.obligation_id} is no longer open (a newer holder finished it)",
                fence=auth.fence,
                current=s.max_fence,
            )
        return check_fence(s, auth.obligation_id, auth.fence, self.clock.now())

    def _too_late_to_call(self, auth: RunAuthority, executor: Executor) -> str:
        """Why the call must not be made now (the lease ends before the call's timeout would), or ``""``."""
        left = (auth.lease_until - self.clock.now()).total_seconds()
        if left < executor.timeout:
            return f"the lease had {left:.1f}s left, less than the call's timeout ({executor.timeout:g}s): not called"
        return ""

    def _fenced(self, auth: RunAuthority, entries: Sequence[NewEntry]) -> Callable[[ScopeState], list[NewEntry]]:
        def decide(s: ScopeState) -> list[NewEntry]:
            self._check(s, auth)
            return list(entries)

        return decide

    async def _write(
        self, auth: RunAuthority, decide: Callable[[ScopeState], Sequence[NewEntry]], attempted: str
    ) -> AppendResult | None:
        """Append under the authority's fence; a stale fence is rejected and recorded (None is returned)."""
        try:
            return await self.store.append(auth.scope, decide)
        except StaleFence as exc:
            await self._reject(auth, exc, attempted)
            return None

    async def _reject(self, auth: RunAuthority, exc: StaleFence, attempted: str) -> None:
        self.stats.stale += 1
        log.info("runner: stale write on %s %s by fence %d: %s", auth.scope, auth.obligation_id, auth.fence, exc)
        await self.store.append(
            auth.scope,
            lambda s: reject_stale(
                s, exc, obligation_id=auth.obligation_id, holder=auth.holder, attempted=attempted, actor=RUNNER
            ),
        )

    async def _pause(self, point: str, auth: RunAuthority) -> None:
        if self.checkpoint is not None:
            await self.checkpoint(point, auth)

    # -- recording a run's end --------------------------------------------------------------------------------

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

    # -- reconciling ------------------------------------------------------------------------------------------

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
