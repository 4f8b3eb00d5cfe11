"""Slack's per-channel pacing of ``chat.postMessage``: a short burst, then about one message per second.

A token bucket per channel. When it is empty the call is answered 429 with an integer ``Retry-After``
(the SDK's retry handler parses it with ``int()``) and nothing is posted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ChannelPacer"]


@dataclass
class _Bucket:
    tokens: float
    at: float


class ChannelPacer:
    def __init__(
        self, *, burst: int = 3, per_second: float = 1.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        if burst < 1 or per_second <= 0:
            raise ValueError("burst must be >= 1 and per_second > 0")
        self.burst = burst
        self.per_second = per_second
        self._monotonic = monotonic
        self._buckets: dict[str, _Bucket] = {}

    def admit(self, channel: str) -> int | None:
        """``None`` when a message may be posted now (a token is spent), else the ``Retry-After`` seconds."""
        now = self._monotonic()
        bucket = self._buckets.setdefault(channel, _Bucket(tokens=float(self.burst), at=now))
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.per_second)
        bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return max(1, math.ceil((1.0 - bucket.tokens) / self.per_second))
