"""After a turn: what the experiment does around decklog's own paths, held constant across arms.

The turn itself (research/experiment/reasoner.py) recorded its hypotheses, obligations and suggestions and handed its
proposals to the desk. Then, in this order:

- the scenario's read tools the turn asked for are answered as ``observation`` entries (``tool:<kind>``): evidence
  is looked up on request, never injected (the product's read tools leave no entry, so the experiment records them);
- each re-check the turn made (its ``action`` view read before ``propose_action``) is recorded as an observation
  naming the obligation and the conditions it re-checked, which the judge reads;
- the mutants' breakage: ``drop`` cancels obligations with no reason, ``no_claim`` calls the executor itself;
- the scripted on-call, in Slack (``Run.inputs``): clicks Approve on each waiting proposal, or denies a harmful one
  with its reason (and cancels its obligation with the reason, in the log: Slack has no command for that); accepts
  an agent's hold suggestion and records it as a decision; accepts a suggestion to resolve;
- the approved proposal of each obligation the turn re-checked runs on the desk (``desk.execute``, where the
  ``actions`` outbox sender would).

``executor_timeout`` has two variants, picked by the seed: the world applies the effect and drops the connection
(``lost``), or answers 502 before applying (``5xx``). Both leave an ``uncertain`` result, which the desk's runner
reconciles against the world before anything runs again; after a 5xx the obligation is released, not fulfilled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from decklog.core.agents.turn_parts import TurnResult
from decklog.core.entries import Actor, NewEntry
from research.experiment import desk_hands
from research.experiment.reasoner import HOLD, NOTES, RESOLVE

if TYPE_CHECKING:
    from research.experiment.run import Run

LEASE = 120.0


def _lookups(run: Run, names: list[str], me: Actor) -> list[NewEntry]:
    new = []
    for name in names:
        tool = next((t for t in run.spec.scenario.tools if t.name == name), None)
        if tool:
            data = {"tool": tool.name, "kind": tool.kind, "suspect": tool.suspect, "hold": tool.hold, "fix": tool.fix}
            payload = {"text": tool.answer, "source": f"tool:{tool.kind}", "data": data}
            new.append(NewEntry.make("observation", me, payload))
    return new


def _noted(run: Run, notes: list[dict[str, Any]], me: Actor) -> list[NewEntry]:
    new: list[NewEntry] = []
    for c in notes:
        if c["tool"] == "scenario_lookup":
            new += _lookups(run, c["names"], me)
        elif c["tool"] == "recheck":
            oid, conditions = c["obligation_id"], list(c["conditions"])
            data = {"checked": oid, "conditions": conditions}
            text = "conditions re-checked: " + "; ".join(conditions)
            new.append(NewEntry.make("observation", me, {"text": text, "source": "agent", "data": data}))
        elif c["tool"] == "cancel":  # its action already applied in a related incident: the reason cites it
            payload = {"obligation_id": c["obligation_id"], "reason": c["reason"]}
            new.append(NewEntry.make("obligation_cancelled", me, payload))
        elif c["tool"] == "drop":
            new += [
                NewEntry.make("obligation_cancelled", me, {"obligation_id": oid, "reason": ""})
                for oid in c["obligation_ids"]
            ]
    return new


async def after_turn(run: Run, scope: str, result: TurnResult) -> bool:
    out = result.output
    notes = [c for c in (out.tool_calls if out else []) if c.get("tool") in NOTES]
    me = Actor.agent(run.agent)
    new = _noted(run, notes, me)
    if new:
        await run.store.append(scope, new)
    for c in notes:
        if c["tool"] == "no_claim":
            await desk_hands.unclaimed(run, scope, c["obligation_id"])
    await desk_hands.approve_waiting(run, scope)
    await on_call(run, scope)
    for oid in dict.fromkeys(c["obligation_id"] for c in notes if c["tool"] == "recheck"):
        state = await run.store.get_state(scope)
        pid = next(
            (p.id for p in state.proposals.values() if p.obligation_id == oid and p.status in ("approved", "running")),
            "",
        )
        if pid and oid in state.obligations and run.spec.mutation != "no_claim":
            await desk_hands.execute(run, scope, pid)
    return bool(out and (out.intents or notes))


async def on_call(run: Run, scope: str) -> None:
    """The scripted on-call reads the agents' open suggestions, in Slack: a hold is accepted (Accept on its
    message) and recorded as their decision (``/incident decision``); a resolve is accepted, which resolves.
    Other suggestions (the alert router's "the alert resolved") are left to the agents: the on-call follows the
    agents, never ahead of them."""
    state = await run.store.get_state(scope)
    for sid, text in list(state.suggestions.items()):
        action = state.suggestion_actions.get(sid, "")
        if action == "resolve" and text == RESOLVE:
            await run.inputs.accept(scope, sid, desk_hands.APPROVER)
        elif text == HOLD:
            await run.inputs.accept(scope, sid, desk_hands.APPROVER)
            await run.inputs.record(scope, "decision", text, desk_hands.APPROVER)
