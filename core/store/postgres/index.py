"""The index in the PostgreSQL database every replica shares: the ``IndexPort`` with ``tsvector`` search.

Its SQL is core/index/statements.py (the same statements the SQLite index runs on index.db); its tables are created
with the log's (core/store/postgres/schema.py: the same names and columns as index.db, keys ``COLLATE "C"``), and
full-text search is ``entries_fts.tsv`` (a stored ``to_tsvector('simple', text)``) with a GIN index instead of FTS5.
Every write is its own READ COMMITTED transaction; one that loses a race with another replica on a unique key (two
reservations of one scope id, two applies of one entry) is run again from the start, where it sees the winner's
row (a reservation then picks the next id, an apply finds nothing new).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from decklog.core.entries import Entry
from decklog.core.ids import ScopeId
from decklog.core.index import statements as q
from decklog.core.index.statements import INDEX_SUBSCRIBER
from decklog.core.index.text import search_words
from decklog.core.state import ScopeState
from decklog.core.store.ports import Milestones, ScopeRow, SearchHit
from decklog.core.store.postgres import schema as pg

T = TypeVar("T")
RETRIES = 40  # racing replicas that allocate the same slug collide once per racer ahead of them
#: How many scopes' last milestones rows an index remembers (so that an alert storm's applies skip rewriting them).
MILESTONES_KEPT = 4096


def ts_query(text: str) -> str:
    """Free text → a safe ``to_tsquery`` text: each word quoted, OR-ed (as FTS5's query is on SQLite)."""
    return " | ".join(f"'{w}'" for w in search_words(text))


class PostgresIndex:
    """The index in a PostgreSQL database (usually on the log store's own engine and worker threads)."""

    def __init__(self, engine: sa.Engine, executor: Executor) -> None:
        self.engine = engine
        self.executor = executor
        # The milestones row last committed per scope (a cache of this process's own writes, bounded).
        self._milestones_written: dict[str, dict[str, Any] | None] = {}

    async def open(self) -> None:
        """Create or check the schema (the log's and the index's tables are one schema)."""

        def check() -> None:
            with self.engine.begin() as conn:
                pg.ensure_schema(conn)

        await asyncio.get_running_loop().run_in_executor(self.executor, check)

    async def close(self) -> None:
        return None

    async def _read(self, fn: Callable[[Connection], T]) -> T:
        def run() -> T:
            with self.engine.begin() as conn:
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self.executor, run)

    async def _write(self, fn: Callable[[Connection], T]) -> T:
        """``fn`` in its own transaction, run again from the start when it lost a unique-key race."""

        def run() -> T:
            for attempt in range(RETRIES):
                try:
                    with self.engine.begin() as conn:
                        return fn(conn)
                except sa.exc.IntegrityError:
                    if attempt == RETRIES - 1:
                        raise
                    time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))  # on a worker thread: jitter apart
            raise AssertionError("unreachable")

        return await asyncio.get_running_loop().run_in_executor(self.executor, run)

    async def ping(self) -> None:
        await self._write(lambda _c: None)

    # -- reservations -----------------------------------------------------------------------------------------

    async def reserve_scope(
        self,
        kind: str,
        base: str,
        *,
        exact: bool,
        on_disk: Callable[[str], bool] = lambda _scope: False,
        inbound_key: str | None = None,
    ) -> ScopeId:
        return await self._write(
            lambda conn: q.reserve_scope(conn, kind, base, exact=exact, on_disk=on_disk, inbound_key=inbound_key)
        )

    async def inbound_scope(self, key: str) -> str | None:
        return await self._read(lambda conn: q.inbound_scope(conn, key))

    async def claim_fingerprint(self, fingerprint: str, scope: str, service: str) -> None:
        await self._write(lambda conn: q.claim_fingerprint(conn, fingerprint, scope, service))

    async def add_route(self, key: str, scope: str) -> None:
        await self._write(lambda conn: q.add_route(conn, key, scope))

    # -- lookups ----------------------------------------------------------------------------------------------

    async def route(self, channel: str, thread_ts: str = "") -> str | None:
        return await self._read(lambda conn: q.route(conn, channel, thread_ts))

    async def open_scope_for_fingerprint(self, fingerprint: str) -> str | None:
        return await self._read(lambda conn: q.open_scope_for_fingerprint(conn, fingerprint))

    async def last_scope_for_fingerprint(self, fingerprint: str) -> str | None:
        return await self._read(lambda conn: q.last_scope_for_fingerprint(conn, fingerprint))

    async def get(self, scope: str) -> ScopeRow | None:
        return await self._read(lambda conn: q.get(conn, scope))

    async def list_scopes(
        self,
        *,
        kind: str | None = None,
        status: str | None = None,
        severity: int | None = None,
        text: str | None = None,
        open_only: bool = False,
        service: str | None = None,
        updated_since: str | None = None,
        upkeep: bool = False,
        limit: int | None = 500,
        before: tuple[str, str] | None = None,
    ) -> list[ScopeRow]:
        return await self._read(
            lambda conn: q.list_scopes(
                conn,
                kind=kind,
                status=status,
                severity=severity,
                text=text,
                open_only=open_only,
                service=service,
                updated_since=updated_since,
                upkeep=upkeep,
                limit=limit,
                before=before,
            )
        )

    async def unresolved_incidents(self, *, limit: int = 2000) -> list[str]:
        return await self._read(lambda conn: q.unresolved_incidents(conn, limit))

    async def changes_on(
        self, services: Sequence[str], since: datetime, until: datetime | None = None
    ) -> list[tuple[ScopeRow, datetime]]:
        return await self._read(lambda conn: q.changes_on(conn, services, since, until))

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
        tsq = sa.func.to_tsquery(sa.literal_column("'simple'"), query)
        rank = sa.func.ts_rank(f.c.tsv, tsq)
        headline = sa.func.ts_headline(
            sa.literal_column("'simple'"), f.c.text, tsq, "StartSel=[, StopSel=], MaxWords=12, MinWords=4"
        )
        stmt = sa.select(f.c.scope, f.c.seq, f.c.kind, headline, rank).where(f.c.tsv.op("@@")(tsq))
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

        return await self._read(run)

    async def titles(self, ids: Sequence[str]) -> dict[str, str]:
        if not ids:
            return {}
        return await self._read(lambda conn: q.titles(conn, ids))

    async def counts(self) -> dict[str, int]:
        return await self._read(q.counts)

    async def milestones(self, since: float | None) -> list[Milestones]:
        return await self._read(lambda conn: q.read_milestones(conn, since))

    # -- subscriptions ----------------------------------------------------------------------------------------

    async def position(self, scope: str, subscriber: str = INDEX_SUBSCRIBER) -> int:
        return await self._read(lambda conn: q.position(conn, scope, subscriber))

    async def subscribe(self, scope: str, subscriber: str, position: int = 0) -> None:
        await self._write(lambda conn: q.set_position(conn, scope, subscriber, position, only_forward=False))

    async def subscribers(self, scope: str) -> dict[str, int]:
        return await self._read(lambda conn: q.subscribers(conn, scope))

    # -- feeding from the log ---------------------------------------------------------------------------------

    async def apply(self, state: ScopeState, entries: Sequence[Entry]) -> None:
        """Apply a scope's entries (idempotent by seq) and its current state to the index, in one transaction; a
        milestones row this index committed last for the scope is not written again."""
        seen = self._milestones_written
        values = q.milestone_values(state)
        known = state.scope in seen and seen[state.scope] == values
        await self._write(lambda conn: q.apply_entries(conn, state, entries, milestones_known=known))
        seen.pop(state.scope, None)
        seen[state.scope] = values
        while len(seen) > MILESTONES_KEPT:
            seen.pop(next(iter(seen)))

    async def rebuild(
        self,
        items: Sequence[tuple[ScopeState, Sequence[Entry]]],
        *,
        fresh: bool = True,
        routes: Mapping[str, str] | None = None,
    ) -> None:
        await self._write(lambda conn: q.rebuild(conn, items, fresh=fresh, more_routes=routes))
