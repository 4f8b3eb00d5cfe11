"""The index in one SQLite file (``DATA_DIR/index.db``): the ``IndexPort`` with FTS5 for full-text search.

Its SQL is core/index/statements.py over core/index/tables.py (the same statements the PostgreSQL index runs);
this module makes the file (the tables, the FTS5 table, the columns an older index.db lacks) and runs each
statement on the same group-committing ``SqliteFile`` as the scope logs, on the log store's worker threads.
Everything here is derived from the scope logs and can be rebuilt from the scope files alone (``decklog reindex``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from decklog.core.entries import Entry
from decklog.core.ids import ScopeId
from decklog.core.index import statements as q
from decklog.core.index.statements import INDEX_SUBSCRIBER
from decklog.core.index.tables import md
from decklog.core.index.text import search_words
from decklog.core.state import ScopeState
from decklog.core.store.ports import Milestones, ScopeRow, SearchHit
from decklog.core.store.sqlite.file import SqliteFile

FTS_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(scope UNINDEXED, seq UNINDEXED, kind UNINDEXED, text)"
)
#: How many scopes' last milestones rows an index remembers (so that an alert storm's applies skip rewriting them).
MILESTONES_KEPT = 4096


def fts_query(text: str) -> str:
    """Turn free text into a safe FTS5 query: each word quoted, OR-ed (ranked by bm25)."""
    return " OR ".join(f'"{w}"' for w in search_words(text))


class SqliteIndex:
    """``index.db``. All methods are async; writes are group-committed like the scope logs."""

    def __init__(self, path: Path, executor: Executor) -> None:
        self.path = path
        self.file: SqliteFile[None] = SqliteFile(
            path,
            executor,
            init_schema=self._init_schema,
            begin_batch=lambda _c: None,
            end_batch=lambda _c, _x: None,
        )
        # The milestones row last committed per scope (a cache of this process's own writes, bounded).
        self._milestones_written: dict[str, dict[str, Any] | None] = {}

    @staticmethod
    def _init_schema(conn: Connection) -> None:
        md.create_all(conn)  # the milestones table too, on an index.db made before insights
        columns = {r[1] for r in conn.exec_driver_sql("PRAGMA table_info(scopes)")}
        if "forked_from" not in columns:  # an index.db made before forks were kept out of routing
            conn.exec_driver_sql("ALTER TABLE scopes ADD COLUMN forked_from VARCHAR NOT NULL DEFAULT ''")
        if "changed_at" not in columns:  # an index.db made before a change's own time was kept (reindex fills it)
            conn.exec_driver_sql("ALTER TABLE scopes ADD COLUMN changed_at VARCHAR NOT NULL DEFAULT ''")
        if "paged" not in {r[1] for r in conn.exec_driver_sql("PRAGMA table_info(milestones)")}:
            conn.exec_driver_sql("ALTER TABLE milestones ADD COLUMN paged FLOAT")  # an index.db made before on-call
        conn.exec_driver_sql(FTS_DDL)

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        await self.file.open()

    async def close(self) -> None:
        await self.file.close()

    async def ping(self) -> None:
        await self.file.write(lambda _c, _x: None)

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
        return await self.file.write(
            lambda conn, _: q.reserve_scope(conn, kind, base, exact=exact, on_disk=on_disk, inbound_key=inbound_key)
        )

    async def inbound_scope(self, key: str) -> str | None:
        return await self.file.read(lambda conn: q.inbound_scope(conn, key), small=True)

    async def claim_fingerprint(self, fingerprint: str, scope: str, service: str) -> None:
        await self.file.write(lambda conn, _: q.claim_fingerprint(conn, fingerprint, scope, service))

    async def add_route(self, key: str, scope: str) -> None:
        await self.file.write(lambda conn, _: q.add_route(conn, key, scope))

    # -- lookups ----------------------------------------------------------------------------------------------

    async def route(self, channel: str, thread_ts: str = "") -> str | None:
        return await self.file.read(lambda conn: q.route(conn, channel, thread_ts))

    async def open_scope_for_fingerprint(self, fingerprint: str) -> str | None:
        return await self.file.read(lambda conn: q.open_scope_for_fingerprint(conn, fingerprint))

    async def last_scope_for_fingerprint(self, fingerprint: str) -> str | None:
        return await self.file.read(lambda conn: q.last_scope_for_fingerprint(conn, fingerprint))

    async def get(self, scope: str) -> ScopeRow | None:
        return await self.file.read(lambda conn: q.get(conn, scope))

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
        return await self.file.read(
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
        return await self.file.read(lambda conn: q.unresolved_incidents(conn, limit))

    async def changes_on(
        self, services: Sequence[str], since: datetime, until: datetime | None = None
    ) -> list[tuple[ScopeRow, datetime]]:
        return await self.file.read(lambda conn: q.changes_on(conn, services, since, until))

    async def search(
        self,
        text: str,
        *,
        limit: int = 20,
        exclude_scope: str | None = None,
        scope_kind: str | None = None,
        kinds: Sequence[str] = (),
    ) -> list[SearchHit]:
        query = fts_query(text)
        if not query:
            return []

        def run(conn: Connection) -> list[SearchHit]:
            sql = (
                "SELECT scope, seq, kind, snippet(entries_fts, 3, '[', ']', '…', 12), bm25(entries_fts) "
                "FROM entries_fts WHERE entries_fts MATCH :q"
            )
            params: dict[str, Any] = {"q": query, "limit": limit}
            if exclude_scope:
                sql += " AND scope != :ex"
                params["ex"] = exclude_scope
            if scope_kind:
                sql += " AND scope LIKE :sk"
                params["sk"] = f"{scope_kind}/%"
            if kinds:
                names = [f":k{i}" for i in range(len(kinds))]
                sql += f" AND kind IN ({', '.join(names)})"
                params.update({f"k{i}": k for i, k in enumerate(kinds)})
            sql += " ORDER BY bm25(entries_fts) LIMIT :limit"
            return [SearchHit(r[0], int(r[1]), r[2], r[3], float(r[4])) for r in conn.execute(sa.text(sql), params)]

        return await self.file.read(run)

    async def titles(self, ids: Sequence[str]) -> dict[str, str]:
        if not ids:
            return {}
        return await self.file.read(lambda conn: q.titles(conn, ids))

    async def counts(self) -> dict[str, int]:
        return await self.file.read(q.counts)

    async def milestones(self, since: float | None) -> list[Milestones]:
        return await self.file.read(lambda conn: q.read_milestones(conn, since))

    # -- subscriptions ----------------------------------------------------------------------------------------

    async def position(self, scope: str, subscriber: str = INDEX_SUBSCRIBER) -> int:
        return await self.file.read(lambda conn: q.position(conn, scope, subscriber))

    async def subscribe(self, scope: str, subscriber: str, position: int = 0) -> None:
        await self.file.write(lambda conn, _: q.set_position(conn, scope, subscriber, position, only_forward=False))

    async def subscribers(self, scope: str) -> dict[str, int]:
        return await self.file.read(lambda conn: q.subscribers(conn, scope))

    # -- feeding from the log ---------------------------------------------------------------------------------

    async def apply(self, state: ScopeState, entries: Sequence[Entry]) -> None:
        """Apply a scope's entries (idempotent by seq) and its current state to the index, in one transaction; a
        milestones row this index committed last for the scope is not written again."""
        seen = self._milestones_written
        values = q.milestone_values(state)
        known = state.scope in seen and seen[state.scope] == values
        await self.file.write(  # derived: a lost apply is redelivered, or rebuilt by reindex
            lambda conn, _: q.apply_entries(conn, state, entries, milestones_known=known), durable=False
        )
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
        await self.file.write(lambda conn, _: q.rebuild(conn, items, fresh=fresh, more_routes=routes))
