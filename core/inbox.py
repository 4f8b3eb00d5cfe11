"""The durable inbox: requests from outside (Slack today) stored before they are acknowledged, processed after.

A receiver puts the request under its idempotency key, answers the sender, then processes it; ``done`` marks it
finished. What is still pending at boot is replayed, oldest first. A key that is already there (pending, parked,
or done within the retention window) is refused by ``put`` — a retry, or a duplicate delivered while the first one
is still running, is processed once. The port knows nothing of Slack: ``source`` and ``meta`` are the adapter's.

A request that still fails after its bounded attempts (a poison request: a wrongly typed field that breaks its
processing, or one whose processing kept stopping the process) is ``park``-ed with its error: it is no longer
pending, so it is never replayed at boot; ``decklog doctor`` lists it (``parked``) and ``doctor --retry`` puts it
back in the queue (``retry_parked``). Parked requests are kept until then (they are few, and they are the record).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

DONE_RETENTION_S = 24 * 3600.0  # Slack retries for minutes; a day of done keys is far more than any retry needs


@dataclass(frozen=True)
class InboxItem:
    key: str
    source: str
    body: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    received_at: float = 0.0
    attempts: int = 0


@dataclass(frozen=True)
class ParkedRequest:
    """A request given up after its attempts: what it was, and the error of its last attempt."""

    key: str
    source: str
    body: dict[str, Any]
    received_at: float
    attempts: int
    parked_at: float
    error: str


#: How much of a parked request's error is kept (a traceback's last line, not the traceback).
ERROR_MAX = 1000


@dataclass
class InboxStats:
    """Counters for /metrics: requests persisted, and the commits (fsyncs) that made them durable."""

    persisted: int = 0
    duplicates: int = 0
    fsyncs: int = 0


class Inbox(Protocol):
    stats: InboxStats

    async def put(self, *, key: str, source: str, body: dict[str, Any], meta: dict[str, Any]) -> bool:
        """Durably store a request (group-committed, ``synchronous=FULL``). False if ``key`` is already there."""
        ...

    async def attempt(self, *, key: str) -> int:
        """Count one more processing attempt of ``key``; returns the new count."""
        ...

    async def done(self, *, key: str) -> None:
        """The request's work finished (or was given up): it is kept only to refuse retries of its key."""
        ...

    async def park(self, *, key: str, error: str, attempts: int) -> None:
        """Give ``key`` up after ``attempts`` with ``error`` (at most ``ERROR_MAX`` characters kept): no longer
        pending, kept for ``decklog doctor``, still refusing retries of its key. Durable (it must not come back)."""
        ...

    async def pending(self) -> list[InboxItem]:
        """Requests not done and not parked yet, oldest first."""
        ...

    async def pending_count(self) -> int: ...

    async def parked(self) -> list[ParkedRequest]:
        """Every parked request, oldest first."""
        ...

    async def parked_count(self) -> int: ...

    async def retry_parked(self) -> int:
        """Put every parked request back in the queue with no attempts counted; returns how many. A running
        server replays them within seconds (bot/ops.py ``inbox-replay``, or the replicas' ``inbox-takeover``)."""
        ...

    async def prune(self, *, older_than_s: float = DONE_RETENTION_S) -> int:
        """Forget done requests finished more than ``older_than_s`` ago; returns how many."""
        ...

    async def close(self) -> None: ...
