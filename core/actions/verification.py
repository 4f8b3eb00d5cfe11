"""Rule-based verification: did a run have its expected outcome? A pure judgement over recorded evidence.

A "verification needed" obligation names its check in ``conditions`` (from the action's ``verify``):

- ``alerts_resolved`` — verified once every alert on the run's service has resolved; failed if one is still
  firing when the obligation falls due; otherwise not yet decidable (``None``).
- ``manual`` — a person (or an agent turn) records the verification; the rules never decide it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from decklog.core.clock import parse_iso
from decklog.core.state import ObligationState, ScopeState


@dataclass(frozen=True)
class Verdict:
    outcome: Literal["verified", "failed", "inconclusive"]
    observed: str
    refs: tuple[int, ...] = ()


def judge(ob: ObligationState, state: ScopeState, now: datetime) -> Verdict | None:
    """The verdict on a verification obligation, or None while it cannot be decided yet."""
    check = ob.conditions[0] if ob.conditions else "manual"
    if check != "alerts_resolved":
        return None
    service = str(ob.params.get("service") or "")
    where = f" on {service}" if service else ""
    alerts = [a for a in state.alerts.values() if not service or not a.service or a.service == service]
    firing = [a for a in alerts if a.status != "resolved"]
    refs = tuple(sorted({a.last_seq for a in alerts if a.last_seq > 0}))
    if alerts and not firing:
        return Verdict("verified", f"every alert{where} has resolved ({len(alerts)} alert(s))", refs)
    due = bool(ob.due_at) and parse_iso(ob.due_at) <= now
    if not due:
        return None
    if not alerts:
        return Verdict("inconclusive", f"no alert{where} was recorded to judge by", refs)
    titles = ", ".join(a.title[:80] for a in firing[:3])
    return Verdict("failed", f"{len(firing)} alert(s) still firing{where} when the check fell due: {titles}", refs)
