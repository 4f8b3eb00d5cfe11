"""Catch-up: what a person joining an incident needs, as a short text built from the joiner view.

Deterministic: the same view and the same ``now`` give the same text, with no model. With a model, the same view
is what the bounded summarising call reads (adapters/anthropic/catchup.py). Sections: the goal, status and
severity, what is suspected, what was decided, what is open, who holds which role, what changed in the last
``recent_minutes`` minutes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from decklog.core.clock import parse_iso
from decklog.core.views.compose import View

RECENT_MINUTES = 30
_LIST = 3  # items per list in the text


def catch_up(view: View, now: datetime, *, recent_minutes: int = RECENT_MINUTES) -> str:
    """The catch-up text of a joiner view (``view.name == "joiner"``)."""
    sec = view.sections
    head = sec.get("scope") or {}
    sev = f"SEV{head['severity']}" if head.get("severity") else "no severity"
    lines = [f"*Catch-up on {head.get('title', view.scope)}* (`{view.scope}`): {head.get('status', '?')}, {sev}"]
    goal = (sec.get("goal") or {}).get("text", "")
    lines.append(f"*Goal:* {_strip(goal, 'Goal: ')}" if goal else "*Goal:* none recorded yet")
    constraints = [_strip(c["text"], "Constraint: ") for c in sec.get("constraints", [])]
    if constraints:
        lines.append("*Constraints:* " + "; ".join(constraints[-_LIST:]))
    lines.append(_suspected(sec))
    decisions = [d["text"] for d in sec.get("last_decisions", [])]
    lines.append("*Decided:* " + ("; ".join(decisions[-_LIST:]) if decisions else "nothing yet"))
    lines.append(_open(sec))
    roles = sec.get("roles") or {}
    lines.append("*Roles:* " + (", ".join(f"{r} {u}" for r, u in roles.items()) if roles else "none assigned"))
    lines.append(_recent(sec, now, recent_minutes))
    if view.omitted:
        lines.append(f"_({len(view.omitted)} omission line(s) in the view: older entries are not summarised)_")
    return "\n".join(lines)


def _strip(text: str, prefix: str) -> str:
    return text[len(prefix) :] if text.startswith(prefix) else text


def _suspected(sec: dict[str, Any]) -> str:
    ruled = {r for a in sec.get("answers", []) if " ruled out " in a.get("text", "") for r in a.get("refs", [])}
    hyps = [h for h in sec.get("hypotheses", []) if h.get("seq") not in ruled]
    firing = (sec.get("alerts") or {}).get("firing", 0)
    parts = [f"#{h['seq']} {h['text']}" for h in hyps[-_LIST:]]
    alerts = f" ({firing} alert(s) firing)" if firing else ""
    return "*Suspected:* " + ("; ".join(parts) if parts else "nothing yet") + alerts


def _open(sec: dict[str, Any]) -> str:
    items = [
        o["text"] + (f" (held by {o['holder']})" if o.get("holder") else "") for o in sec.get("open_obligations", [])
    ]
    items += [f"{p['action']} [{p['risk']}] {p['status'].replace('_', ' ')}" for p in sec.get("waiting_proposals", [])]
    items += [s["text"] for s in sec.get("open_suggestions", [])]
    return "*Open:* " + ("; ".join(items[:6]) if items else "nothing")


def _recent(sec: dict[str, Any], now: datetime, minutes: int) -> str:
    since = now - timedelta(minutes=minutes)
    recent = []
    for item in sec.get("timeline", []):
        try:
            at = parse_iso(item.get("at", ""))
        except ValueError:
            continue
        if at >= since:
            recent.append(f"{at.strftime('%H:%M')} {item['text']}")
    if not recent:
        return f"*Last {minutes} min:* nothing new"
    more = f" (+{len(recent) - 8} more)" if len(recent) > 8 else ""
    return f"*Last {minutes} min:*\n" + "\n".join(f"• {r}" for r in recent[-8:]) + more
