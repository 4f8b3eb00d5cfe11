"""In-process caches in front of the index, and the per-source rate limiter (derived state: a restart rebuilds
it from the log and the index, ``AlertRouter.warm``)."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    """A bounded mapping that forgets the least recently written keys (caches in front of the index)."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)


class RateLimiter:
    """Per source: is this alert beyond ``limit`` in the last 60 s? Keeps only the last ``limit`` arrival times."""

    def __init__(self, limit: int, *, window: float = 60.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._monotonic = monotonic
        self._arrivals: dict[str, deque[float]] = {}

    def hit(self, source: str) -> bool:
        """Count one alert; True when it is over the limit (``limit`` others arrived within the window)."""
        now = self._monotonic()
        arrivals = self._arrivals.setdefault(source, deque(maxlen=self.limit))
        over = len(arrivals) == self.limit and now - arrivals[0] < self.window
        arrivals.append(now)
        return over

    def seed(self, source: str, *, age: float) -> None:
        """Count ``source`` as over the limit, as if ``limit`` alerts had arrived ``age`` seconds ago (a restart
        during a storm: the storm incident's last alert says the storm was going on)."""
        if self.limit > 0 and 0 <= age < self.window:
            self._arrivals[source] = deque([self._monotonic() - age] * self.limit, maxlen=self.limit)
