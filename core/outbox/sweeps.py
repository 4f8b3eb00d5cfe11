"""Re-arming pending deliveries: every scope at boot, then the scopes another process committed to.

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
from decklog.core.store.ports import CursorClaims, IndexPort

log = logging.getLogger("decklog")


class Sweeps:
    """Re-arm pending deliveries: every scope at boot, then the scopes another process (the CLI) touched."""

    def __init__(self, dispatcher: Dispatcher, index: IndexPort) -> None:
        self.dispatcher = dispatcher
        self.index = index
        self.last = 0.0

    async def boot(self) -> None:
        woken = await self.dispatcher.sweep()
        log.info("boot sweep: %d scopes with pending deliveries", woken)
        self.last = time.time()

    async def pending(self, cursors: CursorClaims) -> None:
        """With replicas: wake every scope with rows waiting, whichever replica committed them (one query)."""
        await self.dispatcher.sweep(await cursors.outbox_pending_scopes())

    async def periodic(self) -> None:
        since = iso(datetime.fromtimestamp(self.last - 60, UTC))
        recent = [r.id for r in await self.index.list_scopes(updated_since=since, limit=None)]
        self.last = time.time()
        await self.dispatcher.sweep(recent)
