"""What a sender is to the dispatcher (core/outbox/dispatcher.py): the ``Sender`` port, the exceptions a sender
raises to steer its retries, and the fence a sender checks before an effect it cannot take back.

Several replicas: a sender may also have ``handed_over(scope, *, died)``, called when this process takes a
(scope, topic) cursor that another replica drained last — ``died`` when that replica's lease ran out while it held
the cursor (it died mid-delivery), so the sender looks for what it may have posted before posting it again (the
reconcile-before-repost rule, which otherwise assumes only a restart means someone else may have posted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from decklog.core.entries import Entry


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
    """The dispatcher's view of its cursor leases, for senders (``Dispatcher.holds``)."""

    def holds(self, scope: str, topic: str) -> bool: ...


class PermanentFailure(Exception):
    """Retrying cannot help (e.g. the channel is gone): park the row now."""


class OneByOne:
    """A view of a sender with batch size 1 (used to isolate a poison entry in a failed batch)."""

    def __init__(self, sender: Sender) -> None:
        self._sender = sender
        self.name = sender.name
        self.batch_size = 1

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        await self._sender.deliver(scope, entries)
