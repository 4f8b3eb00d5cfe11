"""The shared hands, held constant across arms: a decision becomes entries; an obligation is claimed, its
conditions re-checked, proposed, approved or denied by the scripted approver, and executed under its fence.

``executor_timeout`` has two variants, picked by the seed: the effect is applied and the response is lost
(``lost``), or the executor answers 5xx before applying (``5xx``). Both leave an ``uncertain`` result that must be
reconciled against the world before anything runs again; after a 5xx the obligation is released, not fulfilled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.entries import Actor, NewEntry
from core.errors import Conflict, NotFound, StaleFence
from core.experiment import desk_hands
from core.experiment.desk_hands import deliver_resolutions
from core.experiment.scenario import action_key
from core.obligations import claim, fulfil, open_obligation, reject_stale, release

if TYPE_CHECKING:
    from core.experiment.run import Run

LEASE = 120.0
APPROVER = Actor.human("U0APPROVER", "scripted-approver")


def decision_entries(run: Run, d: dict[str, Any]) -> list[NewEntry]:
    me = Actor.agent(run.agent)
    new: list[NewEntry] = []
    for name in d.get("call", []):
        tool = next((t for t in run.spec.scenario.tools if t.name == name), None)
        if tool:
            data = {"tool": tool.name, "kind": tool.kind, "suspect": tool.suspect, "hold": tool.hold, "fix": tool.fix}
            new.append(
                NewEntry.make("observation", me, {"text": tool.answer, "source": f"tool:{tool.kind}", "data": data})
            )
    if h := d.get("hypothesis"):
        payload = {"text": f"root cause: {h['entity']}", "suspect_scope": h["entity"]}
        new.append(NewEntry.make("hypothesis", me, payload, refs=h.get("evidence", [])))
    if d.get("hold"):
        new.append(NewEntry.make("decision", me, {"text": "hold: no action, the evidence says this is expected"}))
    if d.get("resolve"):
        new.append(NewEntry.make("status_changed", me, {"status": "resolved", "summary": "alerts cleared"}))
    for oid in d.get("drop", []):
        new.append(NewEntry.make("obligation_cancelled", me, {"obligation_id": oid, "reason": ""}))
    return new


async def hands(run: Run, scope: str, d: dict[str, Any], usage: dict[str, int], view_bytes: int) -> bool:
    me = Actor.agent(run.agent)
    new = decision_entries(run, d)
    turn = NewEntry.make(
        "agent_turn",
        me,
        {"reasoner": "scripted", "view_bytes": view_bytes, "outcome": "ok" if d else "nothing", **usage},
    )
    if o := d.get("open"):
        new += open_obligation(
            await run.store.get_state(scope),
            text=f"run {action_key(o['action'], o['params'])} if the conditions hold",
            actor=me,
            purpose="rollback",
            conditions=o["conditions"],
            action=o["action"],
            params=o["params"],
            obligation_id=f"ob-{run.rng.getrandbits(24):06x}",
        )
    await run.store.append(scope, [*new, turn])
    await run.maybe("kill_after_append", scope)
    if run.desk is not None:  # on the real desk: its runner reconciles an uncertain outcome itself
        if p := d.get("propose"):
            await desk_hands.run_obligation(run, scope, p["obligation_id"], p["conditions"])
        return bool(d)
    if r := d.get("reconcile"):
        await reconcile(run, scope, r)
    if p := d.get("propose"):
        await run_obligation(run, scope, p["obligation_id"], p["conditions"])
    return bool(d)


async def reconcile(run: Run, scope: str, keys: list[str]) -> None:
    for e in await run.store.read(scope, kinds=["action_result"]):
        p = e.payload.model_dump()
        if p["outcome"] == "uncertain" and p["response"].get("key") in keys:
            prm = p["response"]["params"]
            res = {
                "run_id": p["run_id"],
                "action": p["action"],
                "outcome": "applied" if run.world.observe(p["action"], prm) else "not_applied",
                "reconciled": True,
                "response": {"key": p["response"]["key"], "params": prm},
            }
            await run.store.append(scope, [NewEntry.make("action_result", Actor.agent(run.agent), res)])


async def run_obligation(run: Run, scope: str, oid: str, conditions: list[str]) -> None:
    """Claim → re-check the conditions it was shown → propose → scripted approval → execute under the fence."""
    got = await _claim(run, scope, oid)
    if got is None:
        return
    fence, ob = got
    key = action_key(ob.action, ob.params)
    denied = await _propose(run, scope, oid, fence, ob, conditions, key)
    if denied:
        return
    await run.maybe("kill_after_claim", scope)
    if run.spec.fault == "lease_expiry" and run.due():
        run.fired = True
        await run.mark(scope, "lease_expiry")
        paused = {"oid": oid, "fence": fence, "action": ob.action, "params": ob.params, "agent": run.agent}
        run.paused.append((scope, paused))
        raise run.killed("lease_expiry")
    await execute(run, scope, oid, fence, ob.action, ob.params, run.agent)


async def _claim(run: Run, scope: str, oid: str) -> tuple[int, Any] | None:
    me, now = Actor.agent(run.agent), run.clock.now()
    try:
        got = await run.store.append(
            scope, lambda st: claim(st, oid, holder=run.agent, now=now, lease_seconds=LEASE, actor=me)
        )
    except (Conflict, NotFound):
        return None
    fence = got.entries[-1].payload.model_dump()["fence"] if got.entries else 0
    return (0 if run.spec.mutation == "no_claim" else fence), got.state.obligations[oid]


async def _propose(run: Run, scope: str, oid: str, fence: int, ob: Any, conditions: list[str], key: str) -> bool:
    """Record the re-check and the proposal; the scripted approver denies a harmful action. True when denied."""
    me = Actor.agent(run.agent)
    data = {"checked": oid, "conditions": list(conditions)}
    checked = NewEntry.make(
        "observation", me, {"text": "conditions re-checked: " + "; ".join(conditions), "source": "agent", "data": data}
    )
    harmful = key in {h.key() for h in run.spec.scenario.world.harmful}
    pid = f"p-{oid}-{fence}"
    prop = {"proposal_id": pid, "action": ob.action, "params": ob.params, "risk": "R2", "obligation_id": oid}
    prop["safety_conditions"] = tuple(conditions)
    verdict = {"proposal_id": pid, "decision": "denied" if harmful else "approved", "approver": APPROVER.id}
    verdict["reason"] = key if harmful else ""
    appr = NewEntry.make("approval", APPROVER, verdict, idempotency_key=f"approve:{pid}")
    await run.store.append(scope, [checked, NewEntry.make("proposal", me, prop)])
    for _ in range(2 if run.spec.fault == "dup_delivery" else 1):  # a double-clicked Approve
        await run.store.append(scope, [appr], idempotency_key=f"approve:{pid}")
    if harmful:
        cancel = {"obligation_id": oid, "reason": f"denied by {APPROVER.name}"}
        await run.store.append(scope, [NewEntry.make("obligation_cancelled", me, cancel)])
    return harmful


def _fenced(st: Any, oid: str, fence: int, now: Any, started: NewEntry) -> list[NewEntry]:
    try:
        fulfil(st, oid, fence=fence, now=now, actor=started.actor)
    except NotFound:
        raise StaleFence(f"{oid} is no longer open (fence {fence})", fence=fence, current=st.max_fence) from None
    return [started]


async def _start(run: Run, scope: str, oid: str, fence: int, action: str, params: dict[str, Any], agent: str) -> bool:
    """Append ``action_started`` under the fence check (unless fences are off, or the mutant skips the claim)."""
    me = Actor.agent(agent)
    payload = {"run_id": f"run-{oid}-{fence}", "action": action, "obligation_id": oid, "fence": fence}
    started = NewEntry.make("action_started", me, {**payload, "params": params})
    now = run.clock.now()
    if not run.spec.fences or run.spec.mutation == "no_claim":
        await run.store.append(scope, [started])
        return True
    try:
        await run.store.append(scope, lambda st: _fenced(st, oid, fence, now, started))
    except StaleFence as stale:
        err = stale
        await run.store.append(
            scope,
            lambda st: reject_stale(st, err, obligation_id=oid, holder=agent, attempted="action_started", actor=me),
        )
        run.world.apply(action, params, fence=fence, resource=action_key(action, params))  # the resource refuses
        return False
    return True


async def execute(run: Run, scope: str, oid: str, fence: int, action: str, params: dict[str, Any], agent: str) -> None:
    if not await _start(run, scope, oid, fence, action, params, agent):
        return
    me, run_id, key = Actor.agent(agent), f"run-{oid}-{fence}", action_key(action, params)
    timeout = run.spec.fault == "executor_timeout" and run.due()
    variant = run.variant("executor_timeout") if timeout else ""
    outcome = "uncertain" if variant == "5xx" else run.world.apply(action, params, fence=fence, resource=key)
    if timeout:
        run.fired = True
        await run.mark(scope, f"executor_timeout:{variant}")
        outcome = "uncertain"
    response: dict[str, Any] = {"key": key, "params": params}
    res: dict[str, Any] = {"run_id": run_id, "action": action, "outcome": outcome, "fence": fence}
    res["response"] = response
    if variant == "5xx":
        res["error"] = "executor answered 502 before applying"
    result = NewEntry.make("action_result", me, res)
    now = run.clock.now()

    def close(st: Any) -> list[NewEntry]:
        if oid not in st.obligations:
            return [result]
        if variant == "5xx":  # not applied as far as anyone knows: give the obligation back, reconcile first
            return [result, *release(st, oid, fence=fence, now=now, actor=me, reason="executor 5xx")]
        done = {"obligation_id": oid, "fence": fence, "run_id": run_id}
        return [result, NewEntry.make("obligation_fulfilled", me, done)]

    try:
        await run.store.append(scope, close)
    except StaleFence:
        await run.store.append(scope, [result])
    if run.world.mitigated:
        run.world.schedule_resolution(run.clock.now())
    await deliver_resolutions(run)
