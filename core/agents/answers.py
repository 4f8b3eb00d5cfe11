"""Answers to agent findings: a person confirms or rules out a hypothesis, takes or finishes an
obligation. Each answer is a ``finding_answer`` entry by that person referring to the finding (``refs``), appended
with what it implies in the same transaction:

- ruling out a suspect change cancels the open rollback obligations about that change (nothing will propose
  rolling back what a person ruled out; the rules reasoner does not suggest it again unless new evidence arrives);
- Take it claims the obligation for the person (a fenced lease of ``lease_seconds``);
- Done fulfils it.
"""

from __future__ import annotations

from datetime import datetime

from decklog.core.entries import (
    Actor,
    FindingAnswer,
    Hypothesis,
    NewEntry,
    ObligationCancelled,
    ObligationFulfilled,
    ObligationOpened,
)
from decklog.core.errors import Conflict, InvalidInput, NotFound
from decklog.core.obligations import claim
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore

VERDICTS = {"hypothesis": ("confirmed", "ruled_out"), "obligation_opened": ("taken", "done")}
HUMAN_LEASE_S = 4 * 3600.0


async def answer_finding(
    store: LogStore,
    scope: str,
    seq: int,
    verdict: str,
    actor: Actor,
    *,
    now: datetime,
    key: str = "",
    lease_seconds: float = HUMAN_LEASE_S,
) -> str:
    """Record ``actor``'s answer to the finding at ``seq``; returns the one line the person is told."""
    found = await store.read_seqs(scope, [seq])
    if not found:
        raise NotFound(f"{scope} has no entry #{seq}")
    finding = found[0]
    if verdict not in VERDICTS.get(finding.kind, ()):
        raise InvalidInput(f"#{seq} is a {finding.kind}: it cannot be answered with {verdict!r}", field="verdict")
    p = finding.payload
    suspect = p.suspect_scope if isinstance(p, Hypothesis) else ""
    oid = p.obligation_id if isinstance(p, ObligationOpened) else ""
    answer = FindingAnswer(
        finding=seq, finding_kind=finding.kind, verdict=verdict, suspect_scope=suspect, obligation_id=oid
    )
    told: list[str] = []

    def decide(state: ScopeState) -> list[NewEntry]:
        told.clear()
        out = [NewEntry.make("finding_answer", actor, answer, refs=(seq,))]
        if verdict == "ruled_out" and suspect:
            for ob in state.obligations.values():
                if ob.purpose == "rollback" and ob.params.get("change") == suspect and ob.status == "open":
                    why = f"{actor.label()} ruled out {suspect} (#{seq})"
                    cancel = ObligationCancelled(obligation_id=ob.id, reason=why)
                    out.append(NewEntry.make("obligation_cancelled", actor, cancel, refs=(seq,)))
                    told.append(f"cancelled {ob.id}")
        elif verdict == "taken":
            if oid not in state.obligations:
                raise Conflict(f"{oid} is no longer open")
            out += claim(state, oid, holder=actor.label(), now=now, lease_seconds=lease_seconds, actor=actor)
        elif verdict == "done":
            held = state.obligations.get(oid)
            if held is None:
                raise Conflict(f"{oid} is no longer open")
            done = ObligationFulfilled(obligation_id=oid, fence=held.fence, note=f"done by {actor.label()}")
            out.append(NewEntry.make("obligation_fulfilled", actor, done, refs=(seq,)))
        return out

    result = await store.append(scope, decide, idempotency_key=key or None)
    if result.duplicate:
        return f"You already answered #{seq}."
    extra = f" ({', '.join(told)})" if told else ""
    return f"Recorded: {verdict.replace('_', ' ')} {finding.kind.replace('_opened', '')} #{seq}{extra}."
