"""The inbox on PostgreSQL: one ``inbox`` table shared by every replica (the ``core.store.ports.Inbox`` port).

``put`` inserts under the request's key with ``ON CONFLICT DO NOTHING``, so a Slack retry that lands on another
replica is refused there and processed once. A pending row belongs to the replica that stored it (``owner``) until
its lease runs out on the database clock; ``pending`` renews this replica's leases and takes over rows whose lease
has run out (their replica died), ``FOR UPDATE SKIP LOCKED``, so two replicas never replay the same request.
Called periodically (bot/ops.py ``inbox-takeover``), that is how a killed replica's acknowledged requests get done.
A parked row (``parked_at``) is no replica's: never pending, listed by ``parked``, and ``retry_parked`` frees it
(no owner) for the next replica's ``pending``.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from decklog.core.store.ports import DONE_RETENTION_S, ERROR_MAX, InboxItem, InboxStats, ParkedRequest
from decklog.core.store.postgres import schema as pg

T = TypeVar("T")
I = pg.inbox  # noqa: E741
DB_NOW = sa.func.extract("epoch", sa.func.clock_timestamp())
#: How long a replica's pending requests stay its own without a renewal (``pending`` renews them).
INBOX_LEASE_S = 10.0


def replica_name() -> str:
    """A name for this process among the replicas (host, pid and a random part: a restarted pid is new)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class PostgresInbox:
    """``PostgresInbox(engine, executor)``; see ``core.store.ports.Inbox``. Shares the log store's engine and threads."""

    def __init__(
        self,
        engine: sa.Engine,
        executor: ThreadPoolExecutor,
        *,
        owner: str | None = None,
        lease_s: float = INBOX_LEASE_S,
    ) -> None:
        self.engine = engine
        self.executor = executor
        self.owner = owner or replica_name()
        self.lease_s = lease_s
        self.stats = InboxStats()
        self.taken_over = 0  # requests of another (dead) replica this one took

    async def _run(self, fn: Callable[[Connection], T]) -> T:
        def tx() -> T:
            with self.engine.begin() as conn:
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self.executor, tx)

    def _until(self) -> Any:
        return DB_NOW + self.lease_s

    async def put(self, *, key: str, source: str, body: dict[str, Any], meta: dict[str, Any]) -> bool:
        stmt = (
            pg_insert(I)
            .values(
                key=key,
                source=source,
                body=json.dumps(body, separators=(",", ":")),
                meta=json.dumps(meta),
                received_at=DB_NOW,
                owner=self.owner,
                lease_until=self._until(),
            )
            .on_conflict_do_nothing(index_elements=[I.c.key])
            .returning(I.c.id)
        )
        stored = await self._run(lambda conn: conn.execute(stmt).first() is not None)
        if stored:
            self.stats.persisted += 1
            self.stats.fsyncs += 1
        else:
            self.stats.duplicates += 1
        return stored

    async def attempt(self, *, key: str) -> int:
        stmt = (
            I.update()
            .where(I.c.key == key)
            .values(attempts=I.c.attempts + 1, owner=self.owner, lease_until=self._until())
            .returning(I.c.attempts)
        )
        return int(await self._run(lambda conn: conn.execute(stmt).scalar()) or 0)

    async def done(self, *, key: str) -> None:
        stmt = I.update().where(I.c.key == key, I.c.done_at.is_(None)).values(done_at=DB_NOW)
        await self._run(lambda conn: conn.execute(stmt))

    async def park(self, *, key: str, error: str, attempts: int) -> None:
        stmt = (
            I.update()
            .where(I.c.key == key, I.c.done_at.is_(None), I.c.parked_at.is_(None))
            .values(parked_at=DB_NOW, error=error[:ERROR_MAX], attempts=attempts, owner=None, lease_until=None)
        )
        await self._run(lambda conn: conn.execute(stmt))

    async def pending(self) -> list[InboxItem]:
        """This replica's requests not done yet, with those of replicas whose lease ran out (taken now)."""
        mine = I.c.owner == self.owner
        free = sa.or_(I.c.owner.is_(None), I.c.lease_until < DB_NOW)

        def w(conn: Connection) -> list[InboxItem]:
            rows = conn.execute(
                sa.select(I.c.id, I.c.key, I.c.source, I.c.body, I.c.meta, I.c.received_at, I.c.attempts, I.c.owner)
                .where(I.c.done_at.is_(None), I.c.parked_at.is_(None), sa.or_(mine, free))
                .order_by(I.c.id)
                .with_for_update(skip_locked=True)
            ).all()
            if rows:
                conn.execute(
                    I.update()
                    .where(I.c.id.in_([r.id for r in rows]))
                    .values(owner=self.owner, lease_until=self._until())
                )
            self.taken_over += sum(1 for r in rows if r.owner != self.owner)
            return [
                InboxItem(r.key, r.source, json.loads(r.body), json.loads(r.meta), r.received_at, r.attempts)
                for r in rows
            ]

        return await self._run(w)

    async def pending_count(self) -> int:
        stmt = sa.select(sa.func.count()).select_from(I).where(I.c.done_at.is_(None), I.c.parked_at.is_(None))
        return await self._run(lambda conn: int(conn.execute(stmt).scalar() or 0))

    async def parked(self) -> list[ParkedRequest]:
        stmt = (
            sa.select(I.c.key, I.c.source, I.c.body, I.c.received_at, I.c.attempts, I.c.parked_at, I.c.error)
            .where(I.c.done_at.is_(None), I.c.parked_at.is_not(None))
            .order_by(I.c.id)
        )

        def q(conn: Connection) -> list[ParkedRequest]:
            return [
                ParkedRequest(
                    r.key, r.source, json.loads(r.body), r.received_at, r.attempts, r.parked_at, r.error or ""
                )
                for r in conn.execute(stmt)
            ]

        return await self._run(q)

    async def parked_count(self) -> int:
        stmt = sa.select(sa.func.count()).select_from(I).where(I.c.done_at.is_(None), I.c.parked_at.is_not(None))
        return await self._run(lambda conn: int(conn.execute(stmt).scalar() or 0))

    async def retry_parked(self) -> int:
        stmt = (
            I.update()
            .where(I.c.done_at.is_(None), I.c.parked_at.is_not(None))
            .values(parked_at=None, error=None, attempts=0, owner=None, lease_until=None)
        )
        return int(await self._run(lambda conn: conn.execute(stmt).rowcount) or 0)

    async def prune(self, *, older_than_s: float = DONE_RETENTION_S) -> int:
        stmt = I.delete().where(I.c.done_at.is_not(None), I.c.done_at < DB_NOW - older_than_s)
        return int(await self._run(lambda conn: conn.execute(stmt).rowcount) or 0)

    async def close(self) -> None:
        """Nothing of its own to close: the engine and the threads are the log store's."""
