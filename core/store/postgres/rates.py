"""The alert router's rate limit across replicas (``RateCounter``, core/store/ports.py) in PostgreSQL.

Arrivals are counted per source in buckets of ``STEP_S`` seconds of the database clock: one statement adds a
request's alerts to the current bucket and returns the sum over the buckets of the last window (its oldest
bucket partly outside it, so the window is counted to within a step). Buckets older than two windows are deleted
now and then (at most once a minute per process; any replica may do it).
"""

from __future__ import annotations

import math
import time

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from decklog.core.store.postgres.log_store import PostgresLogStore

STEP_S = 5
PRUNE_EVERY_S = 60.0

# The CTE's insert is not visible to the query's own read of the table (one snapshot), so the current bucket's
# count comes from the insert's RETURNING and the sum reads only the earlier buckets.
_COUNT = sa.text(
    """
    WITH hit AS (
        INSERT INTO alert_rates AS r (source, bucket, count)
        VALUES (:source, floor(extract(epoch FROM clock_timestamp()) / :step)::bigint, :n)
        ON CONFLICT (source, bucket) DO UPDATE SET count = r.count + excluded.count
        RETURNING r.bucket, r.count
    )
    SELECT hit.count + coalesce((
        SELECT sum(a.count) FROM alert_rates a
        WHERE a.source = :source AND a.bucket < hit.bucket AND a.bucket > hit.bucket - :buckets
    ), 0)
    FROM hit
    """
)
_PRUNE = sa.text(
    "DELETE FROM alert_rates WHERE bucket < floor(extract(epoch FROM clock_timestamp()) / :step)::bigint - :keep"
)


class PostgresRateCounter:
    """Every replica's alert arrivals per source, in the shared database."""

    def __init__(self, store: PostgresLogStore, *, step: int = STEP_S, prune_every: float = PRUNE_EVERY_S) -> None:
        self.store = store
        self.step = step
        self.prune_every = prune_every
        self._pruned = -math.inf  # monotonic time of this counter's last prune: the first count prunes

    async def count(self, source: str, n: int, *, window: float) -> int:
        buckets = max(1, math.ceil(window / self.step))
        prune = time.monotonic() - self._pruned >= self.prune_every
        if prune:
            self._pruned = time.monotonic()

        def q(conn: Connection) -> int:
            params = {"source": source, "n": int(n), "step": self.step, "buckets": buckets}
            arrived = int(conn.execute(_COUNT, params).scalar_one())
            if prune:
                conn.execute(_PRUNE, {"step": self.step, "keep": 2 * buckets})
            return arrived

        return await self.store.run(q)
