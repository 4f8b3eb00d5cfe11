"""The outbox sender that keeps the index in step with the scope logs (idempotent by seq)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from decklog.core.entries import Entry
from decklog.core.store.ports import IndexPort

#: Only these kinds may be held back (``IndexSender.interval``): the index's view of an alert storm may lag by a
#: fraction of a second. Everything else (a declaration's inbound id, a thread's route, a message) goes at once.
PACED_KINDS = frozenset({"observation"})
#: Pacing starts with the third observation-only batch in a row within ``interval``: a storm, not a new incident's
#: first alerts (whose header and thread link must reach the index at once).
STORM_RUN = 3


class IndexSender:
    """The outbox sender that keeps ``index.db`` in step with the scope logs (idempotent by seq).

    An alert storm commits an observation every few milliseconds per incident, and each apply is a transaction
    with a fixed cost (the scope's row, its position, its milestones) on top of its entries. So a batch made only of
    alert observations that comes less than ``interval`` seconds after the scope's previous apply, the third such in
    a row, waits out the rest of it (only this scope's ``index`` drain waits; meanwhile the dispatcher queues what is committed, and
    the next batch carries all of it): one apply per scope per interval, however fast the alerts come. A full batch
    (a backlog) never waits. Rows stay pending until applied, so a crash while waiting loses nothing.
    """

    name = "index"
    batch_size = 256
    interval = 1.0

    def __init__(self, index: IndexPort, store: Any, *, interval: float | None = None) -> None:
        self.index = index
        self.store = store
        if interval is not None:
            self.interval = interval
        self._last: dict[str, float] = {}  # scope → when its last apply started (monotonic)
        self._runs: dict[str, int] = {}  # scope → observation-only batches in a row, each within ``interval``

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        loop = asyncio.get_running_loop()
        last, paced = (
            self._last.get(scope),
            len(entries) < self.batch_size and all(e.kind in PACED_KINDS for e in entries),
        )
        recent = last is not None and loop.time() - last < self.interval
        run = self._runs.get(scope, 0) + 1 if paced and recent else 0
        self._runs[scope] = run
        if last is not None and run >= STORM_RUN:  # a storm, not an incident's first alerts: its header goes at once
            wait = last + self.interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
        self._last[scope] = loop.time()
        if len(self._last) > 4096:  # scopes not seen lately need no pacing
            horizon = loop.time() - self.interval
            self._last = {k: v for k, v in self._last.items() if v > horizon}
            self._runs = {k: v for k, v in self._runs.items() if k in self._last}
        state = await self.store.get_state(scope)
        await self.index.apply(state, entries)
