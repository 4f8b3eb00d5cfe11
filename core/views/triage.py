"""The ``triage`` view: goal, constraints, recent observations and suggestions, open obligations, firing alerts."""

from __future__ import annotations

from typing import Any

from core.entries import Entry, Suggestion
from core.views.compose import Part
from core.views.reader import Reader, listed
from core.views.shapes import alert_items, alert_summary, at_text, compact, header, obligation_json


async def triage(r: Reader) -> list[Part]:
    s = r.state
    got = await r.many(
        {
            "goal": (("goal",), 3),
            "constraint": (("constraint",), 5),
            "observation": (("observation",), 10),
            "suggestion": (("suggestion",), 5),
        }
    )
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
    ]


def _suggestion(r: Reader, e: Entry, open_ids: set[str]) -> dict[str, Any]:
    return {
        **r.brief(e),
        "id": e.payload.suggestion_id if isinstance(e.payload, Suggestion) else "",
        "action": e.payload.action if isinstance(e.payload, Suggestion) else "",
        "open": isinstance(e.payload, Suggestion) and e.payload.suggestion_id in open_ids,
    }
