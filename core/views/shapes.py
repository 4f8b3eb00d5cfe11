"""Rendering: the compact JSON shapes a view shows (an entry's brief, the scope header, obligations, alerts,
proposals). Pure functions of immutable entries and stored state."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from decklog.core.entries import Actor, Entry, Observation
from decklog.core.state import ObligationState, ScopeState
from decklog.core.store.ports import ScopeRow

TEXT_CLIP = 200


class Briefs(Protocol):
    """Where renderings of entries' briefs are remembered (``core.views.cache.ViewCache`` is one)."""

    def brief(self, entry: Entry, limit: int) -> dict[str, Any]:
        """``render_brief(entry, limit)``, remembered; a fresh dict."""
        ...


def at_text(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def who(actor: Actor) -> str:
    return f"{actor.type}:{actor.label()}"


def clip(text: str, limit: int = TEXT_CLIP) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def brief(entry: Entry, *, limit: int = TEXT_CLIP, cache: Briefs | None = None) -> dict[str, Any]:
    """An entry as a view shows it: seq, time, kind, who, one line of text, evidence refs (a fresh dict).

    Entries are immutable, so a ``cache`` remembers the rendering by (scope, seq, entry hash, limit)."""
    if cache is None:
        return render_brief(entry, limit)
    return cache.brief(entry, limit)


def render_brief(entry: Entry, limit: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq": entry.seq,
        "at": at_text(entry.at),
        "kind": entry.kind,
        "by": who(entry.actor),
        "text": clip(entry.text, limit),
    }
    if isinstance(entry.payload, Observation) and entry.payload.alert_status:
        out["alert_status"] = entry.payload.alert_status
    if entry.refs:
        out["refs"] = list(entry.refs)
    return out


def compact(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v not in ("", None, (), [], {}, 0) or k in ("seq", "severity")}


def header(state: ScopeState) -> dict[str, Any]:
    return compact(
        {
            "title": state.title,
            "kind": state.kind,
            "status": state.status,
            "severity": state.severity,
            "services": list(state.services),
            "declared_at": state.created_at[:19] + "Z" if state.created_at else "",
            "acknowledged_at": state.acknowledged_at[:19] + "Z" if state.acknowledged_at else "",
            "mitigated_at": state.mitigated_at[:19] + "Z" if state.mitigated_at else "",
            "resolved_at": state.resolved_at[:19] + "Z" if state.resolved_at else "",
            "entries": state.version,
            "linked": list(state.linked),
        }
    )


def change_json(row: ScopeRow, linked: Sequence[str]) -> dict[str, Any]:
    """A change scope as the agents see it (context observations, the ``changes`` tool)."""
    return {
        "scope": row.id,
        "title": row.title,
        "services": list(row.services),
        "status": row.status,
        "at": row.change_time[:19],  # when it happened (as its sender reported it), not when decklog recorded it
        "linked": row.id in linked,
    }


def obligation_json(ob: ObligationState) -> dict[str, Any]:
    return compact(
        {
            "id": ob.id,
            "text": clip(ob.text),
            "purpose": ob.purpose,
            "status": ob.status,
            "holder": ob.holder,
            "fence": ob.fence,
            "lease_until": ob.lease_until,
            "action": ob.action,
            "params": ob.params,
            "conditions": list(ob.conditions),
            "expected_outcome": ob.expected_outcome,
            "run_id": ob.run_id,
            "due_at": ob.due_at,
            "opened_seq": ob.opened_seq,
        }
    )


def alert_items(state: ScopeState, *, status: str) -> list[dict[str, Any]]:
    alerts = [a for a in state.alerts.values() if (a.status == "resolved") == (status == "resolved")]
    alerts.sort(key=lambda a: (a.last_seq, a.fingerprint))
    return [
        compact(
            {
                "fingerprint": a.fingerprint[:60],
                "title": clip(a.title, 120),
                "service": a.service,
                "status": a.status,
                "count": a.count,
                "first_seq": a.first_seq,
                "last_seq": a.last_seq,
            }
        )
        for a in alerts
    ]


def alert_summary(state: ScopeState) -> dict[str, int]:
    firing = len(state.firing_alerts)
    return {"firing": firing, "resolved": len(state.alerts) - firing, "repeats": state.alert_repeats}


def roles(state: ScopeState) -> dict[str, str]:
    return {role: h.user_name or h.user_id for role, h in sorted(state.roles.items())}


def proposal_items(state: ScopeState) -> list[dict[str, Any]]:
    return [
        compact(
            {
                "id": p.id,
                "action": p.action,
                "risk": p.risk,
                "status": p.status,
                "obligation_id": p.obligation_id,
                "proposer": p.proposer,
                "proposed_seq": p.proposed_seq,
                "approvals": list(p.approvals),
                "run_id": p.run_id,
            }
        )
        for p in sorted(state.proposals.values(), key=lambda p: p.proposed_seq)
    ]


def with_evidence(
    entry: Entry, chain: dict[int, Entry], *, cache: Briefs | None = None, depth: int = 2
) -> dict[str, Any]:
    """An entry's brief with the briefs of the entries it points to, ``depth`` hops deep (its evidence chain)."""
    out = brief(entry, cache=cache)
    if depth and entry.refs:
        out["evidence"] = [
            with_evidence(chain[r], chain, cache=cache, depth=depth - 1) for r in entry.refs if r in chain
        ]
    return out
