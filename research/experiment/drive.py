"""Driving a run: the timeline on the virtual clock, the arm's scheduling, fault recovery.

``rules`` is scheduled by decklog's own ``TurnScheduler`` (research/experiment/scheduled.py): its turns come when the
product's triggers, debounce and max wait say, and the driver only fires the alarms the clock has reached, jumping
the clock to the next alarm's (or the world's, or the next input's) due time when nothing is due now.

``central`` and ``nm`` take a turn on a scope only when the log says there is work: its newest entry is not a turn
that decided nothing, or an obligation is open with no live lease. ``nm`` lets one of M churning workers pick a
scope with work at random; ``central`` turns every scope with work in order and keeps its transcript warm. When no
scope has work, the virtual clock jumps to the world's next due time. After a kill (the lease of a claim it held)
and under ``suspend``, no agent runs for a while (``Run.away_until``). No jump of the clock passes the next
timeline input: the inputs arrive on time in every arm, and wait in the log while no agent runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from decklog.core.obligations import lease_live
from research.experiment import desk_hands
from research.experiment.desk_hands import deliver_resolutions
from research.experiment.hands import LEASE
from research.experiment.run import Killed, Run
from research.experiment.scheduled import RulesDispatch

MAX_STEPS = 60
SUSPEND = 30 * 60.0  # seconds with no agents (``suspend``)


async def has_work(run: Run, scope: str) -> bool:
    if not (await run.store.get_state(scope)).is_open:
        return False  # resolved: the turn runtime turns open incidents only
    last = await run.store.read_last(scope, limit=1)
    if last and not (last[0].kind == "agent_turn" and last[0].payload.model_dump()["outcome"] == "nothing"):
        return True
    state = await run.store.get_state(scope)
    now = run.clock.now()
    return any(not lease_live(ob, now) for ob in state.obligations.values())


async def _turn(run: Run, scope: str) -> bool:
    try:
        return await run.step(scope)
    except Killed as k:
        _recover(run, str(k))
        return True


def _recover(run: Run, point: str) -> float:
    """The killed agent is replaced (after its lease, when it died holding a claim: ``central`` and ``nm`` jump the
    clock; ``rules`` boots the replacement that much later). Returns the wait."""
    run.generation += 1
    run.agent = f"agent-{run.generation}"
    if run.spec.arm == "central":
        run.forget()  # a new orchestrator reloads the journal
    wait = LEASE + 1 if point in ("kill_after_claim", "lease_expiry") else 0.0
    if wait and run.spec.arm != "rules":
        run.away_until = run.clock.now() + timedelta(seconds=wait)
    return wait


async def _phase_faults(run: Run) -> float:
    """``suspend`` / ``replace_all`` at their phase. Returns how long the agents are away (``suspend``: 30 minutes;
    ``central`` and ``nm`` jump the clock, ``rules``' process is down that long while the inputs arrive on time)."""
    if not run.due() or not run.scopes:
        return 0.0
    if run.spec.fault == "suspend":
        run.fired = True
        await run.mark(run.scopes[0], "suspend")
        if run.spec.arm == "rules":
            return SUSPEND
        run.away_until = run.clock.now() + timedelta(seconds=SUSPEND)
    elif run.spec.fault == "replace_all":
        run.fired = True
        await run.mark(run.scopes[0], "replace_all")
        run.generation += 10
        run.agent = f"agent-{run.generation}"
        run.forget()
    return 0.0


async def _round(run: Run, work: list[str]) -> None:
    if run.spec.arm != "nm":
        for scope in work:
            await _turn(run, scope)
        return
    if run.rng.random() < 0.2:  # churn: a worker leaves, another joins
        run.generation += 1
    run.agent = f"worker-{run.rng.randrange(run.spec.workers)}-{run.generation}"
    scope = work[run.rng.randrange(len(work))]
    await _turn(run, scope)
    if run.spec.fault == "dup_delivery" and run.due():  # one work item to two workers, once (at the seed's step)
        run.fired = True
        await run.mark(scope, "dup_delivery")
        run.agent = f"worker-dup-{run.generation}"
        await _turn(run, scope)


async def _settle(run: Run, budget: int, until: datetime | None = None) -> None:
    """Rounds of turns on the scopes with work, up to ``budget``, until the next timeline input's time ``until``
    (None: until nothing is left to do)."""
    while budget > 0 and (until is None or run.clock.now() < until):
        budget -= 1
        await _phase_faults(run)
        work = [] if _away(run) else [s for s in run.scopes if await has_work(run, s)]
        if work:
            await _round(run, work)
            _advance(run, run.clock.now() + timedelta(seconds=5), until)
            await _resume_paused(run)
        elif not await _idle(run, until):
            return
        await deliver_resolutions(run)


def _away(run: Run) -> bool:
    return run.away_until is not None and run.clock.now() < run.away_until


def _advance(run: Run, to: datetime, until: datetime | None) -> None:
    """Move the clock to ``to``, never past ``until`` (the next timeline input)."""
    to = min(to, until) if until is not None else to
    if to > run.clock.now():
        run.clock.advance(seconds=(to - run.clock.now()).total_seconds())


async def _idle(run: Run, until: datetime | None = None) -> bool:
    """Nothing to do now: wait out the agents' absence, resume a paused holder, or jump to the world's next due
    time (never past ``until``). False when there is nothing to wait for before ``until``."""
    due = [t for t in (run.world.next_due(), run.away_until if _away(run) else None) if t is not None]
    if run.paused and not _away(run):
        await _resume_paused(run, force=True)
        return True
    if not due or (until is not None and min(due) > until):
        return False
    _advance(run, min(due), until)
    return True


async def _resume_paused(run: Run, *, force: bool = False) -> None:
    """A paused holder resumes (after another worker took over, or once nothing else is left to do)."""
    if not run.paused or not (force or run.world.applied.total()):
        return
    _scope, p = run.paused.pop()
    await desk_hands.resume(run, p)


async def _settle_rules(run: Run, d: RulesDispatch, until: datetime | None) -> None:
    """Fire every alarm due by ``until`` (None: until nothing is pending) in time order, one at a time; between
    firings: a killed process replaced (when its lease ran out, if it held a claim), the phase faults (``suspend``:
    no process for 30 minutes), a paused holder resumed, the world's resolutions. While no process runs, the inputs
    arrive on time and wait in the log, and the replacement re-arms from it."""
    while True:
        await d.quiet()
        if run.died:
            point, run.died = run.died, ""
            await d.die(_recover(run, point))
        if away := await _phase_faults(run):
            await d.die(away)
        if d.boot_due():  # killed, or a new population: a new process boots and re-arms from the log
            await d.boot()
            continue
        await _resume_paused(run)
        await deliver_resolutions(run)
        if await d.fire():
            continue
        due = [t for t in (d.next_due(), run.world.next_due()) if t is not None]
        nxt = min(due) if due else None
        if nxt is None or (until is not None and nxt > until):
            if until is None and run.paused:
                await _resume_paused(run, force=True)
                continue
            return
        if nxt <= run.clock.now():
            return  # nothing fired and nothing is later: settled
        run.clock.advance(seconds=(nxt - run.clock.now()).total_seconds())


async def _drive_rules(run: Run) -> None:
    d = RulesDispatch(run)
    await d.boot()
    start = run.clock.now()
    try:
        for step in sorted(run.spec.scenario.timeline, key=lambda s: s.at):
            target = start + timedelta(seconds=step.at)
            await _settle_rules(run, d, target)
            if target > run.clock.now():
                run.clock.advance(seconds=(target - run.clock.now()).total_seconds())
                await deliver_resolutions(run)
            await run.deliver(step)
        await _settle_rules(run, d, None)
    finally:
        await d.stop()


def next_at(run: Run, at: float, start: datetime) -> datetime | None:
    """When the timeline's next input after offset ``at`` is due (None: it was the last)."""
    later = sorted(s.at for s in run.spec.scenario.timeline if s.at > at)
    return start + timedelta(seconds=later[0]) if later else None


async def drive(run: Run) -> None:
    if run.spec.arm == "rules":
        await _drive_rules(run)
        return
    start = run.clock.now()
    for step in sorted(run.spec.scenario.timeline, key=lambda s: s.at):
        target = start + timedelta(seconds=step.at)
        if target > run.clock.now():
            run.clock.advance(seconds=(target - run.clock.now()).total_seconds())
            await deliver_resolutions(run)
        await run.deliver(step)
        if run.scopes:
            await _settle(run, 12, next_at(run, step.at, start))
    await _settle(run, MAX_STEPS)
    while run.paused:  # a holder still paused when the step budget ran out wakes up before the run ends
        await _resume_paused(run, force=True)
