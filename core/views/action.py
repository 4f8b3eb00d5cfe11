"""The ``action`` view: one obligation with its evidence, safety conditions, proposals, runs and history, and the
runs of the same action on the same target in related incidents (``related_actions``, core/views/related.py; absent
when none ran)."""

from __future__ import annotations

from decklog.core.entries import ActionResult, ActionStarted, AgentTurn, Approval, Entry, ProposalClosed, ProposalMade
from decklog.core.state import ObligationState, ScopeState
from decklog.core.views.compose import Part
from decklog.core.views.reader import Reader
from decklog.core.views.related import related_actions, target_of
from decklog.core.views.shapes import alert_items, compact, header, obligation_json, proposal_items, with_evidence

_HISTORY_KINDS = ("proposal", "proposal_closed", "approval", "action_started", "action_result")


def pick_obligation(
    state: ScopeState, obligation_id: str | None, *, purpose: str | None = None
) -> ObligationState | None:
    """The obligation a view is about: the given id, else the oldest open one (of ``purpose``; with an action)."""
    if obligation_id:
        return state.obligations.get(obligation_id)
    candidates = [
        o
        for o in state.obligations.values()
        if (purpose is None and o.action) or (purpose is not None and o.purpose == purpose)
    ]
    return min(candidates, key=lambda o: o.opened_seq) if candidates else None


async def action(r: Reader, obligation_id: str | None) -> list[Part]:
    s = r.state
    ob = pick_obligation(s, obligation_id)
    parts = [Part("scope", value=header(s))]
    if ob is None:
        missing = f"no open obligation {obligation_id}" if obligation_id else "no open obligation with an action"
        return [*parts, Part("obligation", value={"missing": missing})]
    opened = await r.seqs([ob.opened_seq])
    chain = await r.chains(opened)
    got = await r.many(
        {"history": (_HISTORY_KINDS, 60), "suggestion": (("suggestion",), 20), "agent_turn": (("agent_turn",), 30)}
    )
    related = _related(s, ob, got["history"])
    related.extend(e for e in got["suggestion"] if ob.opened_seq and ob.opened_seq in e.refs)
    related.sort(key=lambda e: e.seq)
    handed = [  # turns that handed a proposal for this obligation to the action desk (whatever the desk did)
        e.seq
        for e in got["agent_turn"]
        if isinstance(e.payload, AgentTurn)
        and any(c.get("tool") == "propose" and c.get("obligation_id") == ob.id for c in e.payload.tool_calls)
    ]
    elsewhere = await related_actions(r, target=(ob.action, target_of(ob.params))) if ob.action else []
    return [
        *parts,
        Part("obligation", value=obligation_json(ob)),
        Part("opened", value=with_evidence(opened[0], chain, cache=r.cache) if opened else {}),
        Part("safety_conditions", value=list(ob.conditions)),
        Part(
            "pending_proposals",
            items=[p for p in proposal_items(s) if p.get("obligation_id") == ob.id],
            keep=10**6,
        ),
        Part(
            "runs",
            value=[
                compact({"run_id": run.run_id, "action": run.action, "fence": run.fence, "outcome": run.outcome})
                for run in s.runs.values()
                if run.obligation_id == ob.id
            ],
        ),
        Part("history", items=[r.brief(e) for e in related], keep=4, priority=30, noun="history entries"),
        *([Part("related_actions", items=elsewhere, keep=1, priority=45, noun="related actions")] if elsewhere else []),
        Part("proposed_in_turns", value=handed),
        Part("firing_alerts", items=alert_items(s, status="firing"), keep=3, priority=40, noun="firing alerts"),
    ]


def _related(s: ScopeState, ob: ObligationState, history: list[Entry]) -> list[Entry]:
    """The proposals, approvals, closings, starts and results of ``history`` that concern ``ob``."""
    proposal_ids = {e.payload.proposal_id for e in history if isinstance(e.payload, ProposalMade)} | {
        p.id for p in s.proposals.values() if p.obligation_id == ob.id
    }
    related: list[Entry] = []
    run_ids: set[str] = set()
    for e in history:
        p = e.payload
        mine = isinstance(p, ProposalMade) and p.obligation_id == ob.id
        if mine or (isinstance(p, ProposalClosed | Approval) and p.proposal_id in proposal_ids):
            related.append(e)
        elif isinstance(p, ActionStarted) and (p.obligation_id == ob.id or p.proposal_id in proposal_ids):
            related.append(e)
            run_ids.add(p.run_id)
        elif isinstance(p, ActionResult) and p.run_id in run_ids:
            related.append(e)
    return related
