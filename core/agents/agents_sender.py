"""The outbox sender of topic ``agents`` (it arms the scheduler's turns; core/agents/scheduler.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from decklog.core.agents.scheduler import TOPIC
from decklog.core.agents.triggers import warranting
from decklog.core.entries import Entry, Question

if TYPE_CHECKING:
    from decklog.core.agents.scheduler import TurnScheduler

log = logging.getLogger(__name__)


class AgentsSender:
    """The outbox sender of topic ``agents``: it only arms timers, so it is fast and idempotent.

    Arming costs a read of the scope's state (``TurnScheduler.due``), and an alert storm commits an observation
    every few milliseconds per incident. So a scope's batches are coalesced: one that comes within ``window``
    seconds of the scope's last ``due`` is looked at together with every other one of that window, once, when it
    ends (always well before the turn armed by the last look is due: the window is a quarter of the debounce at
    most). Nothing is skipped: a new alert or a severity change arms a turn at the due time the log gives (the
    debounce counts from the entries' own times, not from when they were looked at), and a ``question`` is
    answered at once. With in-memory timers a crash loses the window's look with the timers it would have set
    (boot re-arms every pending turn from the log). With durable due turns (several replicas) the rows are kept
    pending instead: a batch within the window waits out the rest of it before it is looked at, so it is marked
    delivered only once it has been (only this scope's ``agents`` drain waits; meanwhile the dispatcher queues
    what is committed, and the next batch carries all of it). A full batch (a backlog) never waits.
    """

    name = TOPIC
    batch_size = 200
    interval = 1.0
    linger = 0.05  # the dispatcher takes this sender's commits of 50 ms together (core/outbox/dispatcher.py)

    def __init__(self, scheduler: TurnScheduler, *, interval: float | None = None) -> None:
        self.scheduler = scheduler
        if interval is not None:
            self.interval = interval
        self._last: dict[str, float] = {}  # scope → when its batches were last looked at (loop time)
        self._held: dict[str, list[Entry]] = {}  # scope → the newest warranting entries of a window not looked at
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def window(self) -> float:
        s = self.scheduler
        return max(0.0, min(self.interval, s.debounce / 4, s.max_wait / 4))

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        loop = asyncio.get_running_loop()
        last = self._last.get(scope)
        wait = 0.0 if last is None else last + self.window - loop.time()
        if wait > 0 and len(entries) < self.batch_size:
            questions = [e for e in entries if isinstance(e.payload, Question)]
            if questions:  # an ask is answered at once; its warranting neighbours wait for the window
                await self.scheduler.on_entries(scope, questions)
            if self.scheduler.due_turns is not None:
                await asyncio.sleep(wait)
            else:
                held = warranting(entries)
                if held:
                    if scope not in self._held:
                        loop.call_later(wait, self._look_later, scope)
                    self._held[scope] = held
                return
        self._looked(scope, loop.time())
        await self.scheduler.on_entries(scope, entries)

    def _looked(self, scope: str, now: float) -> None:
        self._last[scope] = now
        if len(self._last) > 4096:  # scopes not seen lately need no coalescing
            self._last = {k: v for k, v in self._last.items() if v > now - self.window or k in self._held}

    def _look_later(self, scope: str) -> None:
        task = asyncio.get_running_loop().create_task(self._look(scope))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _look(self, scope: str) -> None:
        held = self._held.pop(scope, [])
        if not held or self.scheduler._stopped:
            return
        self._looked(scope, asyncio.get_running_loop().time())
        try:
            await self.scheduler.on_entries(scope, held)
        except Exception:  # the timers are lost, not the entries: the next batch or the boot re-arms from the log
            log.exception("agents: arming the turn of %s failed", scope)
