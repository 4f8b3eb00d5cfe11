"""The PostgreSQL log store: every scope in one database, appends with group commit under a per-scope row lock.

An append is one transaction at READ COMMITTED: ``SELECT … FOR UPDATE`` of the scope's ``scope_heads`` row (which
serialises appenders across processes: compare-and-set and the hash chain), then the entries, the folded state
and one outbox row per topic. Within a process, one writer per hot scope takes every request waiting for it into
one transaction (group commit), and other quiet scopes' waiting requests too (core/store/postgres_batch.py). Staging, the chain and the fold are the shared code in core/store/staging.py;
verify is core/store/verify.py; the schema is core/store/postgres_schema.py; the outbox and memos are
core/store/postgres_outbox.py. Work runs on worker threads with a sync psycopg 3 engine.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from core.clock import Clock, SystemClock
from core.entries import Entry, NewEntry
from core.errors import NotFound
from core.ids import ScopeId
from core.state import ScopeState, empty_state
from core.store import postgres_batch as multi
from core.store import postgres_bulk as bulk
from core.store import postgres_schema as pg
from core.store.chain import ChainKey
from core.store.ports import AppendResult, Decide, Listener, ScopeRef, VerifyReport, notify_listeners
from core.store.postgres_locks import AdvisoryLocks
from core.store.postgres_notify import CommitFeed, RemoteCommit
from core.store.postgres_outbox import PostgresOutbox, scope_key
from core.store.staging import Batch, Lookups, new_entry_id, stage
from core.store.statements import row_to_entry
from core.store.verify import verify_rows

log = logging.getLogger(__name__)
T = TypeVar("T")
E = pg.entries


@dataclass
class _Request:
    entries: Sequence[NewEntry] | Decide
    expected_version: int | None
    request_key: str | None
    create: bool
    future: asyncio.Future[AppendResult] = field(repr=False)


class PostgresLogStore(PostgresOutbox):
    """Every port of ``LogStore`` on one PostgreSQL database (``url``: ``postgresql://…``)."""

    def __init__(
        self,
        url: str,
        *,
        topics: Sequence[str] = ("index",),
        topic_kinds: Mapping[str, Collection[str]] | None = None,
        clock: Clock | None = None,
        threads: int = 8,
        engine: sa.Engine | None = None,
        log_key: str | bytes | None = None,
        notify: bool = True,
    ) -> None:
        self.url = url
        self.notify = notify  # False: other replicas find this one's commits only by their poll (a bench baseline)
        self.chain_key = ChainKey.of(log_key)  # DECKLOG_LOG_KEY: new scopes get a keyed chain (core/store/chain.py)
        self._own_engine = engine is None
        self.engine = engine or pg.make_engine(url, pool_size=threads)
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="decklog-pg")
        self.topics = tuple(topics)
        self.topic_kinds = {k: frozenset(v) for k, v in (topic_kinds or {}).items() if k in self.topics}
        self._kind_topics: dict[str, tuple[str, ...]] = {}
        self.clock: Clock = clock or SystemClock()
        self._listeners: list[Listener] = []
        self._pending: dict[str, list[_Request]] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}
        self._riding: dict[str, asyncio.Event] = {}  # scopes in a transaction now -> set when it has ended
        self.cross_scope = True  # False: one transaction per scope only (a bench baseline)
        self._schema_checked = False
        self._route_locks: AdvisoryLocks | None = None
        self.feed = CommitFeed(url)  # NOTIFY after each commit, LISTEN for the other replicas' (postgres_notify.py)
        self.appended_total = 0
        self.transactions = 0  # append transactions committed (group commit: fewer than the requests)

    # -- plumbing ---------------------------------------------------------------------------------------------

    async def run(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in one transaction on a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._tx, fn)

    def _tx(self, fn: Callable[[Connection], T]) -> T:
        self._check_schema()
        with self.engine.begin() as conn:
            return fn(conn)

    def _snapshot(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in one read-only REPEATABLE READ transaction (one snapshot for several reads)."""
        self._check_schema()
        with self.engine.connect() as raw:
            conn = raw.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            with conn.begin():
                return fn(conn)

    def _check_schema(self) -> None:
        if not self._schema_checked:
            with self.engine.begin() as conn:
                pg.ensure_schema(conn)
            self._schema_checked = True

    async def open(self) -> None:
        """Create or check the schema now (refusing a newer one); otherwise the first use does it."""
        await asyncio.get_running_loop().run_in_executor(self.executor, self._check_schema)

    def route_locks(self) -> AdvisoryLocks:
        """Keyed locks every replica on this database respects (the alert router's), closed with the store."""
        if self._route_locks is None:
            self._route_locks = AdvisoryLocks(self.url)
        return self._route_locks

    def refill_spares(self) -> None:
        """Nothing to prepare: a declaration inserts a row (the SQLite backend keeps spare files ready)."""

    @property
    def open_files(self) -> int:
        """Database connections checked out of the pool right now (the SQLite backend's open scope files)."""
        pool = self.engine.pool
        return int(pool.checkedout()) if isinstance(pool, sa.pool.QueuePool) else 0

    def topics_for(self, kind: str) -> tuple[str, ...]:
        found = self._kind_topics.get(kind)
        if found is None:
            found = tuple(t for t in self.topics if t not in self.topic_kinds or kind in self.topic_kinds[t])
            self._kind_topics[kind] = found
        return found

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _notify(self, scope: str, entries: tuple[Entry, ...]) -> None:
        notify_listeners(self._listeners, scope, entries)
        topics = {t for e in entries for t in self.topics_for(e.kind)} if entries else set(self.topics)
        if topics and self.notify:
            self.feed.publish(scope, topics)

    def on_remote_commit(self, callback: RemoteCommit) -> None:
        """``callback(scope, topics, drained)`` for each commit another process makes (LISTEN; a poll stays the net)."""
        if self.notify:
            self.feed.listen(callback)

    async def close(self) -> None:
        writers = list(self._writers.values())
        if writers:
            await asyncio.gather(*writers, return_exceptions=True)
        if self._route_locks is not None:
            await self._route_locks.close()
        await self.feed.close()
        self.executor.shutdown(wait=True)
        if self._own_engine:
            self.engine.dispose()

    # -- append (group commit per scope) ----------------------------------------------------------------------

    async def append(
        self,
        scope: ScopeRef,
        entries: Sequence[NewEntry] | Decide,
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        create: bool = False,
    ) -> AppendResult:
        key = scope_key(scope)
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, []).append(_Request(entries, expected_version, idempotency_key, create, future))
        if key not in self._writers:
            self._writers[key] = asyncio.ensure_future(self._write_loop(key))
        result = await future
        if not result.duplicate and result.entries:
            self.appended_total += len(result.entries)
            self._notify(key, result.entries)
        return result

    async def _write_loop(self, key: str) -> None:
        """One writer per scope: every request that waits while a transaction commits shares the next one, and
        so do other scopes' waiting requests whose writers are not in a transaction (core/store/postgres_batch.py)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                while key in self._riding:  # its earlier requests are in another scope's transaction
                    await self._riding[key].wait()
                if not self._pending.get(key):
                    break
                riders = multi.riders(self._pending, self._riding, key) if self.cross_scope else {}
                batches = {key: self._pending.pop(key), **riders}
                done = asyncio.Event()
                for k in batches:
                    self._riding[k] = done
                try:
                    if len(batches) == 1:
                        outcomes = {key: await loop.run_in_executor(self.executor, self._run_batch, key, batches[key])}
                    else:
                        outcomes = await loop.run_in_executor(self.executor, self._run_scopes, batches)
                except BaseException as exc:  # the transaction itself failed: every request in it did
                    outcomes = {k: [exc] * len(b) for k, b in batches.items()}
                    if not isinstance(exc, Exception):
                        multi.settle(batches, outcomes)
                        raise
                finally:
                    for k in batches:
                        self._riding.pop(k, None)
                    done.set()
                multi.settle(batches, outcomes)
        finally:
            self._writers.pop(key, None)

    def _run_scopes(self, batches: dict[str, list[_Request]]) -> dict[str, list[AppendResult | BaseException]]:
        """Several scopes in one transaction; if it fails as a whole, each scope in its own."""
        self._check_schema()
        try:
            with self.engine.begin() as conn:
                outcomes = multi.run_multi(self, conn, batches)
        except Exception:
            log.debug("a multi-scope append failed; retrying each scope alone", exc_info=True)
            return {k: self._run_alone(k, b) for k, b in batches.items()}
        self.transactions += 1
        return outcomes

    def _run_alone(self, key: str, batch: list[_Request]) -> list[AppendResult | BaseException]:
        try:
            return self._run_batch(key, batch)
        except Exception as exc:
            return [exc] * len(batch)

    def _run_batch(self, key: str, batch: list[_Request]) -> list[AppendResult | BaseException]:
        self._check_schema()
        with self.engine.begin() as conn:
            b = self.lock_head(conn, key, create=any(r.create for r in batch))
            outcomes: list[AppendResult | BaseException] = []
            for r in batch:
                try:
                    if not r.create and b.state.version == 0:
                        raise NotFound(f"no such scope: {key}")
                    outcomes.append(self.stage(conn, b, r.entries, r.expected_version, r.request_key))
                except Exception as exc:  # staging raises before touching the batch: neighbours are unharmed
                    outcomes.append(exc)
            if not b.entry_rows:
                conn.rollback()  # nothing to write (and a row made for a create that failed goes too)
                return outcomes
            self.write_batch(conn, b)
        self.transactions += 1
        return outcomes

    def lock_head(self, conn: Connection, key: str, *, create: bool) -> Batch:
        """Lock the scope's head row for this transaction (making it first when creating) and start a batch."""
        h = pg.scope_heads
        if create:
            conn.execute(
                pg_insert(h)
                .values(scope_id=key, version=0, head_hash="", head_at="", body="")
                .on_conflict_do_nothing(index_elements=[h.c.scope_id])
            )
        row = conn.execute(sa.select(h).where(h.c.scope_id == key).with_for_update()).first()
        if row is None or row.version == 0:
            return Batch(key, empty_state(key), "", "", existed=False)
        return Batch(key, ScopeState.model_validate_json(row.body), row.head_hash, row.head_at, existed=True)

    def stage(
        self,
        conn: Connection,
        b: Batch,
        entries: Sequence[NewEntry] | Decide,
        expected_version: int | None,
        request_key: str | None,
    ) -> AppendResult:
        return stage(b, entries, expected_version, request_key, now=self.clock.now(), look=self._lookups(conn, b))

    def _lookups(self, conn: Connection, b: Batch) -> Lookups:
        key_col = E.c.idempotency_key

        def by_request_key(k: str) -> list[Entry]:
            where = sa.or_(key_col == k, sa.and_(key_col > k + "#", key_col < k + "$"))
            rows = conn.execute(sa.select(E).where(E.c.scope_id == b.scope, where).order_by(E.c.seq)).all()
            return [row_to_entry(b.scope, r) for r in rows]

        def by_entry_keys(keys: list[str]) -> list[Entry]:
            stmt = sa.select(E).where(E.c.scope_id == b.scope, key_col.in_(keys)).order_by(E.c.seq)
            return [row_to_entry(b.scope, r) for r in conn.execute(stmt)]

        return Lookups(by_request_key, by_entry_keys, self.topics_for, new_id=new_entry_id, chain_key=self.chain_key)

    def write_batch(self, conn: Connection, b: Batch) -> None:
        """Write a staged batch: entries, outbox rows (and cursor rows for new topics) and the head."""
        bulk.insert_entries(conn, [{"scope_id": b.scope, **row} for row in b.entry_rows])
        bulk.insert_outbox(conn, [{"scope_id": b.scope, **row} for row in b.outbox_rows])
        if not b.existed:
            cursors = [{"scope_id": b.scope, "topic": topic} for topic in self.topics]
            conn.execute(pg_insert(pg.outbox_cursors).on_conflict_do_nothing(), cursors)
        conn.execute(
            pg.scope_heads.update()
            .where(pg.scope_heads.c.scope_id == b.scope)
            .values(version=b.state.version, head_hash=b.head_hash, head_at=b.head_at, body=b.state.model_dump_json())
        )

    # -- reads ------------------------------------------------------------------------------------------------

    def _require(self, conn: Connection, key: str) -> None:
        h = pg.scope_heads
        found = conn.execute(sa.select(h.c.version).where(h.c.scope_id == key)).scalar()
        if not found:
            raise NotFound(f"no such scope: {key}")

    async def _entries(self, key: str, stmt: Any, *, newest_first: bool = False) -> list[Entry]:
        def q(conn: Connection) -> list[Entry]:
            rows = conn.execute(stmt).all()
            if not rows:
                self._require(conn, key)
            return [row_to_entry(key, r) for r in (reversed(rows) if newest_first else rows)]

        return await self.run(q)

    async def read(
        self, scope: ScopeRef, *, after: int = 0, limit: int | None = None, kinds: Sequence[str] = ()
    ) -> list[Entry]:
        key = scope_key(scope)
        stmt = sa.select(E).where(E.c.scope_id == key, E.c.seq > after).order_by(E.c.seq)
        if kinds:
            stmt = stmt.where(E.c.kind.in_(list(kinds)))
        if limit is not None:
            stmt = stmt.limit(limit)
        return await self._entries(key, stmt)

    async def read_seqs(self, scope: ScopeRef, seqs: Sequence[int]) -> list[Entry]:
        key = scope_key(scope)
        if not seqs:
            await self.run(lambda conn: self._require(conn, key))
            return []
        stmt = sa.select(E).where(E.c.scope_id == key, E.c.seq.in_(sorted(set(seqs)))).order_by(E.c.seq)
        return await self._entries(key, stmt)

    async def read_last(self, scope: ScopeRef, *, limit: int, kinds: Sequence[str] = ()) -> list[Entry]:
        key = scope_key(scope)
        stmt = sa.select(E).where(E.c.scope_id == key).order_by(E.c.seq.desc()).limit(max(limit, 0))
        if kinds:
            stmt = stmt.where(E.c.kind.in_(list(kinds)))
        return await self._entries(key, stmt, newest_first=True)

    async def get_state(self, scope: ScopeRef) -> ScopeState:
        key = scope_key(scope)

        def q(conn: Connection) -> ScopeState:
            h = pg.scope_heads
            row = conn.execute(sa.select(h.c.version, h.c.body).where(h.c.scope_id == key)).first()
            if row is None or not row.version:
                raise NotFound(f"no such scope: {key}")
            return ScopeState.model_validate_json(row.body)

        return await self.run(q)

    async def exists(self, scope: ScopeRef) -> bool:
        key = scope_key(scope)
        h = pg.scope_heads
        version = await self.run(lambda c: c.execute(sa.select(h.c.version).where(h.c.scope_id == key)).scalar())
        return bool(version)

    def holds(self, scope: ScopeRef) -> bool:
        """Synchronous (the index asks it on its writer thread): one indexed lookup."""
        key = scope_key(scope)
        h = pg.scope_heads
        return bool(self._tx(lambda c: c.execute(sa.select(h.c.version).where(h.c.scope_id == key)).scalar()))

    async def scope_ids(self) -> list[ScopeId]:
        h = pg.scope_heads

        def q(conn: Connection) -> list[str]:
            stmt = sa.select(h.c.scope_id).where(h.c.version > 0).order_by(h.c.scope_id)
            return [str(r[0]) for r in conn.execute(stmt)]

        # in the SQLite backend's order (its file names: ``x-2.db`` before ``x.db``), so listings match
        return sorted((ScopeId.parse(k) for k in await self.run(q)), key=lambda s: s.file_stem + ".db")

    async def verify(self, scope: ScopeRef) -> VerifyReport:
        """Recompute the chain from the stored columns and fold the log; compare with the stored head (read-only)."""
        key = scope_key(scope)

        def q(conn: Connection) -> VerifyReport:
            h = pg.scope_heads
            head = conn.execute(sa.select(h).where(h.c.scope_id == key)).first()
            if head is None or not head.version:
                raise NotFound(f"no such scope: {key}")
            rows = conn.execute(sa.select(E).where(E.c.scope_id == key).order_by(E.c.seq))
            return verify_rows(key, rows, head, key=self.chain_key)

        return await asyncio.get_running_loop().run_in_executor(self.executor, self._snapshot, q)
