"""Fenced writes of a run (core/actions/runner.py): every write after the claim checks, inside the write
transaction, that the run's fence is still the obligation's current, live fence. A stale write is rejected and
the rejection recorded as a ``fence_rejected`` entry carrying what it attempted."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from core.actions.run_authority import RUNNER, Checkpoint, RunAuthority, RunnerStats
from core.clock import Clock
from core.entries import NewEntry
from core.errors import StaleFence
from core.obligations import check_fence, reject_stale
from core.state import ObligationState, ScopeState
from core.store.ports import AppendResult, LogStore

log = logging.getLogger("core.actions.runner")


class RunFences:
    """The runner's fence checks (a base of ``Runner``, which sets these attributes)."""

    store: LogStore
    clock: Clock
    stats: RunnerStats
    checkpoint: Checkpoint | None
    unfenced: bool

    def _check(self, s: ScopeState, auth: RunAuthority) -> ObligationState | None:
        if self.unfenced:  # the experiment's ``--fences off`` ablation only: no check at all
            return s.obligations.get(auth.obligation_id)
        if auth.obligation_id not in s.obligations:
            raise StaleFence(
                f"obligation {auth.obligation_id} is no longer open (a newer holder finished it)",
                fence=auth.fence,
                current=s.max_fence,
            )
        return check_fence(s, auth.obligation_id, auth.fence, self.clock.now())

    def _fenced(self, auth: RunAuthority, entries: Sequence[NewEntry]) -> Callable[[ScopeState], list[NewEntry]]:
        def decide(s: ScopeState) -> list[NewEntry]:
            self._check(s, auth)
            return list(entries)

        return decide

    async def _write(
        self, auth: RunAuthority, decide: Callable[[ScopeState], Sequence[NewEntry]], attempted: str
    ) -> AppendResult | None:
        """Append under the authority's fence; a stale fence is rejected and recorded (None is returned)."""
        try:
            return await self.store.append(auth.scope, decide)
        except StaleFence as exc:
            await self._reject(auth, exc, attempted)
            return None

    async def _reject(self, auth: RunAuthority, exc: StaleFence, attempted: str) -> None:
        self.stats.stale += 1
        log.info("runner: stale write on %s %s by fence %d: %s", auth.scope, auth.obligation_id, auth.fence, exc)
        await self.store.append(
            auth.scope,
            lambda s: reject_stale(
                s, exc, obligation_id=auth.obligation_id, holder=auth.holder, attempted=attempted, actor=RUNNER
            ),
        )

    async def _pause(self, point: str, auth: RunAuthority) -> None:
        if self.checkpoint is not None:
            await self.checkpoint(point, auth)
