"""The ``triage`` view: goal, constraints, what people said (newest first), recent observations and suggestions,
open obligations, firing alerts."""

from __future__ import annotations

from typing import Any

from decklog.core.entries import Entry, ProposalMade, Suggestion
from decklog.core.views.compose import Part
from decklog.core.views.reader import Reader, listed
from decklog.core.views.shapes import alert_items, alert_summary, at_text, compact, header, obligation_json

HUMAN_MESSAGES = 10  # the latest messages people wrote that triage shows (older ones: an omission line)


async def triage(r: Reader) -> list[Part]:
    s = r.state
    got = await r.many(
        {
            "goal": (("goal",), 3),
            "constraint": (("constraint",), 5),
            "observation": (("observation",), 10),
            "suggestion": (("suggestion",), 5),
            "message": (("message",), HUMAN_MESSAGES + 5),
            "proposal": (("proposal",), 20),
        }
    )
    last_proposed = {e.payload.action: at_text(e.at) for e in got["proposal"] if isinstance(e.payload, ProposalMade)}
    said = [e for e in got["message"] if e.actor.type == "human"][-HUMAN_MESSAGES:]
    human = await r.seqs([s.last_human_seq]) if s.last_human_seq else []
    activity = compact(
        {
            "last_human_seq": s.last_human_seq,
            "last_human_at": at_text(human[0].at) if human else "",
            "last_turn_seq": s.last_turn_seq,
        }
    )
    open_ids = set(s.suggestions)
    return [
        Part("scope", value=header(s)),
        Part("alerts", value=alert_summary(s)),
        listed(r, "goals", got["goal"], keep=1, priority=80, kind="goal"),
        listed(r, "constraints", got["constraint"], keep=2, priority=70, kind="constraint"),
        Part("open_obligations", items=[obligation_json(o) for o in s.obligations.values()], keep=10**6),
        Part("firing_alerts", items=alert_items(s, status="firing"), keep=3, priority=40, noun="firing alerts"),
        Part(
            "human_messages",
            items=[r.brief(e, limit=300) for e in said],
            keep=3,
            priority=20,
            noun="messages",
            total=max(len(said), r.count("message") - (len(got["message"]) - len(said))),
            newest_first=True,
        ),
        listed(r, "observations", got["observation"], keep=3, priority=10, kind="observation"),
        Part(
            "suggestions",
            items=[_suggestion(r, e, open_ids) for e in got["suggestion"]],
            keep=2,
            priority=30,
            noun="suggestions",
            total=r.count("suggestion"),
        ),
        Part("activity", value=activity),
        Part("last_proposed", value=last_proposed),
    ]


def _suggestion(r: Reader, e: Entry, open_ids: set[str]) -> dict[str, Any]:
    return {
        **r.brief(e),
        "id": e.payload.suggestion_id if isinstance(e.payload, Suggestion) else "",
        "action": e.payload.action if isinstance(e.payload, Suggestion) else "",
        "open": isinstance(e.payload, Suggestion) and e.payload.suggestion_id in open_ids,
    }
