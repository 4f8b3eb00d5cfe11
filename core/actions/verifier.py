"""Verifying by the rules: claim a "verification needed" obligation, judge it from the state (``judge``), and
record the verdict — a verification, the obligation fulfilled, and a follow-up when the outcome did not show."""

from __future__ import annotations

import secrets

from decklog.core.actions.context import VERIFIER, DeskContext
from decklog.core.actions.outcomes import Verified
from decklog.core.actions.verification import Verdict, judge
from decklog.core.clock import parse_iso
from decklog.core.entries import NewEntry, ObligationFulfilled, Verification
from decklog.core.errors import Conflict, NotFound, StaleFence
from decklog.core.obligations import check_fence, claim, lease_live, open_obligation, reject_stale
from decklog.core.state import ObligationState, ScopeState


class Verifier:
    def __init__(self, ctx: DeskContext) -> None:
        self.ctx = ctx

    async def verify(self, scope: str, *, due_only: bool = False) -> list[Verified]:
        """Judge the scope's open "verification needed" obligations by the rules; record the decidable ones
        (with ``due_only``, only those whose due time has passed: the sweep's backstop)."""
        state = await self.ctx.store.get_state(scope)
        done: list[Verified] = []
        now = self.ctx.clock.now()
        for ob in list(state.obligations.values()):
            if ob.purpose != "verification" or lease_live(ob, now):
                continue
            if due_only and not (ob.due_at and parse_iso(ob.due_at) <= now):
                continue
            if judge(ob, state, self.ctx.clock.now()) is None:
                continue
            outcome = await self._verify_one(scope, ob.id)
            if outcome is not None:
                done.append(outcome)
        return done

    async def _verify_one(self, scope: str, obligation_id: str) -> Verified | None:
        holder = f"verify:{secrets.token_hex(3)}"
        clock = self.ctx.clock
        try:
            claimed = await self.ctx.store.append(
                scope,
                lambda s: claim(s, obligation_id, holder=holder, now=clock.now(), lease_seconds=30.0, actor=VERIFIER),
            )
        except (Conflict, NotFound):
            return None
        fence = int(getattr(claimed.entries[0].payload, "fence", 0))
        verdicts: list[str] = []

        def record(s: ScopeState) -> list[NewEntry]:
            now = clock.now()
            ob = check_fence(s, obligation_id, fence, now)
            verdict = judge(ob, s, now)
            if verdict is None:
                released = {"obligation_id": ob.id, "fence": fence, "reason": "not decidable yet"}
                return [NewEntry.make("obligation_released", VERIFIER, released)]
            verdicts.append(verdict.outcome)
            return _verdict_entries(s, ob, verdict, fence)

        try:
            await self.ctx.store.append(scope, record)
        except StaleFence as exc:
            stale = exc
        else:
            return Verified(obligation_id, verdicts[0]) if verdicts else None

        def rejected(s: ScopeState) -> list[NewEntry]:
            return reject_stale(
                s, stale, obligation_id=obligation_id, holder=holder, attempted="verification", actor=VERIFIER
            )

        await self.ctx.store.append(scope, rejected)
        return None


def _verdict_entries(s: ScopeState, ob: ObligationState, verdict: Verdict, fence: int) -> list[NewEntry]:
    out = [
        NewEntry.make(
            "verification",
            VERIFIER,
            Verification(
                obligation_id=ob.id,
                run_id=ob.run_id,
                outcome=verdict.outcome,
                expected=ob.expected_outcome,
                observed=verdict.observed,
            ),
            refs=verdict.refs,
        ),
        NewEntry.make(
            "obligation_fulfilled",
            VERIFIER,
            ObligationFulfilled(obligation_id=ob.id, fence=fence, note=verdict.outcome, run_id=ob.run_id),
        ),
    ]
    if verdict.outcome != "verified":
        out += open_obligation(
            s,
            text=f"Run {ob.run_id} did not show its expected outcome ({ob.expected_outcome}): decide what "
            f"next — `/incident compensate {ob.run_id}` undoes it",
            purpose="follow_up",
            action=ob.action,
            params=dict(ob.params),
            run_id=ob.run_id,
            actor=VERIFIER,
        )
    return out
