"""The SQLite log store: one file per scope, appends with group commit, state, outbox and sender memos.

The ports are in core/store/ports.py (tests/store_contract.py runs against every backend); this is the embedded
default. An append is one transaction: entries (gapless ``seq``, unique id, optional idempotency key, hash chain)
+ the folded state + one outbox row per topic. Requests that arrive while a transaction is being committed share
the next one (group commit: core/store/sqlite/file.py). Staging is shared with every backend
(core/store/staging.py), the hot statements are in core/store/sqlite/statements.py, the open-file cache in
core/store/sqlite/scope_files.py, verify in core/store/verify.py. The delivery path's reads (outbox rows, memos)
run as compiled text on the DBAPI cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from decklog.core.clock import Clock, SystemClock
from decklog.core.entries import Actor, DeliveryFailed, Entry, NewEntry, canonical_json
from decklog.core.errors import InvalidInput, NotFound
from decklog.core.ids import ScopeId
from decklog.core.state import ScopeState
from decklog.core.store.chain import ChainKey
from decklog.core.store.ports import (
    AppendResult,
    Decide,
    Listener,
    OutboxItem,
    OutboxSummary,
    ParkedItem,
    ScopeRef,
    VerifyReport,
    is_quick,
    notify_listeners,
)
from decklog.core.store.rows import trusted_row_to_entry
from decklog.core.store.sqlite import compaction
from decklog.core.store.sqlite import schema as t
from decklog.core.store.sqlite import sweep_checkpoint as checkpoint
from decklog.core.store.sqlite.file import SqliteFile
from decklog.core.store.sqlite.scope_files import SQL, ScopeFile, ScopeFiles
from decklog.core.store.sqlite.spares import SpareFiles
from decklog.core.store.sqlite.statements import KEYS_PER_SELECT, raw_cursor, raw_rows, select_by_keys
from decklog.core.store.staging import Batch, Lookups, new_entry_id, stage
from decklog.core.store.verify import verify_rows

log = logging.getLogger(__name__)
REFILL_DELAY_S = 0.2
#: Reads of at most this many entries may run on the event loop's own thread (``SqliteFile.read(small=True)``);
#: longer ones go to a worker. Unbounded, a summary's read of a storm minute's thousands of observations held the
#: loop for 100-430 ms, and every request in flight waited (decision 127).
SMALL_READ_ROWS = 64
READ_THREADS = 2  # the threads of the long reads (decision 130)


def default_threads() -> int:
    """Worker threads for SQLite: one per core, 2–8. More only add GIL hand-offs (decision 131): on 2 cores the
    10,000-alert storm made 708–756 alerts/s with 2 threads against 529–612/s with 4, at 20 % less CPU per alert,
    and appends in every shape of bench/append.py were the same."""
    return max(2, min(8, os.cpu_count() or 1))


def _scope_key(scope: ScopeRef) -> ScopeId:
    return scope if isinstance(scope, ScopeId) else ScopeId.parse(scope)


class SqliteLogStore:
    """The embedded log store. ``data_dir/scopes/*.db``; at most ``max_open`` scope files open at once."""

    def __init__(
        self,
        data_dir: Path,
        *,
        topics: Sequence[str] = ("index",),
        topic_kinds: Mapping[str, Collection[str]] | None = None,
        clock: Clock | None = None,
        max_open: int = 64,
        executor: Executor | None = None,
        threads: int | None = None,
        spare_files: int = 3,
        log_key: str | bytes | None = None,
        stage_on_loop: bool = True,
    ) -> None:
        self.chain_key = ChainKey.of(log_key)  # DECKLOG_LOG_KEY: new scopes get a keyed chain (core/store/chain.py)
        self.data_dir = Path(data_dir)
        self.scopes_dir = self.data_dir / "scopes"
        ddl = t.ddl()
        self.layout = t.layout_version(ddl)
        # Ready-made empty scope files (DATA_DIR/spare/), so a declaration skips creating one: core/store/sqlite/spares.py
        self.spares = SpareFiles(
            self.data_dir / "spare", ddl=ddl, user_version=self.layout, keep=spare_files, page_size=t.PAGE_SIZE
        )
        self._fill_timer: asyncio.TimerHandle | None = None
        self._filling: asyncio.Future[int] | None = None
        self._closing = False
        self.topics = tuple(topics)
        # A topic may declare the entry kinds it cares about; other entries get no outbox row for it.
        self.topic_kinds: dict[str, frozenset[str]] = {
            topic: frozenset(kinds) for topic, kinds in (topic_kinds or {}).items() if topic in self.topics
        }
        self._kind_topics: dict[str, tuple[str, ...]] = {}
        self.clock: Clock = clock or SystemClock()
        self.max_open = max_open
        self._own_executor = executor is None
        self.executor: Executor = executor or ThreadPoolExecutor(
            threads or default_threads(), thread_name_prefix="decklog-db"
        )
        # Long reads get their own threads, so appends never wait behind them (decision 130).
        self.read_executor: Executor = (
            ThreadPoolExecutor(READ_THREADS, thread_name_prefix="decklog-db-read")
            if self._own_executor
            else self.executor
        )
        self.cache = ScopeFiles(
            self.scopes_dir,
            self.executor,
            layout=self.layout,
            spares=self.spares,
            max_open=max_open,
            read_executor=self.read_executor,
            stage_on_loop=stage_on_loop,  # small append batches staged on the loop, committed on a worker (decision 133)
        )
        self._listeners: list[Listener] = []
        self.appended_total = 0

    # -- files ------------------------------------------------------------------------------------------------

    @property
    def open_scopes(self) -> list[str]:
        """The scopes whose files are open in the cache, least recently used first."""
        return list(self.cache.files)

    def file_of(self, scope: ScopeRef) -> SqliteFile[Batch] | None:
        """The open file of ``scope`` (None when it is not open): its path, connections and group-commit counters,
        for checks of the SQLite plumbing itself (tests, bench/append.py)."""
        sf = self.cache.files.get(str(_scope_key(scope)))
        return sf.file if sf is not None else None

    def topics_for(self, kind: str) -> tuple[str, ...]:
        """The outbox topics an entry of ``kind`` gets a row in (every topic, less those that filter it out)."""
        found = self._kind_topics.get(kind)
        if found is None:
            found = tuple(t for t in self.topics if t not in self.topic_kinds or kind in self.topic_kinds[t])
            self._kind_topics[kind] = found
        return found

    def path_for(self, scope: ScopeId) -> Path:
        return self.cache.path_for(scope)

    @property
    def open_files(self) -> int:
        """Scope files holding handles: open in the cache, or being closed after eviction."""
        return self.cache.open_files

    @property
    def closing_files(self) -> int:
        """Scope files evicted from the cache whose close has not finished yet (they still count in ``open_files``)."""
        return len(self.cache.closing)

    @asynccontextmanager
    async def _use(self, scope: ScopeRef, *, create: bool = False) -> AsyncIterator[ScopeFile]:
        sf = await self._acquire(scope, create=create)
        try:
            yield sf
        finally:
            self.cache.release(sf)

    async def _acquire(self, scope: ScopeRef, *, create: bool = False) -> ScopeFile:
        sid = _scope_key(scope)
        sf = self.cache.take(str(sid))  # the common case: open already, no lock and no wait
        if sf is not None:
            return sf
        sf, new = await self.cache.acquire(sid, create=create)
        if new:
            self.refill_spares()
        return sf

    def refill_spares(self) -> None:
        """Top the spare files up on a worker thread, a moment from now (after a declaration that used one:
        making files right away would compete with delivering its header). A server calls it at start too."""
        if self.spares.keep <= 0 or self._closing or self._fill_timer is not None or self._filling is not None:
            return
        self._fill_timer = asyncio.get_running_loop().call_later(REFILL_DELAY_S, self._start_fill)

    def _start_fill(self) -> None:
        self._fill_timer = None
        if self._closing:
            return
        self._filling = asyncio.get_running_loop().run_in_executor(self.executor, self.spares.fill)
        self._filling.add_done_callback(self._fill_done)

    def _fill_done(self, fill: asyncio.Future[int]) -> None:
        self._filling = None
        if not fill.cancelled() and fill.exception() is not None:
            log.warning("could not make spare scope files (declarations create their own): %s", fill.exception())

    async def close(self) -> None:
        self._closing = True
        if self._fill_timer is not None:
            self._fill_timer.cancel()
            self._fill_timer = None
        if self._filling is not None:
            with contextlib.suppress(Exception):
                await self._filling
        await self.cache.close()
        if self._own_executor and isinstance(self.executor, ThreadPoolExecutor):
            self.executor.shutdown(wait=True)
        if self.read_executor is not self.executor and isinstance(self.read_executor, ThreadPoolExecutor):
            self.read_executor.shutdown(wait=True)

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(scope, entries)`` after every committed append (the dispatcher's wake-up)."""
        self._listeners.append(listener)

    def _notify(self, scope: str, entries: tuple[Entry, ...]) -> None:
        """Tell every listener; the append has committed, so a failing listener is logged, never raised."""
        notify_listeners(self._listeners, scope, entries)

    def holds(self, scope: ScopeRef) -> bool:
        return self.path_for(_scope_key(scope)).exists()

    async def exists(self, scope: ScopeRef) -> bool:
        sid = _scope_key(scope)
        # An open file is not enough: its first append may still be committing (a reader would then not find it).
        if str(sid) not in self.cache.files and not self.path_for(sid).exists():
            return False
        try:
            state = await self.get_state(sid)
        except NotFound:
            return False
        return state.version > 0

    async def scope_ids(self) -> list[ScopeId]:
        names = await asyncio.get_running_loop().run_in_executor(self.executor, self._list_files)
        out: list[ScopeId] = []
        for name in names:
            if name.endswith(".db"):
                try:
                    out.append(ScopeId.from_file_stem(name[:-3]))
                except InvalidInput:
                    continue
        return out

    async def sweep_candidates(self, topics: Collection[str]) -> tuple[list[ScopeId], float]:
        """The scopes a boot sweep must open (core/store/sqlite/sweep_checkpoint.py), and the time to report back
        to ``sweep_checked`` (taken before anything is listed)."""
        at = time.time()

        def listed() -> list[str]:
            names = self._list_files()
            if not names:
                return []
            return checkpoint.candidates(self.data_dir, self.scopes_dir, names, topics)

        out: list[ScopeId] = []
        for name in await asyncio.get_running_loop().run_in_executor(self.executor, listed):
            try:
                out.append(ScopeId.from_file_stem(name[:-3]))
            except InvalidInput:
                continue
        return out, at

    async def sweep_checked(self, topics: Collection[str], at: float, pending: Sequence[ScopeRef]) -> None:
        """A boot sweep begun at ``at`` checked its candidates: exactly ``pending`` had rows waiting for ``topics``."""
        names = [ScopeId.parse(str(p)).file_stem + ".db" for p in pending]
        if self.scopes_dir.exists():
            await asyncio.get_running_loop().run_in_executor(
                self.executor,
                lambda: checkpoint.write(self.data_dir, self.scopes_dir, at=at, topics=topics, pending=names),
            )

    def _list_files(self) -> list[str]:
        """On a worker thread: listing ten thousand files must not stall the event loop."""
        return sorted(os.listdir(self.scopes_dir)) if self.scopes_dir.exists() else []

    # -- append -----------------------------------------------------------------------------------------------

    async def append(
        self,
        scope: ScopeRef,
        entries: Sequence[NewEntry] | Decide,
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        create: bool = False,
    ) -> AppendResult:
        """Append entries (or the entries ``decide(state)`` returns) atomically.

        - ``expected_version``: compare-and-set; raises ``Conflict`` when the scope moved on.
        - ``idempotency_key``: a repeated key returns the original entries and appends nothing. Without it,
          each entry's own ``idempotency_key`` counts, and any one already present makes the request a duplicate.
        - ``create``: allow the first append to a scope (which must start with a ``declared`` entry).
        """
        sf = await self._acquire(scope, create=create)
        try:
            result: AppendResult = await sf.file.write(
                lambda conn, b: self._stage(conn, b, entries, expected_version, idempotency_key),
                savepoint=False,
                on_loop=is_quick(entries),  # a few entries, or a decide marked quick (decision 133)
            )
        except Exception:
            if create and sf.cached is None:
                await self.cache.discard_if_empty(sf)
            raise
        finally:
            self.cache.release(sf)
        if not result.duplicate and result.entries:
            self.appended_total += len(result.entries)
            if self._listeners:
                self._notify(sf.key, result.entries)
        return result

    def _stage(
        self,
        conn: Connection,
        b: Batch,
        entries: Sequence[NewEntry] | Decide,
        expected_version: int | None,
        request_key: str | None,
    ) -> AppendResult:
        """Runs on the writer thread inside the batch transaction (core/store/staging.py)."""
        look = b.lookups
        if look is None:  # once per batch: the closures read through the batch's own connection
            look = b.lookups = self._lookups(conn, b)
        return stage(b, entries, expected_version, request_key, now=self.clock.now(), look=look)

    def _lookups(self, conn: Connection, b: Batch) -> Lookups:
        """Key lookups as compiled text on the DBAPI cursor (core/store/sqlite/statements.py): through
        ``Connection.execute`` the expanding ``IN`` was recompiled on every append and was most of staging.
        They hold the scope, not the batch that keeps them: no cycle left to the garbage collector (decision 134)."""
        scope = b.scope

        def by_request_key(key: str) -> list[Entry]:
            rows = raw_rows(conn, SQL.select_by_request_key, {"key": key, "lo": key + "#", "hi": key + "$"})
            return [trusted_row_to_entry(scope, r) for r in rows]

        def by_entry_keys(keys: list[str]) -> list[Entry]:
            rows: list[Any] = []
            for start in range(0, len(keys), KEYS_PER_SELECT):
                part = keys[start : start + KEYS_PER_SELECT]
                rows.extend(raw_rows(conn, select_by_keys(len(part)), {f"k{i}": k for i, k in enumerate(part)}))
            rows.sort(key=lambda r: r.seq)
            return [trusted_row_to_entry(scope, r) for r in rows]

        return Lookups(by_request_key, by_entry_keys, self.topics_for, new_id=_new_id, chain_key=self.chain_key)

    # -- reads ------------------------------------------------------------------------------------------------

    async def read(
        self, scope: ScopeRef, *, after: int = 0, limit: int | None = None, kinds: Sequence[str] = ()
    ) -> list[Entry]:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[Entry]:
                stmt = sa.select(t.entries).where(t.entries.c.seq > after).order_by(t.entries.c.seq)
                if kinds:
                    stmt = stmt.where(t.entries.c.kind.in_(list(kinds)))
                if limit is not None:
                    stmt = stmt.limit(limit)
                return [trusted_row_to_entry(sf.key, r) for r in conn.execute(stmt)]

            return await sf.file.read(q, small=limit is not None and limit <= SMALL_READ_ROWS)

    async def read_last(self, scope: ScopeRef, *, limit: int, kinds: Sequence[str] = ()) -> list[Entry]:
        """The last ``limit`` entries (of ``kinds``), oldest first."""
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[Entry]:
                stmt = sa.select(t.entries).order_by(t.entries.c.seq.desc()).limit(limit)
                if kinds:
                    stmt = stmt.where(t.entries.c.kind.in_(list(kinds)))
                return [trusted_row_to_entry(sf.key, r) for r in reversed(conn.execute(stmt).all())]

            return await sf.file.read(q, small=limit <= SMALL_READ_ROWS)

    async def read_seqs(self, scope: ScopeRef, seqs: Sequence[int]) -> list[Entry]:
        if not seqs:
            return []
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[Entry]:
                stmt = sa.select(t.entries).where(t.entries.c.seq.in_(list(seqs))).order_by(t.entries.c.seq)
                return [trusted_row_to_entry(sf.key, r) for r in conn.execute(stmt)]

            return await sf.file.read(q, small=len(seqs) <= SMALL_READ_ROWS)

    async def get_state(self, scope: ScopeRef) -> ScopeState:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> ScopeState:
                found = sf.stored(conn)
                if found is None:
                    raise NotFound(f"no such scope: {sf.key}")
                return found[0]

            return await sf.file.read(q, small=True)

    async def verify(self, scope: ScopeRef) -> VerifyReport:
        """Recompute the hash chain from the stored columns and fold the log; compare with the stored state."""
        async with self._use(scope) as sf:

            def q(conn: Connection) -> VerifyReport:
                state_row = conn.execute(sa.select(t.state).where(t.state.c.id == 1)).first()
                rows = conn.execute(sa.select(t.entries).order_by(t.entries.c.seq))
                return verify_rows(sf.key, rows, state_row, key=self.chain_key)

            return await sf.file.read(q)

    # -- outbox -----------------------------------------------------------------------------------------------

    async def outbox_pending(self, scope: ScopeRef, topic: str, *, limit: int = 100) -> list[OutboxItem]:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[OutboxItem]:
                rows = raw_rows(conn, SQL.select_pending, {"topic": topic, "limit": limit})
                return [OutboxItem(topic, trusted_row_to_entry(sf.key, r), r.attempts, r.next_attempt_at) for r in rows]

            return await sf.file.read(q, small=True)

    async def outbox_done(self, scope: ScopeRef, topic: str, seqs: Sequence[int]) -> None:
        if not seqs:
            return
        now = time.time()
        async with self._use(scope) as sf:

            def w(conn: Connection, b: Batch) -> int:
                # compiled text on the cursor: a storm flushes marks for every topic of every incident
                rows = [{"topic": topic, "seq": seq, "now": now} for seq in dict.fromkeys(seqs)]
                cur = raw_cursor(conn)
                cur.executemany(SQL.mark_done, rows)
                if b.state.status != "resolved" or b.entry_rows:
                    return 0
                # a resolved scope with nothing left to deliver: its delivered rows go (core/store/sqlite/compaction.py)
                return compaction.drop_delivered(cur)

            # fails only with the file: then the batch does
            dropped: int = await sf.file.write(w, savepoint=False, durable=False)
            if dropped:
                sf.compact = True  # the file is rewritten without the free pages when it closes

    async def outbox_failed(
        self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, next_attempt_at: float, error: str
    ) -> None:
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: Batch) -> None:
                conn.execute(
                    t.outbox.update()
                    .where(t.outbox.c.topic == topic, t.outbox.c.seq == seq)
                    .values(attempts=attempts, next_attempt_at=next_attempt_at, last_error=error[:2000])
                )

            await sf.file.write(w, durable=False)

    async def outbox_park(self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, error: str) -> None:
        """Park a row past its retry budget and append a visible ``delivery_failed`` entry, in one transaction."""
        async with self._use(scope) as sf:
            failed: list[Entry] = []

            def w(conn: Connection, b: Batch) -> None:
                conn.execute(
                    t.outbox.update()
                    .where(t.outbox.c.topic == topic, t.outbox.c.seq == seq)
                    .values(attempts=attempts, parked_at=time.time(), last_error=error[:2000])
                )
                kind = conn.execute(sa.select(t.entries.c.kind).where(t.entries.c.seq == seq)).scalar()
                if kind == "delivery_failed":
                    return  # never a failure about a failure
                note = NewEntry.make(
                    "delivery_failed",
                    Actor.system("dispatcher"),
                    DeliveryFailed(sender=topic, seq=seq, attempts=attempts, error=error[:500]),
                    refs=(seq,),
                )
                failed.extend(self._stage(conn, b, [note], None, None).entries)

            await sf.file.write(w, durable=False)
        if failed:
            self.appended_total += len(failed)
            self._notify(str(sf.scope), tuple(failed))

    async def outbox_summary(self, scope: ScopeRef) -> OutboxSummary:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> OutboxSummary:
                # Two counts over the partial indexes (pending, parked): a storm's scope holds tens of thousands
                # of delivered rows, and one pass over all of them ran on the loop every sweep (decision 128).
                cur = raw_cursor(conn)
                pending = cur.execute(SQL.count_pending).fetchall()
                parked = cur.execute(SQL.count_parked).fetchall()
                return OutboxSummary(sf.key, {k: int(n) for k, n in pending if n}, {k: int(n) for k, n in parked if n})

            return await sf.file.read(q, small=True)

    async def outbox_parked(self, scope: ScopeRef) -> list[ParkedItem]:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[ParkedItem]:
                o, e = t.outbox, t.entries
                stmt = (
                    sa.select(o.c.topic, o.c.seq, e.c.kind, o.c.attempts, o.c.last_error, o.c.parked_at)
                    .join(e, e.c.seq == o.c.seq)
                    .where(o.c.parked_at.is_not(None))
                    .order_by(o.c.topic, o.c.seq)
                )
                return [ParkedItem(sf.key, r[0], r[1], r[2], r[3], r[4], r[5]) for r in conn.execute(stmt)]

            return await sf.file.read(q)

    async def outbox_retry_parked(self, scope: ScopeRef, topic: str | None = None) -> int:
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: Batch) -> int:
                stmt = t.outbox.update().where(t.outbox.c.parked_at.is_not(None))
                if topic:
                    stmt = stmt.where(t.outbox.c.topic == topic)
                res = conn.execute(stmt.values(parked_at=None, attempts=0, next_attempt_at=0))
                return int(res.rowcount or 0)

            count: int = await sf.file.write(w)
        if count:
            self._notify(str(sf.scope), ())
        return count

    # -- sender memos -----------------------------------------------------------------------------------------

    async def memo_get(self, scope: ScopeRef, topic: str, key: str) -> dict[str, Any] | None:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> dict[str, Any] | None:
                m = t.sender_memo
                value = conn.execute(sa.select(m.c.value).where(m.c.topic == topic, m.c.key == key)).scalar()
                return json.loads(value) if value is not None else None

            return await sf.file.read(q)

    async def memo_all(self, scope: ScopeRef, topic: str) -> dict[str, dict[str, Any]]:
        """Every memo of a sender in a scope (a sender loads them once and keeps them in memory)."""
        async with self._use(scope) as sf:

            def q(conn: Connection) -> dict[str, dict[str, Any]]:
                rows = raw_cursor(conn).execute(SQL.select_memos, {"topic": topic})
                return {str(k): json.loads(v) for k, v in rows}

            return await sf.file.read(q, small=True)  # loaded once per scope by a sender, on its delivery path

    async def memo_put(self, scope: ScopeRef, topic: str, key: str, value: dict[str, Any]) -> None:
        """Durably remember something a sender did (e.g. the Slack ``ts`` it posted an entry as)."""
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: Batch) -> None:
                m = t.sender_memo
                conn.execute(m.delete().where(m.c.topic == topic, m.c.key == key))
                conn.execute(
                    m.insert().values(topic=topic, key=key, value=canonical_json(value), updated_at=time.time())
                )

            await sf.file.write(w)


def _new_id() -> str:
    return new_entry_id()  # looked up here at call time (tests patch core.store.sqlite.log_store.new_entry_id)
