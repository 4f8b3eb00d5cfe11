"""The outbox sender that keeps the index in step with the scope logs (idempotent by seq)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from core.entries import Entry
from core.index import Index

#: Only these kinds may be held back (``IndexSender.interval``): the index's view of an alert storm may lag by a
#: fraction of a second. Everything else (a declaration's inbound id, a thread's route, a message) goes at once.
PACED_KINDS = frozenset({"observation"})


class IndexSender:
    """The outbox sender that keeps ``index.db`` in step with the scope logs (idempotent by seq).

    An alert storm commits an observation every few milliseconds per incident, and each apply is a transaction
    with a fixed cost (the scope's row, its position, its milestones) on top of its entries. So a batch made only of
    alert observations that comes less than ``interval`` seconds after the scope's previous apply waits out the
    rest of it (only this scope's ``index`` drain waits; meanwhile the dispatcher queues what is committed, and
    the next batch carries all of it): one apply per scope per interval, however fast the alerts come. A full batch
    (a backlog) never waits. Rows stay pending until applied, so a crash while waiting loses nothing.
    """

    name = "index"
    batch_size = 256
    interval = 1.0

    def __init__(self, index: Index, store: Any, *, interval: float | None = None) -> None:
        self.index = index
        self.store = store
        if interval is not None:
            self.interval = interval
        self._last: dict[str, float] = {}  # scope → when its last apply started (monotonic)

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        loop = asyncio.get_running_loop()
        last = self._last.get(scope)
        if last is not None and len(entries) < self.batch_size and all(e.kind in PACED_KINDS for e in entries):
            wait = last + self.interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
        self._last[scope] = loop.time()
        if len(self._last) > 4096:  # scopes not seen lately need no pacing
            horizon = loop.time() - self.interval
            self._last = {k: v for k, v in self._last.items() if v > horizon}
        state = await self.store.get_state(scope)
        await self.index.apply(state, entries)
