"""The ``joiner`` view: what a newcomer needs — state, roles and holders, last decisions, open obligations and
proposals, and a timeline whose omissions are summarised per kind."""

from __future__ import annotations

from core.views.compose import Part
from core.views.reader import Reader, listed
from core.views.shapes import alert_items, alert_summary, clip, header, obligation_json, proposal_items, roles

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
    "answer",
)


async def joiner(r: Reader) -> list[Part]:
    s = r.state
    got = await r.many({"decision": (("decision",), 3), "hypothesis": (("hypothesis",), 3)})
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
        Part("open_obligations", items=[obligation_json(o) for o in s.obligations.values()], keep=10**6),
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
