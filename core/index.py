"""The index (``DATA_DIR/index.db``): listing, routing, alert fingerprints, inbound dedup, full-text search.

Everything here is derived from the scope logs, fed through the outbox by ``IndexSender``, and can be rebuilt from
the scope files alone (``decklog reindex``). The only writes that do not come from the log are reservations made
*before* an append (a scope id, an inbound event id, an alert fingerprint); they are re-derived on reindex.
Its tables and rows are core/index_schema.py, applying entries is core/index_apply.py (both re-exported here).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.clock import parse_iso
from core.entries import Entry
from core.errors import Conflict
from core.ids import ScopeId
from core.index_apply import apply_entries as _apply
from core.index_apply import set_position as _set_position
from core.index_schema import FTS_DDL as FTS_DDL
from core.index_schema import INDEX_SUBSCRIBER as INDEX_SUBSCRIBER
from core.index_schema import IndexFile as IndexFile
from core.index_schema import ScopeRow as ScopeRow
from core.index_schema import SearchHit as SearchHit
from core.index_schema import fingerprints as fingerprints
from core.index_schema import fts_query as fts_query
from core.index_schema import inbound as inbound
from core.index_schema import md as md
from core.index_schema import route_key as route_key
from core.index_schema import routes as routes
from core.index_schema import scope_row
from core.index_schema import scopes as scopes
from core.index_schema import searchable_text as searchable_text
from core.index_schema import subscriptions as subscriptions
from core.insights import milestone_values, milestones, milestones_md
from core.state import ScopeState
from core.store.sqlite_file import SqliteFile

T = TypeVar("T")


class Index:
    """``index.db``. All methods are async; writes are group-committed like the scope logs."""

    def __init__(self, path: Path, executor: Executor) -> None:
        self.path = path
        self.file: IndexFile = SqliteFile(
            path,
            executor,
            init_schema=self._init_schema,
            begin_batch=lambda _c: None,
            end_batch=lambda _c, _x: None,
        )

    @staticmethod
    def _init_schema(conn: Connection) -> None:
        md.create_all(conn)
        columns = {r[1] for r in conn.exec_driver_sql("PRAGMA table_info(scopes)")}
        if "forked_from" not in columns:  # an index.db made before forks were kept out of routing (issue 31)
            conn.exec_driver_sql("ALTER TABLE scopes ADD COLUMN forked_from VARCHAR NOT NULL DEFAULT ''")
        milestones_md.create_all(conn)  # added with insights (issue 18): created on an older index.db too
        conn.exec_driver_sql(FTS_DDL)

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        await self.file.open()

    async def close(self) -> None:
        await self.file.close()

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
        """Reserve a never-used scope id: ``base``, else ``base-2``, ``base-3``… (``exact``: ``base`` or Conflict).

        ``on_disk(id)`` says whether the log store already holds an id (the index may be behind or rebuilt); it is
        asked only about the candidates, on the writer's thread. With ``inbound_key``, the
        inbound event is recorded against the id in the same transaction — and if that event was already
        recorded (a concurrent retry won), its scope is returned and nothing is reserved.
        """

        def w(conn: Connection, _: None) -> ScopeId:
            if inbound_key is not None:
                known = conn.execute(sa.select(inbound.c.scope).where(inbound.c.key == inbound_key)).scalar()
                if known is not None:
                    return ScopeId.parse(str(known))
            existing = {
                r[0]
                for r in conn.execute(
                    sa.select(scopes.c.id).where(
                        sa.or_(scopes.c.id == f"{kind}/{base}", scopes.c.id.like(f"{kind}/{base}-%"))
                    )
                )
            }

            def taken(scope_id: str) -> bool:
                return scope_id in existing or on_disk(scope_id)

            candidate = ScopeId.parse(f"{kind}/{base}")
            if taken(str(candidate)):
                if exact:
                    raise Conflict(f"scope {candidate} already exists (scope ids are never reused)")
                n = 2
                while taken(f"{kind}/{base}-{n}"):
                    n += 1
                candidate = ScopeId.parse(f"{kind}/{base}-{n}")
            conn.execute(
                scopes.insert().values(id=str(candidate), kind=kind, status="reserved", reserved_at=time.time())
            )
            if inbound_key is not None:
                conn.execute(inbound.insert().values(key=inbound_key, scope=str(candidate), at=time.time()))
            return candidate

        return await self.file.write(w)

    async def inbound_scope(self, key: str) -> str | None:
        return await self.file.read(
            lambda conn: conn.execute(sa.select(inbound.c.scope).where(inbound.c.key == key)).scalar(), small=True
        )

    async def claim_fingerprint(self, fingerprint: str, scope: str, service: str) -> None:
        def w(conn: Connection, _: None) -> None:
            conn.execute(
                fingerprints.delete().where(fingerprints.c.fingerprint == fingerprint, fingerprints.c.scope == scope)
            )
            conn.execute(
                fingerprints.insert().values(
                    fingerprint=fingerprint,
                    scope=scope,
                    service=service,
                    status="firing",
                    updated=time.time(),
                )
            )

        await self.file.write(w)

    async def add_route(self, key: str, scope: str) -> None:
        def w(conn: Connection, _: None) -> None:
            conn.execute(routes.delete().where(routes.c.key == key))
            conn.execute(routes.insert().values(key=key, scope=scope))

        await self.file.write(w)

    # -- lookups ----------------------------------------------------------------------------------------------

    async def route(self, channel: str, thread_ts: str = "") -> str | None:
        """The scope a Slack thread (or a dedicated channel) belongs to."""
        keys = [route_key(channel, thread_ts)] if thread_ts else []
        keys.append(route_key(channel))

        def q(conn: Connection) -> str | None:
            for key in keys:
                found = conn.execute(sa.select(routes.c.scope).where(routes.c.key == key)).scalar()
                if found is not None:
                    return str(found)
            return None

        return await self.file.read(q)

    async def open_scope_for_fingerprint(self, fingerprint: str) -> str | None:
        def q(conn: Connection) -> str | None:
            found = conn.execute(
                sa.select(fingerprints.c.scope)
                .join(scopes, scopes.c.id == fingerprints.c.scope)
                .where(
                    fingerprints.c.fingerprint == fingerprint,
                    scopes.c.status.not_in(["resolved"]),
                )
                .order_by(fingerprints.c.updated.desc())
            ).first()
            return str(found[0]) if found else None

        return await self.file.read(q)

    async def last_scope_for_fingerprint(self, fingerprint: str) -> str | None:
        """The scope that last claimed ``fingerprint``, open or resolved (an alert source's reopened incident)."""

        def q(conn: Connection) -> str | None:
            found = conn.execute(
                sa.select(fingerprints.c.scope)
                .where(fingerprints.c.fingerprint == fingerprint)
                .order_by(fingerprints.c.updated.desc())
            ).first()
            return str(found[0]) if found else None

        return await self.file.read(q)

    async def get(self, scope: str) -> ScopeRow | None:
        def q(conn: Connection) -> ScopeRow | None:
            r = conn.execute(sa.select(scopes).where(scopes.c.id == scope)).first()
            return scope_row(r) if r else None

        return await self.file.read(q)

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
        limit: int | None = 500,
    ) -> list[ScopeRow]:
        def q(conn: Connection) -> list[ScopeRow]:
            stmt = sa.select(scopes).where(scopes.c.status != "reserved")
            if kind:
                stmt = stmt.where(scopes.c.kind == kind)
            if status:
                stmt = stmt.where(scopes.c.status == status)
            if severity is not None:
                stmt = stmt.where(scopes.c.severity == severity)
            if open_only:  # a fork is never an open incident (nobody works on it; nothing routes to it)
                stmt = stmt.where(scopes.c.status != "resolved", scopes.c.forked_from == "")
            if service:
                stmt = stmt.where(scopes.c.services.like(f'%"{service}"%'))
            if updated_since:  # ISO times in one format (core/clock.py iso): text order is time order
                stmt = stmt.where(scopes.c.updated_at >= updated_since)
            if text:
                pattern = f"%{text.lower()}%"
                stmt = stmt.where(sa.or_(sa.func.lower(scopes.c.title).like(pattern), scopes.c.id.like(pattern)))
            stmt = stmt.order_by(scopes.c.created_at.desc(), scopes.c.id)
            return [scope_row(r) for r in conn.execute(stmt if limit is None else stmt.limit(limit))]

        return await self.file.read(q)

    async def unresolved_incidents(self, *, limit: int = 2000) -> list[str]:
        """Ids of incidents that are open or only reserved (declared, but the index has not seen the declaration
        yet — e.g. a crash before its delivery), newest first: what must be looked at to rebuild routing state."""

        def q(conn: Connection) -> list[str]:
            stmt = (
                sa.select(scopes.c.id)
                .where(scopes.c.kind == "incident", scopes.c.status != "resolved", scopes.c.forked_from == "")
                .order_by((scopes.c.created_at == "").desc(), scopes.c.created_at.desc(), scopes.c.id)
                .limit(limit)
            )
            return [str(r[0]) for r in conn.execute(stmt)]

        return await self.file.read(q)

    async def changes_on(
        self, services: Sequence[str], since: datetime, until: datetime | None = None
    ) -> list[tuple[ScopeRow, datetime]]:
        """Change scopes on any of ``services`` created in [``since``, ``until``], each once, newest first, with
        their creation time."""
        found: dict[str, tuple[ScopeRow, datetime]] = {}
        for service in services:
            for row in await self.list_scopes(kind="change", service=service, limit=50):
                try:
                    at = parse_iso(row.created_at) if row.created_at else None
                except ValueError:
                    at = None
                if at is not None and since <= at and (until is None or at <= until):
                    found[row.id] = (row, at)
        return sorted(found.values(), key=lambda pair: (pair[1], pair[0].id), reverse=True)

    async def search(
        self,
        text: str,
        *,
        limit: int = 20,
        exclude_scope: str | None = None,
        scope_kind: str | None = None,
        kinds: Sequence[str] = (),
    ) -> list[SearchHit]:
        """Entries matching any word of ``text``, best first; optionally only scopes of ``scope_kind`` and
        entries of ``kinds``."""
        query = fts_query(text)
        if not query:
            return []

        def q(conn: Connection) -> list[SearchHit]:
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

        return await self.file.read(q)

    async def titles(self, ids: Sequence[str]) -> dict[str, str]:
        """Scope id → title, for the given ids the index knows."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}

        def q(conn: Connection) -> dict[str, str]:
            rows = conn.execute(sa.select(scopes.c.id, scopes.c.title).where(scopes.c.id.in_(wanted)))
            return {str(r[0]): str(r[1]) for r in rows}

        return await self.file.read(q)

    async def position(self, scope: str, subscriber: str = INDEX_SUBSCRIBER) -> int:
        def q(conn: Connection) -> int:
            found = conn.execute(
                sa.select(subscriptions.c.position).where(
                    subscriptions.c.scope == scope, subscriptions.c.subscriber == subscriber
                )
            ).scalar()
            return int(found or 0)

        return await self.file.read(q)

    async def subscribe(self, scope: str, subscriber: str, position: int = 0) -> None:
        def w(conn: Connection, _: None) -> None:
            _set_position(conn, scope, subscriber, position, only_forward=False)

        await self.file.write(w)

    async def subscribers(self, scope: str) -> dict[str, int]:
        def q(conn: Connection) -> dict[str, int]:
            rows = conn.execute(
                sa.select(subscriptions.c.subscriber, subscriptions.c.position).where(subscriptions.c.scope == scope)
            )
            return {r[0]: int(r[1]) for r in rows}

        return await self.file.read(q)

    # -- feeding from the log ---------------------------------------------------------------------------------

    async def apply(self, state: ScopeState, entries: Sequence[Entry]) -> None:
        """Apply a scope's entries (idempotent by seq) and its current state to the index, in one transaction.

        The milestones row last committed per scope is remembered (a cache of this process's own writes, bounded),
        and the same row is not written again."""
        seen: dict[str, dict[str, Any] | None] = self.__dict__.setdefault("_milestones_written", {})
        values = milestone_values(state)
        known = state.scope in seen and seen[state.scope] == values

        def w(conn: Connection, _: None) -> None:
            _apply(conn, state, entries, milestones_known=known)

        await self.file.write(w, durable=False)  # derived: a lost apply is redelivered, or rebuilt by reindex
        seen.pop(state.scope, None)
        seen[state.scope] = values
        while len(seen) > 4096:
            seen.pop(next(iter(seen)))

    async def rebuild(self, items: Sequence[tuple[ScopeState, Sequence[Entry]]]) -> None:
        """Replace the index with what the given scopes' logs say (``decklog reindex``)."""

        def w(conn: Connection, _: None) -> None:
            for table in (scopes, routes, fingerprints, subscriptions, inbound, milestones):
                conn.execute(table.delete())
            conn.exec_driver_sql("DELETE FROM entries_fts")
            for state, entries in items:
                _apply(conn, state, entries)

        await self.file.write(w)

    async def counts(self) -> dict[str, int]:
        def q(conn: Connection) -> dict[str, int]:
            rows = conn.execute(sa.select(scopes.c.status, sa.func.count()).group_by(scopes.c.status))
            return {r[0]: int(r[1]) for r in rows}

        return await self.file.read(q)
