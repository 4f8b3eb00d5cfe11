"""Re-arming pending deliveries: at boot every scope that may have some, then the scopes another process committed to.

A committed entry wakes the dispatcher of the process that committed it. Another process learns of it through the
sweep: on SQLite, where processes do not hear each other's commits, ``periodic`` wakes every scope updated in the
last minute (one index query) every few seconds; with replicas on a shared database, which hear each other's
commits, ``pending`` wakes every scope with rows waiting as the safety net (one query).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from decklog.core.clock import iso
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.store.ports import CursorClaims, IndexPort, LogStore

log = logging.getLogger("decklog")


class Sweeps:
    """Re-arm pending deliveries: every scope at boot, then the scopes another process (the CLI) touched."""

    def __init__(self, dispatcher: Dispatcher, index: IndexPort, store: LogStore) -> None:
        self.dispatcher = dispatcher
        self.index = index
        self.store = store
        self.last = 0.0

    async def boot(self) -> None:
        """Wake the scopes with pending deliveries. Only those that may have some are opened (the store knows
        which: those found pending at the last check or written since, on SQLite; those with rows waiting, on
        PostgreSQL), so the sweep costs what is pending, not what history holds."""
        woken, looked = await self._check()
        log.info("boot sweep: %d scopes with pending deliveries (%d looked at)", woken, len(looked))
        self.last = time.time()

    async def checkpoint(self) -> None:
        """The same check while the server runs (SQLite, every minute): what the next boot must open stays what
        was written in the last minute or is pending, however long this process has run."""
        await self._check()

    async def _check(self) -> tuple[int, list[str]]:
        topics = sorted(self.dispatcher.senders)
        candidates, at = await self.store.sweep_candidates(topics)
        looked = [str(s) for s in candidates]
        found: list[str] = []
        woken = await self.dispatcher.sweep(looked, found=found)
        await self.store.sweep_checked(topics, at, found)
        return woken, looked

    async def pending(self, cursors: CursorClaims) -> None:
        """With replicas: wake every scope with rows waiting, whichever replica committed them (one query)."""
        await self.dispatcher.sweep(await cursors.outbox_pending_scopes())

    async def periodic(self) -> None:
        since = iso(datetime.fromtimestamp(self.last - 60, UTC))
        recent = [r.id for r in await self.index.list_scopes(updated_since=since, limit=None)]
        self.last = time.time()
        await self.dispatcher.sweep(recent)
