"""The action desk's typed outcomes as the Slack user reads them (an ephemeral reply, with Slack emoji).

Core says what happened (``core.actions.outcomes``); this module is the one place that says how it looks in
Slack. :class:`SlackDesk` adapts the desk's ``decide`` / ``compensate`` to the Slack ports
(``adapters.slack.ports.Decide`` / ``Compensate``: keyword arguments in, the reply's text out).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from decklog.core.actions.outcomes import (
    ActionInfo,
    CompensationKind,
    CompensationOutcome,
    DecisionKind,
    DecisionOutcome,
    Proposed,
)
from decklog.core.entries import Actor


def decision_text(o: DecisionOutcome) -> str:
    """The reply to an approve / deny."""
    pid = o.proposal_id
    match o.kind:
        case DecisionKind.NOT_WAITING:
            return f"`{pid}` is not waiting for approval any more ({o.status.replace('_', ' ')})."
        case DecisionKind.REFUSED:
            verb = "approve" if o.approve else "deny"
            return f":no_entry: You may not {verb} `{pid}`: {o.reason}. (The attempt is recorded.)"
        case DecisionKind.EXPIRED:
            return (
                f":hourglass: `{pid}` {o.reason}; it is closed and nothing will run. Propose it again if still needed."
            )
        case DecisionKind.VOIDED:
            return (
                f":warning: Your approval of `{pid}` is void — {o.reason.split(' — ', 1)[-1]}. "
                f"It was re-evaluated as `{o.new_proposal_id}`: review it and approve again if it still makes sense."
            )
        case DecisionKind.DENIED:
            return f":no_entry_sign: Denied `{pid}`. Nothing will run."
        case DecisionKind.APPROVED_WAITING:
            need = o.approvals_required - o.approvals
            return (
                f":white_check_mark: Approved `{pid}` ({o.approvals} of {o.approvals_required}); "
                f"waiting for {need} more approver(s)."
            )
        case DecisionKind.APPROVED:
            return f":white_check_mark: Approved `{pid}`: {o.action} runs now; the result will be posted in the thread."
        case DecisionKind.CLOSED:
            return f"`{pid}` is closed ({o.outcome}{': ' + o.reason if o.reason else ''})."
        case DecisionKind.ALREADY_DENIED:
            return f"`{pid}` was already denied by {o.by}."
        case DecisionKind.DENIED_BY_POLICY:
            return f"`{pid}` was denied by policy: {o.reason}"
        case DecisionKind.DECIDED:
            return f"`{pid}` is not waiting for approval any more (it ran or was decided)."


def compensation_text(o: CompensationOutcome) -> str:
    """The reply to ``/incident compensate <run>``."""
    run = o.run_id
    match o.kind:
        case CompensationKind.ALREADY_COMPENSATED:
            return f"`{run}` was already compensated by `{o.compensating_run}`."
        case CompensationKind.NOTHING_APPLIED:
            return f"`{run}` has no applied effect to compensate (nothing was changed, or the outcome is unknown)."
        case CompensationKind.NOT_CONFIGURED:
            return f"`{run}` ({o.action}) has no compensation configured in decklog.toml; undo it by hand."
        case CompensationKind.ALREADY_PROPOSED:
            return f"The compensation of `{run}` is already proposed as `{o.proposal_id}` ({o.status})."
        case CompensationKind.PROPOSED:
            return f":leftwards_arrow_with_hook: Proposed `{o.proposal_id}` to compensate `{run}`: {o.action} — {o.status}."


class Desk(Protocol):
    """What :class:`SlackDesk` needs of ``core.actions.ActionDesk``."""

    def decide(
        self, scope: str | None, proposal_id: str, approve: bool, actor: Actor, reason: str = "", key: str = ""
    ) -> Awaitable[DecisionOutcome]: ...

    def compensate(self, scope: str, run_id: str, actor: Actor, key: str = "") -> Awaitable[CompensationOutcome]: ...

    def propose(
        self,
        scope: str,
        *,
        action: str,
        params: dict[str, Any],
        rationale: str,
        obligation_id: str | None,
        actor: Actor,
    ) -> Awaitable[str]: ...

    def make_proposal(
        self,
        scope: str,
        *,
        action: str,
        params: dict[str, Any],
        rationale: str,
        actor: Actor,
        idempotency_key: str | None = None,
    ) -> Awaitable[Proposed]: ...

    def listing(self) -> list[ActionInfo]: ...


class SlackDesk:
    """The desk's Slack ports (``decide``, ``compensate``): the same calls, answering with the text the person sees."""

    def __init__(self, desk: Desk) -> None:
        self.desk = desk

    async def decide(
        self, *, scope: str | None, proposal_id: str, approve: bool, actor: Actor, reason: str = "", key: str = ""
    ) -> str:
        return decision_text(await self.desk.decide(scope, proposal_id, approve, actor, reason, key))

    async def compensate(self, *, scope: str, run_id: str, actor: Actor, key: str = "") -> str:
        return compensation_text(await self.desk.compensate(scope, run_id, actor, key))

    async def propose(self, *, scope: str, action: str, params: dict[str, str], actor: Actor, key: str = "") -> str:
        """``run <action> key=value …``: the desk's policy decides (R1 runs, R2/R3 park, R4 is refused — an
        answer, recorded as a denied proposal, never an error). ``key`` makes a retried request answer the same."""
        made = await self.desk.make_proposal(
            scope,
            action=action,
            params=dict(params),
            rationale=f"requested by {actor.label()} in Slack",
            actor=actor,
            idempotency_key=key or None,
        )
        return proposed_text(action, made)

    async def actions(self) -> str:
        """``actions``: the catalog, with risk, parameters and availability."""
        return catalog_text(self.desk.listing())


def proposed_text(action: str, made: Proposed) -> str:
    """The reply to ``run <action>``, by what the policy decided."""
    if made.status == "denied":
        return f":no_entry: `{action}` was refused — {made.text}. Nothing will run; the refusal is recorded."
    if made.status == "waiting_for_approval":
        return f":hourglass_flowing_sand: {made.text}"
    return f":gear: {made.text}"


def catalog_text(actions: Sequence[ActionInfo]) -> str:
    if not actions:
        return "No actions are configured (`[[actions]]` in decklog.toml)."
    lines = ["*Actions* — `/incident run <action> key=value …`"]
    for a in actions:
        params = ", ".join(_param(name, spec) for name, spec in a.params_schema.items()) or "no parameters"
        avail = "available" if a.available else f"unavailable: {a.unavailable_reason}"
        if a.risk == "R4":
            avail = "never run: R4 is refused when asked for"
        lines.append(f"• `{a.name}` [{a.risk}] — {a.description} · {params} · _{avail}_")
    return "\n".join(lines)


def _param(name: str, spec: dict[str, Any]) -> str:
    kind = spec.get("type", "string")
    choices = "|".join(str(x) for x in spec.get("enum", []))
    derived = spec.get("from_incident")
    req = "" if spec.get("required") and not derived else "?"
    return f"`{name}{req}`:{choices or kind}" + (f" (from the incident's {derived})" if derived else "")
