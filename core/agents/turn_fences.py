"""The fences a turn takes: each obligation a verification is about is claimed (a fenced lease) before the turn
records, and released if the turn loses its race (core/obligations.py)."""

from __future__ import annotations

from dataclasses import dataclass

from decklog.core.agents.reasoner import TurnOutput
from decklog.core.clock import Clock
from decklog.core.entries import Actor, NewEntry, ObligationClaimed
from decklog.core.errors import Conflict, NotFound
from decklog.core.obligations import claim, release
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore


@dataclass(frozen=True)
class Fences:
    """Who claims, for how long, on which log and clock."""

    store: LogStore
    clock: Clock
    actor: Actor
    holder: str
    lease_seconds: float


async def claim_verified(f: Fences, scope: str, out: TurnOutput) -> dict[str, int]:
    """Claim each obligation a verification is about; skip (and note) those someone else holds."""
    fences: dict[str, int] = {}
    for v in out.verifications:

        def decide(state: ScopeState, oid: str = v.obligation_id) -> list[NewEntry]:
            return claim(state, oid, holder=f.holder, now=f.clock.now(), lease_seconds=f.lease_seconds, actor=f.actor)

        try:
            result = await f.store.append(scope, decide)
        except (Conflict, NotFound) as exc:
            note = {"tool": "claim", "obligation_id": v.obligation_id, "status": "error", "error": str(exc)}
            out.tool_calls.append(note)
            continue
        payload = result.entries[0].payload if result.entries else None
        if isinstance(payload, ObligationClaimed):
            fences[v.obligation_id] = payload.fence
    return fences


async def release_fences(f: Fences, scope: str, fences: dict[str, int]) -> None:
    """Give back what a turn that lost its race claimed (best effort: a lease also ends by itself)."""
    for oid, fence in fences.items():

        def decide(state: ScopeState, oid: str = oid, fence: int = fence) -> list[NewEntry]:
            return release(state, oid, fence=fence, now=f.clock.now(), actor=f.actor, reason="lost the turn race")

        try:
            await f.store.append(scope, decide)
        except (Conflict, NotFound):
            pass
