"""The ``joiner`` view: what a newcomer needs — state, roles and holders, last decisions, open obligations and
proposals, and a timeline whose omissions are summarised per kind."""

from __future__ import annotations

from typing import Any

from decklog.core.views.compose import Part
from decklog.core.views.reader import Reader, listed
from decklog.core.views.shapes import alert_items, alert_summary, clip, header, obligation_json, proposal_items, roles

# Kinds a newcomer's timeline shows (bookkeeping such as agent_turn or thread_linked is left out on purpose).
TIMELINE_KINDS = (
    "declared",
    "goal",
    "constraint",
    "observation",
    "hypothesis",
    "decision",
    "message",
    "evidence",
    "status_changed",
    "severity_changed",
    "role_assigned",
    "scope_linked",
    "obligation_opened",
    "obligation_fulfilled",
    "obligation_cancelled",
    "proposal",
    "approval",
    "proposal_closed",
    "action_started",
    "action_result",
    "effect_compensated",
    "verification",
    "suggestion",
    "suggestion_feedback",
    "retracted",
    "answer",
    "finding_answer",
)


async def joiner(r: Reader) -> list[Part]:
    s = r.state
    got = await r.many(
        {
            "decision": (("decision",), 3),
            "hypothesis": (("hypothesis",), 3),
            "goal": (("goal",), 1),
            "constraint": (("constraint",), 5),
            "finding_answer": (("finding_answer",), 10),
        }
    )
    obligations = await _obligations_with_evidence(r)
    timeline = [e for e in await r.recent(30) if e.kind in TIMELINE_KINDS][-20:]
    holders = {o.id: o.holder for o in s.obligations.values() if o.holder}
    breakdown = {k: n for k, n in s.kind_counts.items() if k in TIMELINE_KINDS}
    open_suggestions = [
        {"id": sid, "text": clip(text, 160), "action": s.suggestion_actions.get(sid, "")}
        for sid, text in s.suggestions.items()
    ]
    return [
        Part("scope", value=header(s)),
        Part("roles", value=roles(s)),
        Part("holders", value=holders),
        Part("alerts", value=alert_summary(s)),
        Part("goal", value=r.brief(got["goal"][-1], limit=300) if got["goal"] else {}),
        listed(r, "constraints", got["constraint"], keep=1, priority=45, kind="constraint"),
        Part("open_obligations", items=obligations, keep=10**6),
        Part(
            "last_decisions",
            items=[r.brief(e, limit=300) for e in got["decision"]],
            keep=1,
            priority=60,
            noun="decisions",
            total=r.count("decision"),
        ),
        Part("waiting_proposals", items=proposal_items(s), keep=10**6),
        listed(r, "hypotheses", got["hypothesis"], keep=1, priority=40, kind="hypothesis"),
        listed(r, "answers", got["finding_answer"], keep=1, priority=38, kind="finding_answer"),
        Part("firing_alerts", items=alert_items(s, status="firing"), keep=2, priority=30, noun="firing alerts"),
        Part("open_suggestions", items=open_suggestions, keep=1, priority=35, noun="open suggestions"),
        Part(
            "timeline",
            items=[r.brief(e, limit=160) for e in timeline],
            keep=3,
            priority=10,
            noun="entries",
            total=sum(breakdown.values()) if breakdown else None,
            breakdown=breakdown,
        ),
    ]


async def _obligations_with_evidence(r: Reader) -> list[dict[str, Any]]:
    """Each open obligation with the briefs of what it was opened on (the entries its ``obligation_opened``
    points to)."""
    obs = sorted(r.state.obligations.values(), key=lambda o: o.opened_seq)
    opened = {e.seq: e for e in await r.seqs([o.opened_seq for o in obs if o.opened_seq])}
    chain = await r.chains(list(opened.values()), depth=1)
    out = []
    for o in obs:
        item = obligation_json(o)
        entry = opened.get(o.opened_seq)
        evidence = [r.brief(chain[x], limit=160) for x in (entry.refs if entry else ()) if x in chain]
        if evidence:
            item["evidence"] = evidence
        out.append(item)
    return out
