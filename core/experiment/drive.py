"""Driving a run: the timeline on the virtual clock, the arm's scheduling, fault recovery."""

from __future__ import annotations

from datetime import timedelta

from core.experiment.run import LEASE, Killed, Run

MAX_STEPS = 60


async def _turn(run: Run, scope: str) -> bool:
    try:
        return await run.step(scope)
    except Killed as k:
        run.generation += 1
        run.agent = f"agent-{run.generation}"
        if run.spec.arm == "central":
            run.transcripts.clear()  # a new orchestrator reloads the journal
        if str(k) in ("kill_after_claim", "lease_expiry"):
            run.clock.advance(seconds=LEASE + 1)
        return True


async def _phase_faults(run: Run) -> None:
    if run.fired or run.steps < run.fault_at or not run.scopes:
        return
    if run.spec.fault == "suspend":
        run.fired = True
        await run.mark(run.scopes[0], "suspend")
        run.clock.advance(minutes=30)
    elif run.spec.fault == "replace_all":
        run.fired = True
        await run.mark(run.scopes[0], "replace_all")
        run.generation += 10
        run.agent = f"agent-{run.generation}"
        run.transcripts.clear()


async def _settle(run: Run, budget: int) -> None:
    idle = 0
    while budget > 0 and idle < 2 * max(1, len(run.scopes)):
        budget -= 1
        await _phase_faults(run)
        if run.spec.arm == "nm":
            if run.rng.random() < 0.2:  # churn: a worker leaves, another joins
                run.generation += 1
            run.agent = f"worker-{run.rng.randrange(run.spec.workers)}-{run.generation}"
            scope = run.scopes[run.rng.randrange(len(run.scopes))]
            progressed = await _turn(run, scope)
            if run.spec.fault == "dup_delivery" and not run.fired:  # one work item to two workers
                run.agent = f"worker-dup-{run.generation}"
                await _turn(run, scope)
        else:
            progressed = False
            for scope in list(run.scopes):
                progressed = await _turn(run, scope) or progressed
        idle = 0 if progressed else idle + 1
        run.clock.advance(seconds=5)
        await _resume_paused(run)


async def _resume_paused(run: Run) -> None:
    if not run.paused or run.world.applied.total() == 0:
        return
    scope, p = run.paused.pop()
    await run.execute(scope, p["oid"], p["fence"], p["action"], p["params"], p["agent"])


async def drive(run: Run) -> None:
    start = run.clock.now()
    for step in sorted(run.spec.scenario.timeline, key=lambda s: s.at):
        target = start + timedelta(seconds=step.at)
        if target > run.clock.now():
            run.clock.advance(seconds=(target - run.clock.now()).total_seconds())
        await run.deliver(step)
        if run.scopes:
            await _settle(run, 8)
    await _settle(run, MAX_STEPS)
    while run.paused:
        await _resume_paused(run) if run.world.applied.total() else run.paused.clear()
