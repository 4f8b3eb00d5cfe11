"""Turn slots shared by the replicas of one database: ``agents.max_concurrent_turns`` across them, not per process.

Each process already runs at most ``limit`` turns and asks at once (``TurnSlots``). With PostgreSQL and several
replicas, that is ``limit`` per replica, and the model API sees replicas × ``limit`` conversations during the alert
storm the limit is there for. So a turn that has its process's slot then takes one of ``limit`` named leases,
``turn-slot:0`` … ``turn-slot:<limit-1>``, in the shared ``leases`` table (the same leases as the periodic jobs'
and the run-target gate's, on the database clock). It renews its lease every third of ``lease_s`` while it runs and
gives it back when it ends. A replica that dies frees its slots when their leases run out. While every lease is
held, a turn tries again every ``poll_s``.

Every replica should set the same ``max_concurrent_turns``: a replica with a smaller limit uses only the first
leases, one with a larger limit more of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

from decklog.core.store.ports import Leases

log = logging.getLogger(__name__)

LEASE_S = 30.0  # a holder renews every 10 s; one that died frees its slot within 30 s
POLL_S = 0.25


@dataclass(frozen=True)
class SlotLease:
    name: str
    token: str  # this turn's own owner id: one replica holds several slots at once


class SharedSlots:
    """``limit`` turn slots across every replica of one database."""

    def __init__(
        self, leases: Leases, limit: int, owner: str, *, lease_s: float = LEASE_S, poll_s: float = POLL_S
    ) -> None:
        if limit < 1:
            raise ValueError(f"shared turn slots need a limit of at least 1, not {limit}")
        self.leases = leases
        self.limit = limit
        self.owner = owner
        self.lease_s = lease_s
        self.poll_s = poll_s

    async def try_take(self) -> SlotLease | None:
        """A free slot's lease, now, or None while all ``limit`` are held (tried from a random one, so that
        replicas do not all contend for ``turn-slot:0``)."""
        token = f"{self.owner}:{secrets.token_hex(4)}"
        first = random.randrange(self.limit)
        for k in range(self.limit):
            name = f"turn-slot:{(first + k) % self.limit}"
            if await self.leases.try_lease(name, token, lease_s=self.lease_s):
                return SlotLease(name, token)
        return None

    async def take(self) -> SlotLease:
        """A slot's lease, waiting (polling every ``poll_s``) while every slot is held."""
        while (lease := await self.try_take()) is None:
            await asyncio.sleep(self.poll_s)
        return lease

    @contextlib.asynccontextmanager
    async def kept(self, lease: SlotLease) -> AsyncIterator[None]:
        """Renew ``lease`` while the block runs, then give it back."""
        renewing = asyncio.ensure_future(self._renew(lease))
        try:
            yield
        finally:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)
            try:
                await self.leases.release_lease(lease.name, lease.token)
            except Exception:  # it runs out on its own
                log.warning("agents: giving back %s failed; it frees itself within %gs", lease.name, self.lease_s)

    async def _renew(self, lease: SlotLease) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                if not await self.leases.try_lease(lease.name, lease.token, lease_s=self.lease_s):
                    log.warning("agents: %s ran out and another turn took it; this turn goes on", lease.name)
                    return
            except Exception:
                log.warning("agents: renewing %s failed; trying again", lease.name, exc_info=True)
