"""The alert inbox on PostgreSQL: one ``alert_inbox`` table shared by every replica (``core.store.ports.AlertInbox``).

A notification is inserted under its receipt, owned by the replica that stored it until its lease runs out on the
database clock. ``pending`` renews this replica's leases and takes over rows whose lease ran out (their replica
died between its 202 and the routing), ``FOR UPDATE SKIP LOCKED``, so two replicas never route one notification at
once (and if a slow one did, the log's idempotency keys make the second routing a duplicate). Concurrent inserts
share WAL flushes: PostgreSQL's own group commit.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from decklog.core.store.ports import (
    ERROR_MAX,
    RECEIPT_RETENTION_S,
    AlertReceipt,
    InboxStats,
    StoredNotification,
)
from decklog.core.store.postgres import schema as pg
from decklog.core.store.postgres.inbox import replica_name

T = TypeVar("T")
A = pg.alert_inbox
DB_NOW = sa.func.extract("epoch", sa.func.clock_timestamp())
#: How long a replica's pending notifications stay its own without a renewal (``pending`` renews them).
LEASE_S = 10.0


class PostgresAlertInbox:
    """``PostgresAlertInbox(engine, executor)``; shares the log store's engine and threads."""

    def __init__(
        self, engine: sa.Engine, executor: ThreadPoolExecutor, *, owner: str | None = None, lease_s: float = LEASE_S
    ) -> None:
        self.engine = engine
        self.executor = executor
        self.owner = owner or replica_name()
        self.lease_s = lease_s
        self.stats = InboxStats()
        self.taken_over = 0  # notifications of another (dead) replica this one took

    async def _run(self, fn: Callable[[Connection], T]) -> T:
        def tx() -> T:
            with self.engine.begin() as conn:
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self.executor, tx)

    def _until(self) -> Any:
        return DB_NOW + self.lease_s

    async def put(self, *, receipt: str, source: str, body: bytes, accepted: int) -> None:
        stmt = A.insert().values(
            receipt=receipt,
            source=source,
            body=bytes(body),
            accepted=accepted,
            received_at=DB_NOW,
            owner=self.owner,
            lease_until=self._until(),
        )
        await self._run(lambda conn: conn.execute(stmt))
        self.stats.persisted += 1
        self.stats.fsyncs += 1

    async def pending(self, *, limit: int = 1000) -> list[StoredNotification]:
        mine = A.c.owner == self.owner
        free = sa.or_(A.c.owner.is_(None), A.c.lease_until < DB_NOW)

        def w(conn: Connection) -> list[StoredNotification]:
            rows = conn.execute(
                sa.select(A.c.id, A.c.receipt, A.c.source, A.c.body, A.c.accepted, A.c.received_at, A.c.attempts)
                .add_columns(A.c.owner)
                .where(A.c.routed_at.is_(None), sa.or_(mine, free))
                .order_by(A.c.id)
                .limit(limit)
                .with_for_update(skip_locked=True)
            ).all()
            if rows:
                conn.execute(
                    A.update()
                    .where(A.c.id.in_([r.id for r in rows]))
                    .values(owner=self.owner, lease_until=self._until())
                )
            self.taken_over += sum(1 for r in rows if r.owner != self.owner)
            return [
                StoredNotification(r.receipt, r.source, bytes(r.body or b""), r.accepted, r.received_at, r.attempts)
                for r in rows
            ]

        return await self._run(w)

    async def attempt(self, receipts: Sequence[str]) -> None:
        if not receipts:
            return
        stmt = A.update().where(A.c.receipt.in_(list(receipts))).values(attempts=A.c.attempts + 1)
        await self._run(lambda conn: conn.execute(stmt))

    async def finish(self, results: Sequence[AlertReceipt]) -> None:
        if not results:
            return
        rows = [
            {
                "r": r.receipt,
                "o": None if r.outcomes is None else json.dumps(r.outcomes, separators=(",", ":")),
                "e": None if r.error is None else r.error[:ERROR_MAX],
            }
            for r in results
        ]
        stmt = (
            A.update()
            .where(A.c.receipt == sa.bindparam("r"), A.c.routed_at.is_(None))
            .values(
                routed_at=DB_NOW,
                outcomes=sa.bindparam("o"),
                error=sa.bindparam("e"),
                body=None,
                owner=None,
                lease_until=None,
            )
        )
        await self._run(lambda conn: conn.execute(stmt, rows))

    async def receipt(self, receipt: str) -> AlertReceipt | None:
        stmt = sa.select(
            A.c.receipt, A.c.source, A.c.accepted, A.c.received_at, A.c.routed_at, A.c.outcomes, A.c.error
        ).where(A.c.receipt == receipt)

        def q(conn: Connection) -> AlertReceipt | None:
            r = conn.execute(stmt).first()
            if r is None:
                return None
            outcomes = None if r.outcomes is None else json.loads(r.outcomes)
            return AlertReceipt(r.receipt, r.source, r.accepted, r.received_at, r.routed_at, outcomes, r.error)

        return await self._run(q)

    async def pending_count(self) -> int:
        stmt = sa.select(sa.func.count()).select_from(A).where(A.c.routed_at.is_(None))
        return await self._run(lambda conn: int(conn.execute(stmt).scalar() or 0))

    async def prune(self, *, older_than_s: float = RECEIPT_RETENTION_S) -> int:
        stmt = A.delete().where(A.c.routed_at.is_not(None), A.c.routed_at < DB_NOW - older_than_s)
        return int(await self._run(lambda conn: conn.execute(stmt).rowcount) or 0)

    async def close(self) -> None:
        """Nothing of its own to close: the engine and the threads are the log store's."""
