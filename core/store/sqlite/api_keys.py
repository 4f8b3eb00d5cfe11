"""The REST API's tokens and idempotent replies in one SQLite file (``DATA_DIR/api.db``; ``core.store.ports.ApiKeys``).

A file of its own, beside the logs: the index is derived and rebuilt from the scope files, these rows are not.
Few rows and rare writes, so one worker thread and a plain transaction each, under ``synchronous=FULL`` like the
logs (a reply stored is an answer given: it must survive a power loss as the append it answers does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from decklog.core.store.ports import ApiTokenRow, StoredReply

T = TypeVar("T")

metadata = sa.MetaData()
tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("digest", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("scope", sa.Text, nullable=False),
    sa.Column("user_id", sa.Text, nullable=False, server_default=""),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("revoked_at", sa.Float, nullable=True),
)
# one live token per name; a revoked name may be given again
sa.Index("api_tokens_live_name", tokens.c.name, unique=True, sqlite_where=tokens.c.revoked_at.is_(None))
replies = sa.Table(
    "api_replies",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("request_hash", sa.Text, nullable=False),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
)


def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # BEGIN ourselves (below): the stdlib's lazy BEGIN loses updates
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


def _on_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def row_of(r: Any) -> ApiTokenRow:
    return ApiTokenRow(
        name=r.name, scope=r.scope, digest=r.digest, created_at=r.created_at, user=r.user_id, revoked_at=r.revoked_at
    )


class SqliteApiKeys:
    """``await SqliteApiKeys.open(data_dir)``; see ``core.store.ports.ApiKeys``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.engine = sa.create_engine(f"sqlite:///{path}", poolclass=sa.pool.NullPool)
        sa.event.listen(self.engine, "connect", _on_connect)
        sa.event.listen(self.engine, "begin", _on_begin)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decklog-api-keys")

    @classmethod
    async def open(cls, data_dir: Path | str) -> SqliteApiKeys:
        directory = Path(data_dir)
        directory.mkdir(parents=True, exist_ok=True)
        keys = cls(directory / "api.db")
        await keys._run(lambda conn: metadata.create_all(conn, checkfirst=True))
        return keys

    async def _run(self, fn: Callable[[Connection], T]) -> T:
        def tx() -> T:
            with self.engine.begin() as conn:
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self._executor, tx)

    async def token_add(self, row: ApiTokenRow) -> bool:
        def add(conn: Connection) -> bool:
            taken = conn.execute(
                sa.select(tokens.c.digest).where(
                    sa.or_(
                        sa.and_(tokens.c.name == row.name, tokens.c.revoked_at.is_(None)), tokens.c.digest == row.digest
                    )
                )
            ).first()
            if taken is not None:
                return False
            conn.execute(
                tokens.insert().values(
                    digest=row.digest, name=row.name, scope=row.scope, user_id=row.user, created_at=row.created_at
                )
            )
            return True

        return await self._run(add)

    async def token_by_digest(self, digest: str) -> ApiTokenRow | None:
        found = await self._run(lambda c: c.execute(sa.select(tokens).where(tokens.c.digest == digest)).first())
        return row_of(found) if found is not None else None

    async def tokens(self) -> list[ApiTokenRow]:
        rows = await self._run(lambda c: c.execute(sa.select(tokens).order_by(tokens.c.created_at)).all())
        return [row_of(r) for r in rows]

    async def token_revoke(self, name: str, *, at: float) -> bool:
        stmt = tokens.update().where(tokens.c.name == name, tokens.c.revoked_at.is_(None)).values(revoked_at=at)
        return bool(await self._run(lambda c: c.execute(stmt).rowcount))

    async def reply_get(self, key: str) -> StoredReply | None:
        found = await self._run(lambda c: c.execute(sa.select(replies).where(replies.c.key == key)).first())
        return StoredReply(found.key, found.request_hash, found.status, found.body) if found is not None else None

    async def reply_put(self, reply: StoredReply) -> StoredReply:
        def put(conn: Connection) -> StoredReply:
            found = conn.execute(sa.select(replies).where(replies.c.key == reply.key)).first()
            if found is not None:
                return StoredReply(found.key, found.request_hash, found.status, found.body)
            conn.execute(
                replies.insert().values(
                    key=reply.key, request_hash=reply.request_hash, status=reply.status, body=reply.body
                )
            )
            return reply

        return await self._run(put)

    async def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.engine.dispose()
