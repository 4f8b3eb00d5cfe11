"""The index on PostgreSQL: the same ``Index`` (core/index.py) whose transactions run on a PostgreSQL database.

Its tables are created with the log's (core/store/postgres_schema.py: the same names and columns as index.db,
keys ``COLLATE "C"``); full-text search is ``entries_fts.tsv`` (a stored ``to_tsvector('simple', text)``) with a
GIN index instead of FTS5. Every write is its own READ COMMITTED transaction; one that loses a race with another
replica on a unique key (two reservations of one scope id, two applies of one entry) is run again from the
start, where it sees the winner's row (a reservation then picks the next id, an apply finds nothing new).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.index import Index, SearchHit
from core.store import postgres_schema as pg

T = TypeVar("T")
RETRIES = 40  # racing replicas that allocate the same slug collide once per racer ahead of them


def ts_query(text: str) -> str:
    """Free text → a safe ``to_tsquery`` text: each word quoted, OR-ed (as core.index.fts_query does for FTS5)."""
    words = [w for w in re.findall(r"[\w.-]+", text.lower()) if len(w) > 1][:32]
    return " | ".join(f"'{w}'" for w in words)


class PostgresIndexFile:
    """``IndexFile`` over a PostgreSQL engine: reads and writes on worker threads, unique-key races retried."""

    def __init__(self, engine: sa.Engine, executor: Executor) -> None:
        self.engine = engine
        self.executor = executor

    async def open(self) -> None:
        def check() -> None:
            with self.engine.begin() as conn:
                pg.ensure_schema(conn)

        await asyncio.get_running_loop().run_in_executor(self.executor, check)

    async def close(self) -> None:
        return None

    async def read(self, fn: Callable[[Connection], T], *, small: bool = False) -> T:
        def run() -> T:
            with self.engine.begin() as conn:
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self.executor, run)

    async def write(self, fn: Callable[[Connection, None], T], *, savepoint: bool = True, durable: bool = True) -> T:
        def run() -> T:
            for attempt in range(RETRIES):
                try:
                    with self.engine.begin() as conn:
                        return fn(conn, None)
                except sa.exc.IntegrityError:
                    if attempt == RETRIES - 1:
                        raise
                    time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))  # on a worker thread: jitter apart
            raise AssertionError("unreachable")

        return await asyncio.get_running_loop().run_in_executor(self.executor, run)


class PostgresIndex(Index):
    """The index in a PostgreSQL database (usually the log store's own engine and worker threads)."""

    def __init__(self, engine: sa.Engine, executor: Executor) -> None:
        self.engine = engine
        self.file = PostgresIndexFile(engine, executor)

    async def open(self) -> None:
        await self.file.open()

    async def search(
        self,
        text: str,
        *,
        limit: int = 20,
        exclude_scope: str | None = None,
        scope_kind: str | None = None,
        kinds: Sequence[str] = (),
    ) -> list[SearchHit]:
        query = ts_query(text)
        if not query:
            return []
        f = pg.entries_fts
        q = sa.func.to_tsquery(sa.literal_column("'simple'"), query)
        rank = sa.func.ts_rank(f.c.tsv, q)
        headline = sa.func.ts_headline(
            sa.literal_column("'simple'"), f.c.text, q, "StartSel=[, StopSel=], MaxWords=12, MinWords=4"
        )
        stmt = sa.select(f.c.scope, f.c.seq, f.c.kind, headline, rank).where(f.c.tsv.op("@@")(q))
        if exclude_scope:
            stmt = stmt.where(f.c.scope != exclude_scope)
        if scope_kind:
            stmt = stmt.where(f.c.scope.startswith(f"{scope_kind}/", autoescape=True))
        if kinds:
            stmt = stmt.where(f.c.kind.in_(list(kinds)))
        stmt = stmt.order_by(rank.desc(), f.c.scope, f.c.seq).limit(limit)

        def run(conn: Connection) -> list[SearchHit]:
            # rank: lower is better, as with FTS5's bm25 (callers sort ascending)
            return [SearchHit(r[0], int(r[1]), r[2], r[3], -float(r[4])) for r in conn.execute(stmt)]

        return await self.file.read(run)

    def describe(self) -> dict[str, Any]:
        return {"backend": "postgresql", "url": self.engine.url.render_as_string(hide_password=True)}
