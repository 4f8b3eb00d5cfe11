"""Obligations and follow-ups: each one's lifecycle folded from its entries."""

from __future__ import annotations

from typing import Any

from decklog.core.clock import iso
from decklog.core.entries import (
    ObligationCancelled,
    ObligationClaimed,
    ObligationExpired,
    ObligationFulfilled,
    ObligationOpened,
    ObligationReleased,
)
from decklog.core.reports.model import (
    ObligationLine,
)
from decklog.core.reports.sections.source import Source


def obligations(src: Source) -> list[ObligationLine]:
    lines: dict[str, dict[str, Any]] = {}
    for e in src.entries:
        p = e.payload
        if isinstance(p, ObligationOpened):
            lines[p.obligation_id] = {
                "obligation_id": p.obligation_id,
                "text": p.text,
                "purpose": p.purpose,
                "status": "open",
                "seq": e.seq,
                "at": iso(e.at),
                "by": e.actor,
                "conditions": p.conditions,
                "action": p.action,
                "expected_outcome": p.expected_outcome,
                "due_at": p.due_at,
                "run_id": p.run_id,
            }
            continue
        ob_id = getattr(p, "obligation_id", None)
        if not isinstance(ob_id, str) or ob_id not in lines:
            continue
        ob = lines[ob_id]
        if isinstance(p, ObligationClaimed):
            ob.update(status="claimed", holder=p.holder, fence=p.fence, lease_until=p.lease_until)
        elif isinstance(p, ObligationReleased | ObligationExpired):
            if ob.get("fence", 0) == p.fence and ob["status"] == "claimed":
                ob.update(status="open", holder="", lease_until="")
        elif isinstance(p, ObligationFulfilled):
            ob.update(status="fulfilled", closed_seq=e.seq, note=p.note, holder="", lease_until="")
            if p.run_id:
                ob["run_id"] = p.run_id
        elif isinstance(p, ObligationCancelled):
            ob.update(status="cancelled", closed_seq=e.seq, note=p.reason, holder="", lease_until="")
    return [ObligationLine(**ob) for ob in lines.values()]
