"""Posts paced per channel: at most one post per interval in each channel, in this process or across replicas.

The posts waiting for one channel's next slot go in order of what matters, not of arrival: each waiter brings a
``Priority`` (``sender.py`` derives it from the entry and the incident's stored state), and when the slot comes the
most urgent waiter takes it. So a new SEV1 incident's header waits for at most the one post already granted, however
many storm summaries queued before it, and a restart changes nothing (the boot sweep's drains bring the same
priorities again). Within one incident the order is the sender's own: a scope's drain posts one entry at a time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from typing import NamedTuple

from decklog.core.store.ports import PaceSlots

log = logging.getLogger(__name__)


class Priority(NamedTuple):
    """Lower goes first: ``rank`` (``HEADER``, ``URGENT``, ``NORMAL``, ``LOW``), then the incident's severity (1 =
    worst; 5 when it has none), then ``at`` (when the entry was committed, epoch seconds: the oldest first)."""

    rank: int
    severity: int = 5
    at: float = 0.0


HEADER = 0  # a new incident's header (and the pointer to its dedicated channel)
URGENT = 1  # a post in the thread of an open SEV1 or SEV2 incident
NORMAL = 2  # everything else
LOW = 3  # a storm digest (low-value posts coalesced, adapters/slack/digest.py)
DEFAULT = Priority(NORMAL)


class ChannelPacer:
    """At most one post per ``interval`` seconds per channel, granted to the most urgent waiter; a 429 pushes the
    channel's next slot back."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._next: dict[str, float] = {}
        self._waiting: dict[str, list[tuple[Priority, int, asyncio.Future[None]]]] = {}
        self._timers: dict[str, asyncio.TimerHandle | asyncio.Handle] = {}
        self._order = itertools.count()
        self._penalty: dict[str, float] = {}  # channel → until when a 429 holds it (monotonic)

    async def wait(self, channel: str, priority: Priority = DEFAULT) -> None:
        """Until this post's turn in ``channel``: its slot has come and no more urgent post is waiting."""
        now = time.monotonic()
        if channel not in self._waiting and channel not in self._timers and self._next.get(channel, 0.0) <= now:
            self._next[channel] = now + self.interval  # a free channel: at once, as a lone post always went
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting.setdefault(channel, []), (priority, next(self._order), fut))
        self._schedule(channel)
        await fut  # a waiter cancelled before its turn is skipped (``_grant``); one cancelled after it used its slot
        # The slot counts from when this post goes, not from when it was granted (a busy loop wakes it late).
        self._next[channel] = max(self._next.get(channel, 0.0), time.monotonic() + self.interval)

    def backlog(self, channel: str) -> float:
        """Seconds a post to ``channel`` asked for now would wait behind the posts already waiting (a burst)."""
        waiting = sum(1 for _, _, fut in self._waiting.get(channel, ()) if not fut.done())
        ahead = max(0.0, self._next.get(channel, 0.0) - time.monotonic())
        return ahead + waiting * self.interval

    def penalize(self, channel: str, seconds: float) -> None:
        until = time.monotonic() + seconds
        self._penalty[channel] = max(self._penalty.get(channel, 0.0), until)
        self._next[channel] = max(self._next.get(channel, 0.0), until)

    def _schedule(self, channel: str) -> None:
        if channel in self._timers:
            return
        loop = asyncio.get_running_loop()
        delay = self._next.get(channel, 0.0) - time.monotonic()
        # ``call_soon`` when the slot is free but others wait: those woken in this loop turn (one commit's drains,
        # the boot sweep's) all queue before the grant, so the most urgent of them goes next.
        self._timers[channel] = (
            loop.call_later(delay, self._grant, channel) if delay > 0 else loop.call_soon(self._grant, channel)
        )

    def _grant(self, channel: str) -> None:
        self._timers.pop(channel, None)
        heap = self._waiting.get(channel, [])
        while heap and heap[0][2].done():  # cancelled while waiting
            heapq.heappop(heap)
        if not heap:
            self._waiting.pop(channel, None)
            return
        now = time.monotonic()
        if self._next.get(channel, 0.0) > now:  # a 429 pushed the slot back meanwhile
            self._schedule(channel)
            return
        _, _, fut = heapq.heappop(heap)
        self._next[channel] = now + self.interval
        fut.set_result(None)
        if heap:
            self._schedule(channel)
        else:
            self._waiting.pop(channel, None)

    def _hold(self, channel: str, seconds: float) -> None:
        """No local grant in ``channel`` for ``seconds`` (the shared slot this replica reserved lies that far)."""
        self._next[channel] = max(self._next.get(channel, 0.0), time.monotonic() + seconds + self.interval)


class SharedChannelPacer(ChannelPacer):
    """``ChannelPacer`` across replicas: each post reserves its channel's next slot in the shared database, so
    posts to one channel are spaced by ``interval`` whichever replica sends them. A 429 seen here pushes the slot
    back for every replica. If the database cannot be reached, this replica paces alone (and says so once).

    Each replica grants its own waiters by priority and holds one reservation at a time per channel (the next local
    grant waits until the reserved slot has passed), so a SEV1 header waits at most for one reserved slot per
    replica; across replicas the database's slots go in the order they were asked for."""

    def __init__(self, slots: PaceSlots, interval: float = 1.0) -> None:
        super().__init__(interval)
        self.slots = slots
        self._warned = False

    async def wait(self, channel: str, priority: Priority = DEFAULT) -> None:
        await super().wait(channel, priority)
        floor = max(0.0, self._penalty.get(channel, 0.0) - time.monotonic())  # a 429 seen here: for every replica
        try:
            delay = await self.slots.reserve(channel, self.interval, floor)
        except Exception:
            if not self._warned:
                log.warning("shared Slack pacing is unavailable; pacing %s in this process only", channel)
                self._warned = True
            return
        if delay > 0:
            self._hold(channel, delay)
            await asyncio.sleep(delay)
