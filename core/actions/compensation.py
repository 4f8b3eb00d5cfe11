"""Compensating: undo an applied run by proposing its configured compensation — a new proposal, approval and run
of its own, bound to the original run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from decklog.core.actions.context import DeskContext
from decklog.core.actions.outcomes import CompensationKind, CompensationOutcome
from decklog.core.actions.proposals import Proposals
from decklog.core.entries import ActionResult, ActionStarted, Actor, EffectCompensated
from decklog.core.errors import InvalidInput, NotFound


class Compensations:
    def __init__(self, ctx: DeskContext, proposals: Proposals) -> None:
        self.ctx = ctx
        self.proposals = proposals

    async def compensate(self, scope: str, run_id: str, actor: Actor, key: str = "") -> CompensationOutcome:
        """Propose the compensation of an applied run (see ``ActionDesk.compensate``)."""
        started: ActionStarted | None = None
        applied: ActionResult | None = None
        kinds = ["action_started", "action_result", "effect_compensated"]
        for entry in await self.ctx.store.read(scope, kinds=kinds):
            p = entry.payload
            if isinstance(p, ActionStarted) and p.run_id == run_id:
                started = p
            elif isinstance(p, ActionResult) and p.run_id == run_id and p.outcome == "applied":
                applied = p
            elif isinstance(p, EffectCompensated) and p.original_run == run_id:
                return CompensationOutcome(
                    CompensationKind.ALREADY_COMPENSATED, run_id, compensating_run=p.compensating_run
                )
        if started is None:
            raise NotFound(f"no run {run_id} in {scope}")
        if applied is None:
            return CompensationOutcome(CompensationKind.NOTHING_APPLIED, run_id)
        spec = self.ctx.catalog.get(started.action)
        if spec.compensation is None:
            return CompensationOutcome(CompensationKind.NOT_CONFIGURED, run_id, action=spec.name)
        state = await self.ctx.store.get_state(scope)
        pending = next((p for p in state.proposals.values() if p.compensates_run == run_id), None)
        if pending is not None:
            status = pending.status.replace("_", " ")
            return CompensationOutcome(CompensationKind.ALREADY_PROPOSED, run_id, proposal_id=pending.id, status=status)
        comp = spec.compensation
        params = {k: _template(v, started.params, applied.response) for k, v in comp.params.items()}
        pid, _existing = await self.proposals.record(
            scope,
            action=comp.action,
            params=params,
            rationale=f"compensate {run_id} ({spec.name}, effect {applied.effect_digest[:19]}) on request of {actor.label()}",
            obligation_id="",
            actor=actor,
            compensates_run=run_id,
            idempotency_key=key or None,
            text=f"Compensate run {run_id} ({spec.name})",
        )
        after = await self.ctx.store.get_state(scope)
        prop = after.proposals.get(pid)
        status = prop.status.replace("_", " ") if prop else "recorded"
        return CompensationOutcome(
            CompensationKind.PROPOSED, run_id, proposal_id=pid, action=comp.action, status=status
        )


def _template(value: Any, params: Mapping[str, Any], response: Mapping[str, Any]) -> Any:
    """``"{params.service}"`` / ``"{effect.rolled_back_from}"`` → the recorded value; other values pass as-is."""
    if not isinstance(value, str) or not (value.startswith("{") and value.endswith("}")):
        return value
    source, _, name = value[1:-1].partition(".")
    table = {"params": params, "effect": response}.get(source)
    if table is None or name not in table:
        raise InvalidInput(
            f"cannot fill {value}: the original run recorded no {source} field {name!r}", field="compensation"
        )
    return table[name]
