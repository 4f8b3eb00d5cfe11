"""One run start at a time per (action, target), across scopes: the gate around the runner's last check of
``not_run_in_related_incident`` and its ``action_started`` (core/actions/runner.py).

That condition reads the other incidents' logs, and two sibling incidents' runners that check in the same instant,
before either has recorded ``action_started``, would both pass. Holding this gate from before the evidence is read
until the start is recorded makes the second one see the first one's run. With several replicas (the backend's
``Leases``: PostgreSQL) the gate is a named lease in the shared database; a replica that cannot get it within
``WAIT_S`` gives the run back (deferred: the sweep tries again). In one process it is an ``asyncio.Lock`` per target. See docs/decisions/0118-one-run-start-per-action-target.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from decklog.core.store.ports import Leases
from decklog.core.views.related import target_of

log = logging.getLogger("decklog.core.actions.runner")

LEASE_S = 30.0  # longer than a start takes (reads and one append); a holder that died frees it when it runs out
WAIT_S = 5.0
POLL_S = 0.1


class TargetGate:
    """``hold(action, params, owner)`` yields whether the caller holds the (action, target) gate; ``leases``: the
    backend's, when several replicas share its database (else the gate is this process's)."""

    def __init__(self, leases: Leases | None) -> None:
        self.leases = leases
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # target → its lock, and who holds or waits

    @asynccontextmanager
    async def hold(self, action: str, params: Mapping[str, Any], owner: str) -> AsyncIterator[bool]:
        key = f"run-target:{action}:{target_of(params)}"
        if self.leases is not None:
            held = await self._lease(self.leases, key, owner)
            try:
                yield held
            finally:
                if held:
                    await self._release(self.leases, key, owner)
            return
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield True
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]  # nobody else holds or waits for it
            else:
                self._locks[key] = (lock, users - 1)

    async def _lease(self, leases: Leases, key: str, owner: str) -> bool:
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while not await leases.try_lease(key, owner, lease_s=LEASE_S):
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True

    async def _release(self, leases: Leases, key: str, owner: str) -> None:
        try:
            await leases.release_lease(key, owner)
        except Exception:  # it runs out on its own
            log.warning("runner: releasing the gate %s failed", key, exc_info=True)
