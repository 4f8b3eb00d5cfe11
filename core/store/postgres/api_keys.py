"""The REST API's tokens and idempotent replies on PostgreSQL (``core.store.ports.ApiKeys``): two tables every
replica shares (core/store/postgres/schema.py ``api_tokens``, ``api_replies``), on the log store's engine."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from decklog.core.store.ports import ApiTokenRow, StoredReply
from decklog.core.store.postgres import schema as pg

T = TypeVar("T")
TOKENS = pg.api_tokens
REPLIES = pg.api_replies


def _row(r: Any) -> ApiTokenRow:
    return ApiTokenRow(
        name=r.name, scope=r.scope, digest=r.digest, created_at=r.created_at, user=r.user_id, revoked_at=r.revoked_at
    )


class PostgresApiKeys:
    def __init__(self, engine: sa.Engine, executor: ThreadPoolExecutor) -> None:
        self.engine = engine
        self.executor = executor

    async def _run(self, fn: Callable[[Connection], T]) -> T:
        def tx() -> T:
            with self.engine.begin() as conn:
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self.executor, tx)

    async def token_add(self, row: ApiTokenRow) -> bool:
        # the partial unique index on live names refuses a second live token of one name, whichever replica adds it
        stmt = (
            pg_insert(TOKENS)
            .values(digest=row.digest, name=row.name, scope=row.scope, user_id=row.user, created_at=row.created_at)
            .on_conflict_do_nothing()
            .returning(TOKENS.c.digest)
        )
        return bool(await self._run(lambda c: c.execute(stmt).first() is not None))

    async def token_by_digest(self, digest: str) -> ApiTokenRow | None:
        found = await self._run(lambda c: c.execute(sa.select(TOKENS).where(TOKENS.c.digest == digest)).first())
        return _row(found) if found is not None else None

    async def tokens(self) -> list[ApiTokenRow]:
        rows = await self._run(lambda c: c.execute(sa.select(TOKENS).order_by(TOKENS.c.created_at)).all())
        return [_row(r) for r in rows]

    async def token_revoke(self, name: str, *, at: float) -> bool:
        stmt = TOKENS.update().where(TOKENS.c.name == name, TOKENS.c.revoked_at.is_(None)).values(revoked_at=at)
        return bool(await self._run(lambda c: c.execute(stmt).rowcount))

    async def reply_get(self, key: str) -> StoredReply | None:
        found = await self._run(lambda c: c.execute(sa.select(REPLIES).where(REPLIES.c.key == key)).first())
        return StoredReply(found.key, found.request_hash, found.status, found.body) if found is not None else None

    async def reply_put(self, reply: StoredReply) -> StoredReply:
        stmt = (
            pg_insert(REPLIES)
            .values(key=reply.key, request_hash=reply.request_hash, status=reply.status, body=reply.body)
            .on_conflict_do_nothing(index_elements=[REPLIES.c.key])
        )

        def put(conn: Connection) -> StoredReply:
            conn.execute(stmt)
            found = conn.execute(sa.select(REPLIES).where(REPLIES.c.key == reply.key)).one()
            return StoredReply(found.key, found.request_hash, found.status, found.body)

        return await self._run(put)

    async def close(self) -> None:
        return None
