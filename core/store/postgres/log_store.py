"""The PostgreSQL log store: every scope in one database, appends with group commit under a per-scope row lock.

An append is one transaction at READ COMMITTED: ``SELECT … FOR UPDATE`` of the scope's ``scope_heads`` row (which
serialises appenders across processes: compare-and-set and the hash chain), then the entries, the folded state
and one outbox row per topic. Within a process, one writer per hot scope takes every request waiting for it into
one transaction (group commit), and the requests waiting for other scopes whose writers are not in a transaction
ride along in the same one (``_run_scopes``): many quiet scopes (one producer each) otherwise pay one commit per
append; together they pay one. Rows go to the database with ``COPY`` (``_copy_rows``). Staging, the chain and the
fold are the shared code in core/store/staging.py; verify is core/store/verify.py; the tables are
core/store/postgres/schema.py. Work runs on worker threads with a sync psycopg 3 engine.

The store also holds what several replicas on the database share about delivery and scheduling: the outbox's
(scope, topic) cursors (``take_cursor``: ``FOR UPDATE SKIP LOCKED`` under a lease, the ``CursorClaims`` port), the
other replicas' commits (``on_remote_commit``, LISTEN/NOTIFY), and named leases (``try_lease``, the ``Leases``
port). Times written here (published, parked, leases) come from the database clock, so replicas on machines whose
clocks disagree agree.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from decklog.core.clock import Clock, SystemClock
from decklog.core.entries import Actor, DeliveryFailed, Entry, NewEntry, canonical_json
from decklog.core.errors import NotFound
from decklog.core.ids import ScopeId
from decklog.core.state import ScopeState, empty_state
from decklog.core.store.chain import ChainKey
from decklog.core.store.ports import (
    AppendResult,
    CursorClaim,
    Decide,
    Listener,
    OutboxItem,
    OutboxSummary,
    ParkedItem,
    RemoteCommit,
    ScopeRef,
    VerifyReport,
    notify_listeners,
)
from decklog.core.store.postgres import schema as pg
from decklog.core.store.postgres.liveness import GRACE_S, LIVE_PREFIX, Liveness, holder_lock
from decklog.core.store.postgres.notify import NotifyFeed
from decklog.core.store.rows import row_to_entry
from decklog.core.store.staging import Batch, Lookups, new_entry_id, stage
from decklog.core.store.verify import verify_rows

log = logging.getLogger(__name__)
T = TypeVar("T")
E, OB, M, C = pg.entries, pg.outbox, pg.sender_memos, pg.outbox_cursors
DB_NOW = sa.func.extract("epoch", sa.func.clock_timestamp())
_GRACE = sa.func.make_interval(0, 0, 0, 0, 0, 0, GRACE_S)


def _holder_gone(conn: Connection, owner: str) -> bool:
    """Whether ``owner`` holds a liveness lock that no session holds any more (its process is gone). The probe is a
    transaction-level lock: given back when this transaction ends."""
    if not owner.startswith(LIVE_PREFIX):
        return False
    return bool(conn.execute(sa.select(sa.func.pg_try_advisory_xact_lock(holder_lock(owner)))).scalar())


#: Scopes one transaction takes at most (the lead scope and its riders).
MAX_SCOPES = 32
Outcome = AppendResult | BaseException

ENTRY_COLUMNS = (
    "scope_id",
    "seq",
    "id",
    "kind",
    "at",
    "actor",
    "payload",
    "refs",
    "idempotency_key",
    "prev_hash",
    "hash",
)
OUTBOX_COLUMNS = ("scope_id", "topic", "seq")


def scope_key(scope: ScopeRef) -> str:
    return str(scope if isinstance(scope, ScopeId) else ScopeId.parse(scope))


def _require(conn: Connection, key: str) -> None:
    h = pg.scope_heads
    if not conn.execute(sa.select(h.c.version).where(h.c.scope_id == key)).scalar():
        raise NotFound(f"no such scope: {key}")


@dataclass
class _Request:
    entries: Sequence[NewEntry] | Decide
    expected_version: int | None
    request_key: str | None
    create: bool
    future: asyncio.Future[AppendResult] = field(repr=False)


class PostgresLogStore:
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
        cross_scope: bool = True,
    ) -> None:
        """``notify=False``: other replicas find this one's commits only by their poll; ``cross_scope=False``: one
        transaction per scope only (both bench baselines)."""
        self.url = url
        self.notify = notify
        self.chain_key = ChainKey.of(log_key)  # DECKLOG_LOG_KEY: new scopes get a keyed chain (core/store/chain.py)
        self._own_engine = engine is None
        self.engine = engine or pg.make_engine(url, pool_size=threads)
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="decklog-pg")
        self.topics = tuple(topics)
        self.topic_kinds = {k: frozenset(v) for k, v in (topic_kinds or {}).items() if k in self.topics}
        self._kind_topics: dict[str, tuple[str, ...]] = {}
        self.clock: Clock = clock or SystemClock()
        self._listeners: list[Listener] = []
        self._liveness: Liveness | None = None
        self._pending: dict[str, list[_Request]] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}
        self._riding: dict[str, asyncio.Event] = {}  # scopes in a transaction now -> set when it has ended
        self.cross_scope = cross_scope
        self._schema_checked = False
        self.feed = NotifyFeed(url)  # NOTIFY after each commit, LISTEN for the other replicas' (notify.py)
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

    def refill_spares(self) -> None:
        """Nothing to prepare: a declaration inserts a row (the SQLite backend keeps spare files ready)."""

    @property
    def open_files(self) -> int:
        """Database connections checked out of the pool right now (the SQLite backend's open scope files)."""
        pool = self.engine.pool
        return int(pool.checkedout()) if isinstance(pool, sa.pool.QueuePool) else 0

    def topics_for(self, kind: str) -> tuple[str, ...]:
        """The outbox topics an entry of ``kind`` gets a row in (every topic, less those that filter it out)."""
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
        await self.feed.close()
        if self._liveness is not None:
            await asyncio.to_thread(self._liveness.close)
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
        so do other scopes' waiting requests whose writers are not in a transaction (``_riders``)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                while key in self._riding:  # its earlier requests are in another scope's transaction
                    await self._riding[key].wait()
                if not self._pending.get(key):
                    break
                riders = _riders(self._pending, self._riding, key) if self.cross_scope else {}
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
                        _settle(batches, outcomes)
                        raise
                finally:
                    for k in batches:
                        self._riding.pop(k, None)
                    done.set()
                _settle(batches, outcomes)
        finally:
            self._writers.pop(key, None)

    def _run_scopes(self, batches: dict[str, list[_Request]]) -> dict[str, list[Outcome]]:
        """Several scopes in one transaction; if it fails as a whole (a unique key taken by another replica
        meanwhile), each scope in its own."""
        self._check_schema()
        try:
            with self.engine.begin() as conn:
                outcomes = self._run_multi(conn, batches)
        except Exception:
            log.debug("a multi-scope append failed; retrying each scope alone", exc_info=True)
            return {k: self._run_alone(k, b) for k, b in batches.items()}
        self.transactions += 1
        return outcomes

    def _run_alone(self, key: str, batch: list[_Request]) -> list[Outcome]:
        try:
            return self._run_batch(key, batch)
        except Exception as exc:
            return [exc] * len(batch)

    def _run_batch(self, key: str, batch: list[_Request]) -> list[Outcome]:
        self._check_schema()
        with self.engine.begin() as conn:
            b = self.lock_head(conn, key, create=any(r.create for r in batch))
            outcomes: list[Outcome] = []
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

    def _run_multi(self, conn: Connection, batches: Mapping[str, Sequence[_Request]]) -> dict[str, list[Outcome]]:
        """Stage and write every scope's requests in the transaction of ``conn`` (its riders' scopes exist already).
        The heads are locked ``FOR UPDATE`` in one statement in ``scope_id`` order (every multi-scope transaction, in
        every replica, locks in that order: no deadlock); each scope is staged as in its own transaction (a request
        that fails staging fails alone); the rows of every scope go in one ``COPY`` per table. Returns each scope's
        outcomes; rolls back when nothing was staged."""
        heads = _lock_heads(conn, list(batches))
        results = {key: self._stage_all(conn, heads[key], batch) for key, batch in batches.items()}
        staged = [b for b in heads.values() if b.entry_rows]
        if not staged:
            conn.rollback()
            return results
        _write_all(conn, staged)
        return results

    def _stage_all(self, conn: Connection, b: Batch, batch: Sequence[_Request]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for r in batch:
            try:
                if b.state.version == 0:
                    raise NotFound(f"no such scope: {b.scope}")
                outcomes.append(self.stage(conn, b, r.entries, r.expected_version, r.request_key))
            except Exception as exc:  # staging raises before touching the batch: neighbours are unharmed
                outcomes.append(exc)
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
        _copy_rows(conn, COPY_ENTRIES, ENTRY_COLUMNS, [{"scope_id": b.scope, **row} for row in b.entry_rows])
        _copy_rows(conn, COPY_OUTBOX, OUTBOX_COLUMNS, [{"scope_id": b.scope, **row} for row in b.outbox_rows])
        if not b.existed:
            cursors = [{"scope_id": b.scope, "topic": topic} for topic in self.topics]
            conn.execute(pg_insert(pg.outbox_cursors).on_conflict_do_nothing(), cursors)
        conn.execute(
            pg.scope_heads.update()
            .where(pg.scope_heads.c.scope_id == b.scope)
            .values(version=b.state.version, head_hash=b.head_hash, head_at=b.head_at, body=b.state.model_dump_json())
        )

    # -- reads ------------------------------------------------------------------------------------------------

    async def _entries(self, key: str, stmt: Any, *, newest_first: bool = False) -> list[Entry]:
        def q(conn: Connection) -> list[Entry]:
            rows = conn.execute(stmt).all()
            if not rows:
                _require(conn, key)
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
            await self.run(lambda conn: _require(conn, key))
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

    # -- outbox -----------------------------------------------------------------------------------------------

    async def outbox_pending(self, scope: ScopeRef, topic: str, *, limit: int = 100) -> list[OutboxItem]:
        key = scope_key(scope)
        stmt = (
            sa.select(E, OB.c.attempts, OB.c.next_attempt_at)
            .join(OB, sa.and_(OB.c.scope_id == E.c.scope_id, OB.c.seq == E.c.seq))
            .where(OB.c.scope_id == key, OB.c.topic == topic, OB.c.published_at.is_(None), OB.c.parked_at.is_(None))
            .order_by(OB.c.seq)
            .limit(limit)
        )

        def q(conn: Connection) -> list[OutboxItem]:
            rows = conn.execute(stmt).all()
            if not rows:
                _require(conn, key)
            return [OutboxItem(topic, row_to_entry(key, r), r.attempts, r.next_attempt_at) for r in rows]

        return await self.run(q)

    async def outbox_done(self, scope: ScopeRef, topic: str, seqs: Sequence[int]) -> None:
        if not seqs:
            return
        key = scope_key(scope)
        stmt = (
            OB.update()
            .where(OB.c.scope_id == key, OB.c.topic == topic, OB.c.seq.in_(list(seqs)))
            .values(published_at=DB_NOW)
        )
        await self.run(lambda conn: conn.execute(stmt))

    async def outbox_failed(
        self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, next_attempt_at: float, error: str
    ) -> None:
        key = scope_key(scope)
        stmt = (
            OB.update()
            .where(OB.c.scope_id == key, OB.c.topic == topic, OB.c.seq == seq)
            .values(attempts=attempts, next_attempt_at=next_attempt_at, last_error=error[:2000])
        )
        await self.run(lambda conn: conn.execute(stmt))

    async def outbox_park(self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, error: str) -> None:
        """Park a row past its retry budget and append a visible ``delivery_failed`` entry, in one transaction."""
        key = scope_key(scope)

        def w(conn: Connection) -> tuple[Entry, ...]:
            b = self.lock_head(conn, key, create=False)
            if not b.existed:
                raise NotFound(f"no such scope: {key}")
            conn.execute(
                OB.update()
                .where(OB.c.scope_id == key, OB.c.topic == topic, OB.c.seq == seq)
                .values(attempts=attempts, parked_at=DB_NOW, last_error=error[:2000])
            )
            kind = conn.execute(sa.select(E.c.kind).where(E.c.scope_id == key, E.c.seq == seq)).scalar()
            if kind == "delivery_failed":
                return ()  # never a failure about a failure
            note = NewEntry.make(
                "delivery_failed",
                Actor.system("dispatcher"),
                DeliveryFailed(sender=topic, seq=seq, attempts=attempts, error=error[:500]),
                refs=(seq,),
            )
            made = self.stage(conn, b, [note], None, None).entries
            self.write_batch(conn, b)
            return made

        failed = await self.run(w)
        if failed:
            self.appended_total += len(failed)
            self._notify(key, failed)

    async def outbox_summary(self, scope: ScopeRef) -> OutboxSummary:
        key = scope_key(scope)
        waiting = sa.and_(OB.c.published_at.is_(None), OB.c.parked_at.is_(None))
        stmt = (
            sa.select(
                OB.c.topic,
                sa.func.count().filter(waiting),
                sa.func.count().filter(OB.c.parked_at.is_not(None)),
            )
            .where(OB.c.scope_id == key)
            .group_by(OB.c.topic)
        )

        def q(conn: Connection) -> OutboxSummary:
            _require(conn, key)
            rows = conn.execute(stmt).all()
            return OutboxSummary(key, {r[0]: int(r[1]) for r in rows if r[1]}, {r[0]: int(r[2]) for r in rows if r[2]})

        return await self.run(q)

    async def outbox_parked(self, scope: ScopeRef) -> list[ParkedItem]:
        key = scope_key(scope)
        stmt = (
            sa.select(OB.c.topic, OB.c.seq, E.c.kind, OB.c.attempts, OB.c.last_error, OB.c.parked_at)
            .join(E, sa.and_(E.c.scope_id == OB.c.scope_id, E.c.seq == OB.c.seq))
            .where(OB.c.scope_id == key, OB.c.parked_at.is_not(None))
            .order_by(OB.c.topic, OB.c.seq)
        )

        def q(conn: Connection) -> list[ParkedItem]:
            _require(conn, key)
            return [ParkedItem(key, r[0], r[1], r[2], r[3], r[4], r[5]) for r in conn.execute(stmt)]

        return await self.run(q)

    async def outbox_retry_parked(self, scope: ScopeRef, topic: str | None = None) -> int:
        key = scope_key(scope)
        stmt = OB.update().where(OB.c.scope_id == key, OB.c.parked_at.is_not(None))
        if topic:
            stmt = stmt.where(OB.c.topic == topic)
        stmt = stmt.values(parked_at=None, attempts=0, next_attempt_at=0)

        def w(conn: Connection) -> int:
            _require(conn, key)
            return int(conn.execute(stmt).rowcount or 0)

        count = await self.run(w)
        if count:
            self._notify(key, ())
        return count

    # -- delivery cursors (several drainers on one database) --------------------------------------------------

    async def claim_cursor(self, scope: ScopeRef, topic: str, owner: str, *, lease_s: float = 30.0) -> bool:
        """Take the (scope, topic) cursor for ``owner`` until the database clock passes ``lease_s`` from now.

        False when another owner holds an unexpired lease, or is taking the row right now (``SKIP LOCKED``)."""
        return await self.take_cursor(scope, topic, owner, lease_s=lease_s) is not None

    async def take_cursor(
        self, scope: ScopeRef, topic: str, owner: str, *, lease_s: float = 30.0
    ) -> CursorClaim | None:
        """``claim_cursor`` that says which replica drained last (``CursorClaim``). A release keeps the owner and
        clears the lease, so a claim tells a clean handover (no lease) from a dead holder's (an expired lease)."""
        key = scope_key(scope)
        now = sa.func.clock_timestamp()

        def w(conn: Connection) -> CursorClaim | None:
            row = conn.execute(
                sa.select(C.c.owner, C.c.lease_until, now.label("now"))
                .where(C.c.scope_id == key, C.c.topic == topic)
                .with_for_update(skip_locked=True)
            ).first()
            if row is None:
                return None
            other = row.owner not in (None, owner)
            if other and row.lease_until is not None and row.lease_until > row.now:
                if _holder_gone(conn, str(row.owner)):  # it died: its lease ends GRACE_S from now at the latest
                    conn.execute(
                        C.update()
                        .where(C.c.scope_id == key, C.c.topic == topic, C.c.owner == row.owner)
                        .values(lease_until=sa.func.least(C.c.lease_until, now + _GRACE))
                    )
                return None
            until = now + sa.func.make_interval(0, 0, 0, 0, 0, 0, lease_s)
            conn.execute(
                C.update().where(C.c.scope_id == key, C.c.topic == topic).values(owner=owner, lease_until=until)
            )
            if not other:
                return CursorClaim()
            return CursorClaim(previous=str(row.owner), died=row.lease_until is not None)

        return await self.run(w)

    async def renew_cursor(self, scope: ScopeRef, topic: str, owner: str, *, lease_s: float = 30.0) -> bool:
        """The holder extends its own lease. Unlike a take it waits for the row lock (another replica's take looks
        at the row for a moment): a renewal skipped for that reason could let a live holder's lease run out in
        the middle of a delivery (decision 121). False once another replica has taken the cursor, or it was let go."""
        until = sa.func.clock_timestamp() + sa.func.make_interval(0, 0, 0, 0, 0, 0, lease_s)
        stmt = (
            C.update()
            .where(
                C.c.scope_id == scope_key(scope), C.c.topic == topic, C.c.owner == owner, C.c.lease_until.is_not(None)
            )
            .values(lease_until=until)
        )
        return await self.run(lambda conn: int(conn.execute(stmt).rowcount or 0) == 1)

    def hold_liveness(self, owner: str) -> str:
        """Hold a liveness lock for ``owner`` (core/store/postgres/liveness.py) while this store is open; the owner
        name to drain under, which tells the other replicas to judge this one by the lock."""
        if self._liveness is None:
            self._liveness = Liveness(self.url, LIVE_PREFIX + owner)
            self._liveness.start()
        return self._liveness.owner

    def alive_until(self, asked: float) -> float:
        """The monotonic time after which this process may start no delivery under a cursor lease it asked for at
        ``asked``: ``MARGIN_S`` before its liveness deadline (``float('inf')`` without a liveness lock: the lease
        alone fences)."""
        return self._liveness.confirmed_until(asked) if self._liveness is not None else float("inf")

    async def fence_dead_holders(self) -> list[tuple[str, str, float]]:
        """Cut the running leases of every holder whose liveness lock is free (its process is gone) to at most
        ``GRACE_S`` from now: (scope, topic, seconds until that lease runs out) of each such cursor. The caller
        looks at them again then (``take_cursor`` gives them to the first to ask)."""
        now = sa.func.clock_timestamp()

        def w(conn: Connection) -> list[tuple[str, str, float]]:
            owners = [
                str(r[0])
                for r in conn.execute(
                    sa.select(C.c.owner)
                    .where(C.c.lease_until > now, C.c.owner.startswith(LIVE_PREFIX))
                    .group_by(C.c.owner)
                )
            ]
            dead = [o for o in owners if _holder_gone(conn, o)]
            if not dead:
                return []
            cut = conn.execute(
                C.update()
                .where(C.c.owner.in_(dead), C.c.lease_until > now)
                .values(lease_until=sa.func.least(C.c.lease_until, now + _GRACE))
                .returning(C.c.scope_id, C.c.topic, sa.func.extract("epoch", C.c.lease_until - now))
            )
            return [(str(r[0]), str(r[1]), max(0.0, float(r[2]))) for r in cut]

        return await self.run(w)

    async def sweep_candidates(self, topics: Collection[str]) -> tuple[list[ScopeId], float]:
        """The scopes a boot sweep must open: those with rows waiting (one query on the partial pending index)."""
        return [ScopeId.parse(s) for s in await self.outbox_pending_scopes()], 0.0

    async def sweep_checked(self, topics: Collection[str], at: float, pending: Sequence[ScopeRef]) -> None:
        """Nothing to remember: the pending index answers the next boot."""

    async def outbox_pending_scopes(self) -> list[str]:
        """Scopes with rows waiting for delivery (any topic), from the partial pending index: the replicas' sweep
        (a dead replica's deliveries are found here, whoever committed them)."""
        stmt = (
            sa.select(OB.c.scope_id)
            .where(OB.c.published_at.is_(None), OB.c.parked_at.is_(None))
            .group_by(OB.c.scope_id)
            .order_by(OB.c.scope_id)
        )
        return await self.run(lambda conn: [str(r[0]) for r in conn.execute(stmt)])

    async def release_cursor(self, scope: ScopeRef, topic: str, owner: str) -> None:
        key = scope_key(scope)
        stmt = (
            C.update()
            .where(C.c.scope_id == key, C.c.topic == topic, C.c.owner == owner)
            .values(lease_until=None)  # the owner stays: who drained last (``take_cursor``)
        )
        await self.run(lambda conn: conn.execute(stmt))

    # -- named leases (periodic jobs, pacers: one replica at a time) ------------------------------------------------

    async def try_lease(self, name: str, owner: str, *, lease_s: float) -> bool:
        """Hold lease ``name`` for ``owner`` until the database clock passes ``lease_s`` from now: True when it was
        free, expired or already ``owner``'s (renewed), False while another owner's lease runs."""
        L = pg.leases
        ins = pg_insert(L).values(name=name, owner=owner, lease_until=DB_NOW + lease_s)
        stmt = ins.on_conflict_do_update(
            index_elements=[L.c.name],
            set_={"owner": ins.excluded.owner, "lease_until": ins.excluded.lease_until},
            where=sa.or_(L.c.owner == owner, L.c.lease_until < DB_NOW),
        ).returning(L.c.owner)
        return await self.run(lambda conn: conn.execute(stmt).first() is not None)

    async def release_lease(self, name: str, owner: str) -> None:
        """Give lease ``name`` up now, if ``owner`` still holds it."""
        L = pg.leases
        stmt = L.delete().where(L.c.name == name, L.c.owner == owner)
        await self.run(lambda conn: conn.execute(stmt))

    # -- sender memos -----------------------------------------------------------------------------------------

    async def memo_get(self, scope: ScopeRef, topic: str, key: str) -> dict[str, Any] | None:
        sk = scope_key(scope)

        def q(conn: Connection) -> dict[str, Any] | None:
            value = conn.execute(
                sa.select(M.c.value).where(M.c.scope_id == sk, M.c.topic == topic, M.c.key == key)
            ).scalar()
            if value is None:
                _require(conn, sk)
                return None
            return dict(json.loads(value))

        return await self.run(q)

    async def memo_all(self, scope: ScopeRef, topic: str) -> dict[str, dict[str, Any]]:
        sk = scope_key(scope)

        def q(conn: Connection) -> dict[str, dict[str, Any]]:
            rows = conn.execute(sa.select(M.c.key, M.c.value).where(M.c.scope_id == sk, M.c.topic == topic)).all()
            if not rows:
                _require(conn, sk)
            return {str(k): json.loads(v) for k, v in rows}

        return await self.run(q)

    async def memo_put(self, scope: ScopeRef, topic: str, key: str, value: dict[str, Any]) -> None:
        sk = scope_key(scope)
        ins = pg_insert(M).values(scope_id=sk, topic=topic, key=key, value=canonical_json(value), updated_at=DB_NOW)
        stmt = ins.on_conflict_do_update(
            index_elements=[M.c.scope_id, M.c.topic, M.c.key],
            set_={"value": ins.excluded.value, "updated_at": ins.excluded.updated_at},
        )

        def w(conn: Connection) -> None:
            _require(conn, sk)
            conn.execute(stmt)

        await self.run(w)


# -- group commit across scopes ---------------------------------------------------------------------------------------


def _riders(pending: dict[str, list[_Request]], riding: Mapping[str, object], key: str) -> dict[str, list[_Request]]:
    """Other scopes' waiting requests (popped from ``pending``) that may share ``key``'s next transaction: scopes
    not in a transaction now, none creating a scope (a create that failed would leave an empty head row committed
    beside the others), at most ``MAX_SCOPES`` in all."""
    if any(r.create for r in pending.get(key, ())):
        return {}
    found: dict[str, list[_Request]] = {}
    for k, waiting in list(pending.items()):
        if len(found) >= MAX_SCOPES - 1:
            break
        if k != key and k not in riding and waiting and not any(r.create for r in waiting):
            found[k] = pending.pop(k)
    return found


def _settle(batches: Mapping[str, Sequence[_Request]], outcomes: Mapping[str, Sequence[Outcome]]) -> None:
    """Resolve each request's future with its outcome."""
    for key, batch in batches.items():
        for r, outcome in zip(batch, outcomes[key], strict=True):
            if r.future.done():
                continue
            if isinstance(outcome, BaseException):
                r.future.set_exception(outcome)
            else:
                r.future.set_result(outcome)


def _lock_heads(conn: Connection, keys: Sequence[str]) -> dict[str, Batch]:
    """Lock the head rows of ``keys`` (existing scopes) in ``scope_id`` order; a batch per scope."""
    h = pg.scope_heads
    stmt = sa.select(h).where(h.c.scope_id.in_(sorted(keys))).order_by(h.c.scope_id).with_for_update()
    found: dict[str, Batch] = {}
    for row in conn.execute(stmt):
        key = str(row.scope_id)
        if row.version:
            found[key] = Batch(key, ScopeState.model_validate_json(row.body), row.head_hash, row.head_at, existed=True)
    for key in keys:
        found.setdefault(key, Batch(key, empty_state(key), "", "", existed=False))
    return found


def _write_all(conn: Connection, batches: Sequence[Batch]) -> None:
    """Every staged batch's entries, outbox rows and head, one statement per table."""
    _copy_rows(
        conn, COPY_ENTRIES, ENTRY_COLUMNS, [{"scope_id": b.scope, **row} for b in batches for row in b.entry_rows]
    )
    _copy_rows(
        conn, COPY_OUTBOX, OUTBOX_COLUMNS, [{"scope_id": b.scope, **row} for b in batches for row in b.outbox_rows]
    )
    h = pg.scope_heads
    heads = [
        {"k": b.scope, "v": b.state.version, "hh": b.head_hash, "ha": b.head_at, "body": b.state.model_dump_json()}
        for b in batches
    ]
    conn.execute(
        h.update()
        .where(h.c.scope_id == sa.bindparam("k"))
        .values(
            version=sa.bindparam("v"),
            head_hash=sa.bindparam("hh"),
            head_at=sa.bindparam("ha"),
            body=sa.bindparam("body"),
        ),
        heads,
    )


# -- many rows in one statement: COPY ----------------------------------------------------------------------------------
# An executemany through psycopg 3 is one statement per row in pipeline mode. For a group commit of 16 entries and 32
# outbox rows, timed by hand on psycopg (300 transactions each, interleaved, 2026-12-02): executemany 0.65 ms of
# client CPU per transaction, one multi-row ``VALUES`` 0.50 ms, ``COPY`` 0.22 ms (decision 107). SQLAlchemy Core has
# no COPY, and its multi-row ``insert().values([...])`` is compiled anew for every batch (35 ms a transaction), so
# this one statement goes to the driver: the same columns as the Core tables, on the caller's connection and
# transaction. A constraint violation raises psycopg's own error (not wrapped by SQLAlchemy) and rolls the
# transaction back, as an INSERT's would.


def _copy_sql(table: sa.Table, columns: Sequence[str]) -> str:
    """``COPY table (columns) FROM STDIN`` for ``table``'s named columns (checked against the Core table)."""
    names = ", ".join(table.c[c].name for c in columns)
    return f"COPY {table.name} ({names}) FROM STDIN"


COPY_ENTRIES = _copy_sql(pg.entries, ENTRY_COLUMNS)
COPY_OUTBOX = _copy_sql(pg.outbox, OUTBOX_COLUMNS)


def _copy_rows(conn: Connection, sql: str, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts with every one of ``columns``) with one ``COPY`` on ``conn``'s transaction."""
    if not rows:
        return
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cur, cur.copy(sql) as copy:
        for row in rows:
            copy.write_row(tuple(row[c] for c in columns))
