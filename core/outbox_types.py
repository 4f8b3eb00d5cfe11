"""What the dispatcher (core/outbox.py) works with: the ``Sender`` port, the exceptions a sender raises to steer
its retries, the retry policy and the delivery counters.

Several replicas: a sender may also have ``handed_over(scope, *, died)``, called when this process takes a
(scope, topic) cursor that another replica drained last — ``died`` when that replica's lease ran out while it held
the cursor (it died mid-delivery), so the sender looks for what it may have posted before posting it again (the
reconcile-before-repost rule, which otherwise assumes only a restart means someone else may have posted).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.entries import Entry


class Sender(Protocol):
    """An idempotent side effect keyed by (scope, entry seq). ``name`` is its outbox topic."""

    name: str
    batch_size: int

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        """Deliver entries (in seq order). Raise ``RetryAfter`` to be called again later without penalty,
        ``PermanentFailure`` to park at once, anything else to retry with backoff."""


class RetryAfter(Exception):
    def __init__(self, seconds: float, reason: str = "rate limited") -> None:
        super().__init__(f"{reason}; retry after {seconds:.1f}s")
        self.seconds = seconds


class LeaseLost(Exception):
    """Raised by a sender that found, right before an effect, that this replica's cursor lease has run out
    (``LeaseFence``): nothing was started; the drain stops and the row stays pending for whoever holds the cursor."""


class LeaseFence(Protocol):
    """The dispatcher's view of its cursor leases, for senders (core/outbox_cursors.py ``holds``)."""

    def holds(self, scope: str, topic: str) -> bool: ...


class PermanentFailure(Exception):
    """Retrying cannot help (e.g. the channel is gone): park the row now."""


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8
    base_delay: float = 0.5
    max_delay: float = 300.0

    def delay(self, attempts: int, rng: random.Random) -> float:
        """Exponential backoff with full jitter: uniform(0, min(max, base * 2**(attempts-1)))."""
        ceiling = min(self.max_delay, self.base_delay * (2 ** max(0, attempts - 1)))
        return max(0.05, rng.uniform(ceiling / 2, ceiling))


@dataclass
class DispatchStats:
    delivered: int = 0
    failures: int = 0
    parked: int = 0
    rate_limited: int = 0
    latencies: list[float] = field(default_factory=list)  # commit → delivered, seconds (bounded ring)

    def observe(self, seconds: float) -> None:
        self.latencies.append(seconds)
        if len(self.latencies) > 4096:
            del self.latencies[:2048]


class OneByOne:
    """A view of a sender with batch size 1 (used to isolate a poison entry in a failed batch)."""

    def __init__(self, sender: Sender) -> None:
        self._sender = sender
        self.name = sender.name
        self.batch_size = 1

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        await self._sender.deliver(scope, entries)
