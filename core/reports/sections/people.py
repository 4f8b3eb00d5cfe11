"""Participants (who did what, with which roles) and the agents' turns with their token and cost totals."""

from __future__ import annotations

from dataclasses import dataclass, field

from decklog.core.clock import iso
from decklog.core.entries import (
    Actor,
    AgentTurn,
    RoleAssigned,
)
from decklog.core.reports.model import (
    Participant,
    TurnLine,
    TurnTotals,
)
from decklog.core.reports.sections.source import Source


@dataclass
class _Participant:
    actor: Actor
    entries: int = 0
    first_seq: int = 0
    first_at: str | None = None
    last_at: str | None = None
    roles: list[str] = field(default_factory=list)


def participants(src: Source) -> tuple[Participant, ...]:
    people: dict[tuple[str, str], _Participant] = {}
    for e in src.entries:
        key = (e.actor.type, e.actor.id)
        who = people.get(key)
        if who is None:
            who = people[key] = _Participant(actor=e.actor, first_seq=e.seq, first_at=iso(e.at))
        who.actor = e.actor if e.actor.name else who.actor
        who.entries += 1
        who.last_at = iso(e.at)
    for e in src.entries:
        p = e.payload
        if not isinstance(p, RoleAssigned):
            continue
        key = ("human", p.user_id)
        who = people.get(key)
        if who is None:
            who = people[key] = _Participant(actor=Actor.human(p.user_id, p.user_name), first_seq=10**12 + e.seq)
        if p.role not in who.roles:
            who.roles.append(p.role)
    rank = {"human": 0, "agent": 1, "system": 2}
    ordered = sorted(people.values(), key=lambda w: (rank[w.actor.type], w.first_seq, w.actor.id))
    return tuple(
        Participant(actor=w.actor, roles=tuple(w.roles), entries=w.entries, first_at=w.first_at, last_at=w.last_at)
        for w in ordered
    )


def turns(src: Source) -> tuple[TurnLine, ...]:
    out: list[TurnLine] = []
    for e in src.entries:
        p = e.payload
        if isinstance(p, AgentTurn):
            out.append(
                TurnLine(
                    seq=e.seq,
                    at=iso(e.at),
                    reasoner=p.reasoner,
                    model=p.model,
                    view=p.view,
                    trigger=p.trigger,
                    seq_from=p.seq_from,
                    seq_to=p.seq_to,
                    view_bytes=p.view_bytes,
                    view_tokens=p.view_tokens,
                    tool_calls=len(p.tool_calls),
                    input_tokens=p.input_tokens,
                    output_tokens=p.output_tokens,
                    cache_read_input_tokens=p.cache_read_input_tokens,
                    cache_creation_input_tokens=p.cache_creation_input_tokens,
                    cost_usd=p.cost_usd,
                    duration_ms=p.duration_ms,
                    outcome=p.outcome,
                    error=p.error,
                )
            )
    return tuple(out)


def totals(src: Source) -> TurnTotals:
    lines = turns(src)
    tokens = {
        k: sum(getattr(t, k) for t in lines)
        for k in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    }
    return TurnTotals(
        turns=len(lines),
        failed=sum(1 for t in lines if t.outcome == "failed"),
        total_tokens=sum(tokens.values()),
        cost_usd=round(sum(t.cost_usd for t in lines), 6),
        duration_ms=sum(t.duration_ms for t in lines),
        **tokens,
    )
