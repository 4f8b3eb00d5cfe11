"""The port behind the alert router's per-source rate limit when several replicas share one database.

One process: ``core.alerts.caches.RateLimiter`` (the last ``limit`` arrival times, in memory). Several replicas
behind a load balancer each see only their share of a storm, so each one's limiter would trip at replicas × the
configured rate, and a storm would open an incident per alert on every replica first. A ``RateCounter`` counts
every replica's arrivals in the shared database (PostgreSQL: core/store/postgres_rates.py).
"""

from __future__ import annotations

from typing import Protocol


class RateCounter(Protocol):
    async def count(self, source: str, n: int, *, window: float) -> int:
        """Record ``n`` alerts from ``source`` now; return how many arrived within the last ``window`` seconds,
        these ``n`` included, on every replica."""
        ...
