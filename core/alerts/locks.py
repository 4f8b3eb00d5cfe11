"""Per-key asyncio locks for one process: ``async with locks.hold("fp:abc", "svc:payments"): ...``.

Several keys are always taken in sorted order (no deadlock between holders of overlapping sets); a key's lock is
dropped when nobody holds or waits for it, so the table stays as small as the work in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class KeyedLocks:
    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, *keys: str) -> AsyncIterator[None]:
        ordered = sorted(set(keys))
        for key in ordered:
            self._users[key] = self._users.get(key, 0) + 1
            self._locks.setdefault(key, asyncio.Lock())
        acquired: list[str] = []
        try:
            for key in ordered:
                await self._locks[key].acquire()
                acquired.append(key)
            yield
        finally:
            for key in reversed(acquired):
                self._locks[key].release()
            for key in ordered:
                self._users[key] -= 1
                if not self._users[key]:
                    del self._users[key]
                    del self._locks[key]

    def __len__(self) -> int:
        return len(self._locks)
