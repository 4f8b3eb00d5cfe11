"""Slack's per-channel pace across replicas: each post reserves the next free slot of its channel in PostgreSQL.

One row per channel holds its next free slot on the database clock. A reservation is one upsert that moves the
slot on by the interval and returns how long to wait for the slot it took, so posts to one channel from any
number of replicas are spaced by the interval (Slack allows about one message per second per channel) and no two
take the same slot. ``floor`` pushes the slot back (a 429's ``Retry-After`` seen by this replica), and every
replica's next reservation then respects it. Used by the Slack sender (adapters/slack/pacing.py).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from decklog.core.store.postgres.log_store import PostgresLogStore

_RESERVE = sa.text(
    """
    INSERT INTO channel_pace AS p (channel, next_at)
    VALUES (:channel, extract(epoch FROM clock_timestamp()) + :floor + :interval)
    ON CONFLICT (channel) DO UPDATE
        SET next_at = greatest(p.next_at, extract(epoch FROM clock_timestamp()) + :floor) + :interval
    RETURNING p.next_at - :interval - extract(epoch FROM clock_timestamp()) AS wait
    """
)


class PostgresPaceSlots:
    """The ``PaceSlots`` of the Slack sender on a shared database."""

    def __init__(self, store: PostgresLogStore) -> None:
        self.store = store

    async def reserve(self, channel: str, interval: float, floor: float = 0.0) -> float:
        """Take the next free slot of ``channel``: the seconds to wait for it (0 or more)."""

        def reserve(conn: Connection) -> float:
            params = {"channel": channel, "interval": float(interval), "floor": max(0.0, float(floor))}
            return float(conn.execute(_RESERVE, params).scalar_one())

        return max(0.0, await self.store.run(reserve))
