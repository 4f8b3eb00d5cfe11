"""The periodic sweep: expire leases and approvals, run approved proposals nobody is running (and settle runs
whose holder vanished), decide verifications that fell due (new evidence triggers the others)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence

from decklog.core.actions.context import APPROVALS, DeskContext, log
from decklog.core.actions.outcomes import SweepReport, Verified
from decklog.core.actions.runner import RunReport
from decklog.core.clock import iso, parse_iso
from decklog.core.entries import NewEntry, ProposalClosed
from decklog.core.errors import DecklogError, NotFound
from decklog.core.obligations import expire_leases, lease_live
from decklog.core.state import ScopeState

Execute = Callable[..., Awaitable[RunReport]]  # ActionDesk.execute(scope, proposal_id, *, receipt=…)
Verify = Callable[..., Awaitable[list[Verified]]]  # ActionDesk.verify(scope, *, due_only=…)


class Sweeper:
    def __init__(self, ctx: DeskContext, execute: Execute, verify: Verify) -> None:
        self.ctx = ctx
        self.execute = execute
        self.verify = verify

    async def sweep(self, scopes: Sequence[str] | None = None) -> SweepReport:
        """One pass over ``scopes`` (default: the open ones and those with pending approvals)."""
        if scopes is None:
            index = self.ctx.index
            # every scope that may need it, however old (not the newest N): open ones and pending approvals
            rows = await index.list_scopes(upkeep=True, limit=None) if index is not None else []
            scopes = [r.id for r in rows if r.is_open or r.pending_approvals]
        report = SweepReport()
        jobs: list[Awaitable[RunReport]] = []
        receipt = f"sweep:{iso(self.ctx.clock.now())}"
        for scope in scopes:
            try:
                state = await self.ctx.store.get_state(scope)
            except NotFound:
                continue
            if state.forked_from:
                continue  # a fork never acts on the world (core/fork.py)
            report.scopes += 1
            jobs += await self._scope(scope, state, report, receipt)
        for outcome in await asyncio.gather(*jobs, return_exceptions=True):
            if isinstance(outcome, RunReport):
                report.runs.append(outcome)
            elif isinstance(outcome, DecklogError):
                log.info("sweep: a run could not proceed: %s", outcome)
            elif isinstance(outcome, BaseException):
                log.error("sweep: a run failed", exc_info=outcome)
        return report

    async def _scope(
        self, scope: str, state: ScopeState, report: SweepReport, receipt: str
    ) -> list[Awaitable[RunReport]]:
        """Upkeep of one scope; returns the runs to start (all scopes' runs then go together)."""
        store, clock = self.ctx.store, self.ctx.clock
        now = clock.now()
        if any(o.status == "claimed" and not lease_live(o, now) for o in state.obligations.values()):
            res = await store.append(scope, lambda s: expire_leases(s, now=clock.now()))
            report.leases_expired += len(res.entries)
            state = res.state
        expired = [
            p.id
            for p in state.proposals.values()
            if p.status == "waiting_for_approval" and p.expires_at and parse_iso(p.expires_at) <= now
        ]
        if expired:
            res = await store.append(scope, functools.partial(self._expire, ids=tuple(expired)))
            report.proposals_expired += len(res.entries)
            state = res.state
        jobs: list[Awaitable[RunReport]] = []
        for p in state.proposals.values():
            ob = state.obligations.get(p.obligation_id)
            if p.status in ("approved", "running") and (ob is None or not lease_live(ob, now)):
                jobs.append(self.execute(scope, p.id, receipt=receipt))
        if any(o.purpose == "verification" for o in state.obligations.values()):
            report.verifications += await self.verify(scope, due_only=True)
        return jobs

    def _expire(self, s: ScopeState, ids: Sequence[str]) -> list[NewEntry]:
        now = self.ctx.clock.now()
        out = []
        for pid in ids:
            p = s.proposals.get(pid)
            if p is None or p.status != "waiting_for_approval" or not p.expires_at or parse_iso(p.expires_at) > now:
                continue
            why = f"not approved within {self.ctx.policy.expiry_minutes:g} minutes"
            out.append(
                NewEntry.make(
                    "proposal_closed", APPROVALS, ProposalClosed(proposal_id=pid, outcome="expired", reason=why)
                )
            )
        return out
