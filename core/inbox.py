"""The durable inbox: requests from outside (Slack today) stored before they are acknowledged, processed after.

A receiver puts the request under its idempotency key, answers the sender, then processes it; ``done`` marks it
finished. What is still pending at boot is replayed, oldest first. A key that is already there (pending or done
within the retention window) is refused by ``put`` — a retry, or a duplicate delivered while the first one is
still running, is processed once. The port knows nothing of Slack: ``source`` and ``meta`` are the adapter's.
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

    async def pending(self) -> list[InboxItem]:
        """Requests not done yet, oldest first."""
        ...

    async def pending_count(self) -> int: ...

    async def prune(self, *, older_than_s: float = DONE_RETENTION_S) -> int:
        """Forget done requests finished more than ``older_than_s`` ago; returns how many."""
        ...

    async def close(self) -> None: ...
