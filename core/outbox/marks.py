"""Done marks, written a few at a time: one flush per scope writes every topic's marks in the same transaction.

A delivered entry's "done" mark is bookkeeping whose loss only means an idempotent redelivery (the store writes it
with ``durable=False``), so the dispatcher need not wait for it. Marks are buffered per (scope, topic) and flushed
``delay`` seconds after the first one, all topics of a scope together (their requests land in one group commit of
the scope's file). Before the dispatcher reads a scope's pending rows it flushes that scope, so a delivered entry
is never read back as pending by this process; a crash loses at most ``delay`` seconds of marks (redelivered at
boot, which the senders are idempotent against). A scope's flush comes ``delay`` (5 ms) after its first mark, but
never sooner than ``spacing`` (0.5 s) after its previous flush: an alert storm delivers a batch to every topic of
an incident every few milliseconds, and one flush per half second writes all of them in a few statements, while a
quiet incident's marks are written at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from decklog.core.store.ports import Outbox

log = logging.getLogger(__name__)


class DoneMarks:
    def __init__(self, store: Outbox, *, delay: float = 0.005, spacing: float = 0.5) -> None:
        self.store = store
        self.delay = delay
        self.spacing = spacing
        self._last: dict[str, float] = {}  # scope -> when its last flush started (loop time)
        self._marks: dict[str, dict[str, list[int]]] = {}  # scope -> topic -> seqs
        self._flushing: dict[str, asyncio.Task[None]] = {}
        self._sleeping: set[str] = set()  # scopes whose flush task has not started writing yet
        self.flushes = 0

    def add(self, scope: str, topic: str, seqs: Iterable[int]) -> None:
        self._marks.setdefault(scope, {}).setdefault(topic, []).extend(seqs)
        if scope not in self._flushing:
            self._schedule(scope)

    def _schedule(self, scope: str) -> None:
        task = asyncio.get_running_loop().create_task(self._later(scope), name=f"marks:{scope}")
        self._flushing[scope] = task
        self._sleeping.add(scope)

    async def _later(self, scope: str) -> None:
        me = asyncio.current_task()
        try:
            try:
                await asyncio.sleep(self._wait(scope))
            finally:
                self._sleeping.discard(scope)
            await self._write(scope)
        except asyncio.CancelledError:
            raise
        except Exception:  # the marks are lost: those entries are delivered again (idempotently) later
            log.exception("outbox: writing done marks for %s failed", scope)
        finally:
            if self._flushing.get(scope) is me:
                del self._flushing[scope]
                if self._marks.get(scope):  # added while this one was writing: nobody else would write them
                    self._schedule(scope)

    def _wait(self, scope: str) -> float:
        now = asyncio.get_running_loop().time()
        last = self._last.get(scope)
        if len(self._last) > 4096:  # scopes not flushed lately need no spacing
            self._last = {k: v for k, v in self._last.items() if v > now - self.spacing}
        return self.delay if last is None else max(self.delay, last + self.spacing - now)

    async def _write(self, scope: str) -> None:
        topics = self._marks.pop(scope, {})
        if topics:
            self._last[scope] = asyncio.get_running_loop().time()
            self.flushes += 1
            await asyncio.gather(*(self.store.outbox_done(scope, topic, seqs) for topic, seqs in topics.items()))

    async def flush(self, scope: str | None = None) -> None:
        """Write the buffered marks now (of one scope, or all) and wait for them."""
        for sid in [scope] if scope is not None else list({*self._marks, *self._flushing}):
            task = self._flushing.get(sid)
            if task is not None:
                if sid in self._sleeping:  # not writing yet: write its marks here and now instead
                    task.cancel()
                await asyncio.wait({task})  # else it is writing earlier marks: wait for them
                if self._flushing.get(sid) is task:  # cancelled before it ran: its own cleanup never did
                    del self._flushing[sid]
                    self._sleeping.discard(sid)
            await self._write(sid)

    def pending(self, scope: str, topic: str) -> int:
        return len(self._marks.get(scope, {}).get(topic, ()))
