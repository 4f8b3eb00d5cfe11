"""The hands on decklog's real action desk (``core/actions``): the agent proposes through its ``propose_action``
tool (the desk is the turn runtime's ``Proposer``); the scripted approver decides in Slack (the experiment's
``Inputs``: Approve clicked on the proposal's message, ``deny <id> <reason>``), through decklog's Slack receiver
and the desk's decide port; the desk's ``Runner`` claims, re-checks its safety conditions, calls
the world through the ``http`` executor (``research/experiment/world_http.py``), reconciles an uncertain outcome and records
the result under its fence.

Faults reach inside the runner through its ``checkpoint`` hook: ``kill_after_claim`` at ``after_claim``;
``lease_expiry`` pauses the holder at ``before_call`` (its run goes on in a task that waits on a gate) until
another holder has taken over. ``executor_timeout`` is the world's (``Run.executor_fault``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from decklog.core.actions.executor import ExecutionRequest
from decklog.core.actions.run_authority import RunAuthority, idempotency_key, new_run_id
from decklog.core.actions.runner import RunReport
from decklog.core.entries import Actor, NewEntry
from decklog.core.errors import Conflict, NotFound
from research.experiment.scenario import action_key

if TYPE_CHECKING:
    from decklog.core.actions import ActionDesk
    from research.experiment.run import Run

APPROVER = Actor.human("U0APPROVER", "scripted-approver")


def _desk(run: Run) -> ActionDesk:
    assert run.desk is not None
    return run.desk


async def checkpoint(run: Run, point: str, auth: RunAuthority) -> None:
    """The runner's checkpoint: the experiment's kill and pause points inside a real run."""
    if point == "after_claim":
        await run.maybe("kill_after_claim", auth.scope)
    if point == "before_call" and run.spec.fault == "lease_expiry" and run.due() and run.pausing is not None:
        run.fired = True
        await run.mark(auth.scope, "lease_expiry")
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        run.pausing.set_result(gate)
        await gate  # the paused holder: resumes when the driver opens the gate, after a takeover


async def approve_waiting(run: Run, scope: str) -> None:
    """The scripted approver, in Slack: clicks Approve on each waiting proposal's message (double-clicks under
    ``dup_delivery``), or denies a harmful one with its reason (``deny <id> <reason>``) and cancels its obligation
    with the reason."""
    state = await run.store.get_state(scope)
    harmful = {h.key() for h in run.spec.scenario.world.harmful}
    for p in list(state.proposals.values()):
        if p.status != "waiting_for_approval":
            continue
        key = action_key(p.action, dict(p.params))
        if key not in harmful:
            await run.inputs.approve(scope, p.id, APPROVER, clicks=2 if run.spec.fault == "dup_delivery" else 1)
            continue
        await run.inputs.deny(scope, p.id, APPROVER, key)
        if p.obligation_id:
            cancel = {"obligation_id": p.obligation_id, "reason": f"denied by {APPROVER.name}"}
            try:
                await run.store.append(scope, [NewEntry.make("obligation_cancelled", APPROVER, cancel)])
            except (Conflict, NotFound):
                pass


async def execute(run: Run, scope: str, pid: str) -> RunReport | None:
    """The actions sender's call: ``desk.execute``. A holder paused at ``before_call`` leaves its run in a task
    (``run.paused``) and this turn dies (``lease_expiry``)."""
    task = asyncio.ensure_future(_desk(run).execute(scope, pid, receipt=f"experiment:{run.agent}"))
    run.pausing = asyncio.get_running_loop().create_future()
    try:
        await asyncio.wait({task, run.pausing}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            run.paused.append((scope, {"task": task, "gate": run.pausing.result()}))
            raise run.killed("lease_expiry")
    finally:
        run.pausing = None
    report = task.result()
    await _resolutions(run)
    return report


async def resume(run: Run, paused: dict[str, Any]) -> None:
    """The paused holder wakes up and carries on with its run (its fence is stale by now, unless fences are off)."""
    paused["gate"].set_result(None)
    await paused["task"]
    await _resolutions(run)


async def unclaimed(run: Run, scope: str, oid: str) -> None:
    """The ``no_claim`` mutant: it goes around the desk and calls the executor itself, with no claim (fence 0)."""
    ob = (await run.store.get_state(scope)).obligations.get(oid)
    if ob is None:
        return
    action, params = ob.action, dict(ob.params)
    me, run_id = Actor.agent(run.agent), new_run_id()
    idem = idempotency_key(scope, run_id, 0)
    started = {"run_id": run_id, "action": action, "obligation_id": oid, "fence": 0, "params": params}
    await run.store.append(scope, [NewEntry.make("action_started", me, {**started, "idempotency_key": idem})])
    executor = _desk(run).runner.executors[action]
    got = await executor.execute(ExecutionRequest(action, params, scope, run_id, 0, idem))
    outcome = got.outcome if got.outcome != "failed" else "not_applied"
    res = {"run_id": run_id, "action": action, "outcome": outcome, "fence": 0, "response": got.response}
    done = {"obligation_id": oid, "fence": 0, "run_id": run_id}
    await run.store.append(
        scope, [NewEntry.make("action_result", me, res), NewEntry.make("obligation_fulfilled", me, done)]
    )
    await _resolutions(run)


async def _resolutions(run: Run) -> None:
    if run.world.mitigated:
        run.world.schedule_resolution(run.clock.now())
    await deliver_resolutions(run)


async def deliver_resolutions(run: Run) -> None:
    """The world resolves its alerts once a mitigation has had ``resolve_after`` seconds to work."""
    now = run.clock.now()
    for fp in run.world.due_resolutions(now):
        event_id = f"{fp}:resolved:world:{now.timestamp():.0f}"  # its own notification each time it clears
        body = {"title": fp, "fingerprint": fp, "status": "resolved", "event_id": event_id}
        await run.inputs.alert(body)
