"""The shared hands, held constant across arms: a decision becomes entries (tool answers looked up, a hypothesis,
an obligation, a hold, a resolution); a ``propose`` goes to decklog's action desk (``desk_hands``).

``executor_timeout`` has two variants, picked by the seed: the world applies the effect and drops the connection
(``lost``), or answers 502 before applying (``5xx``). Both leave an ``uncertain`` result, which the desk's runner
reconciles against the world before anything runs again; after a 5xx the obligation is released, not fulfilled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.entries import Actor, NewEntry
from core.experiment import desk_hands
from core.experiment.scenario import action_key
from core.obligations import open_obligation

if TYPE_CHECKING:
    from core.experiment.run import Run

LEASE = 120.0


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
    # ``reconcile`` needs nothing here: on the desk, the runner reconciles an uncertain outcome within its run.
    if p := d.get("propose"):
        await desk_hands.run_obligation(run, scope, p["obligation_id"], p["conditions"])
    return bool(d)
