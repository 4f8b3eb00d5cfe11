"""Posts paced per channel: at most one post per interval in each channel, in this process or across replicas."""

from __future__ import annotations

import asyncio
import logging
import time

from decklog.core.store.ports import PaceSlots

log = logging.getLogger(__name__)


class ChannelPacer:
    """At most one post per ``interval`` seconds per channel; a 429 pushes the channel's next slot back."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._next: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def wait(self, channel: str) -> None:
        lock = self._locks.setdefault(channel, asyncio.Lock())
        async with lock:
            await self._wait_locked(channel)

    async def _wait_locked(self, channel: str) -> None:
        now = time.monotonic()
        slot = self._next.get(channel, 0.0)
        if slot > now:
            await asyncio.sleep(slot - now)
        self._next[channel] = max(time.monotonic(), slot) + self.interval

    def penalize(self, channel: str, seconds: float) -> None:
        self._next[channel] = max(self._next.get(channel, 0.0), time.monotonic() + seconds)


class SharedChannelPacer(ChannelPacer):
    """``ChannelPacer`` across replicas: each post reserves its channel's next slot in the shared database, so
    posts to one channel are spaced by ``interval`` whichever replica sends them. A 429 seen here pushes the slot
    back for every replica. If the database cannot be reached, this replica paces alone (and says so once)."""

    def __init__(self, slots: PaceSlots, interval: float = 1.0) -> None:
        super().__init__(interval)
        self.slots = slots
        self._warned = False

    async def wait(self, channel: str) -> None:
        lock = self._locks.setdefault(channel, asyncio.Lock())
        async with lock:
            floor = max(0.0, self._next.get(channel, 0.0) - time.monotonic())  # a penalty still running here
            try:
                delay = await self.slots.reserve(channel, self.interval, floor)
            except Exception:
                if not self._warned:
                    log.warning("shared Slack pacing is unavailable; pacing %s in this process only", channel)
                    self._warned = True
                await super()._wait_locked(channel)
                return
            if delay > 0:
                await asyncio.sleep(delay)
