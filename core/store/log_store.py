"""The log store: one SQLite file per scope, appends with group commit, state, outbox and sender memos.

``LogStore`` is the contract (tests/store_contract.py runs against every backend); ``SqliteLogStore`` is the
embedded default. An append is one transaction: entries (gapless ``seq``, unique id, optional idempotency key,
hash chain) + the folded state + one outbox row per topic. Requests that arrive while a transaction is being
committed share the next one (group commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from core.clock import Clock, SystemClock, iso, parse_iso
from core.entries import (
    Actor,
    DeliveryFailed,
    Entry,
    NewEntry,
    canonical_json,
    chain_hash,
    parse_payload,
    payload_json,
)
from core.errors import Conflict, InvalidInput, NotFound
from core.ids import ScopeId
from core.state import ScopeState, empty_state, fold
from core.store import schema as t
from core.store.spares import SpareFiles
from core.store.sqlite_file import SqliteFile

log = logging.getLogger(__name__)
REFILL_DELAY_S = 0.2

Decide = Callable[[ScopeState], Sequence[NewEntry]]


def _compiled(stmt: Any) -> str:
    """SQL text of a Core statement for SQLite with named parameters (compiled once, at import)."""
    from sqlalchemy.dialects import sqlite

    return str(stmt.compile(dialect=sqlite.dialect(paramstyle="named")))


@dataclass(frozen=True)
class _HotStatements:
    """The append path's statements: SQLAlchemy Core builds them; the hot path runs their compiled text on the
    DBAPI cursor, skipping per-call statement construction and cache-key work (~5× less CPU per append)."""

    select_head: str = _compiled(
        sa.select(t.state.c.version, t.state.c.head_hash, t.state.c.head_at).where(
            t.state.c.id == sa.literal_column("1")
        )
    )
    select_body: str = _compiled(sa.select(t.state.c.body).where(t.state.c.id == sa.literal_column("1")))
    insert_entry: str = _compiled(t.entries.insert())
    insert_outbox: str = _compiled(t.outbox.insert().values(topic=sa.bindparam("topic"), seq=sa.bindparam("seq")))
    update_state: str = _compiled(
        t.state.update()
        .where(t.state.c.id == sa.literal_column("1"))
        .values(
            version=sa.bindparam("version"),
            head_hash=sa.bindparam("head_hash"),
            head_at=sa.bindparam("head_at"),
            body=sa.bindparam("body"),
        )
    )
    insert_state: str = _compiled(t.state.insert())
    # Reads on the delivery path. Each scope file has its own engine, and SQLAlchemy's compiled-statement cache is
    # per engine: a Core select costs ~1.5 ms the first time on every newly opened file (the dispatcher's first
    # read of a new incident). These run as text instead. (LIMIT is appended as text: SQLite's compiler would add
    # an OFFSET parameter to a bound one.)
    select_pending: str = (
        _compiled(
            sa.select(t.entries, t.outbox.c.attempts, t.outbox.c.next_attempt_at)
            .join(t.outbox, t.outbox.c.seq == t.entries.c.seq)
            .where(
                t.outbox.c.topic == sa.bindparam("topic"),
                t.outbox.c.published_at.is_(None),
                t.outbox.c.parked_at.is_(None),
            )
            .order_by(t.outbox.c.seq)
        )
        + " LIMIT :limit"
    )
    select_memos: str = _compiled(
        sa.select(t.sender_memo.c.key, t.sender_memo.c.value).where(t.sender_memo.c.topic == sa.bindparam("topic"))
    )


HOT = _HotStatements()


def raw_cursor(conn: Connection) -> Any:
    """The DBAPI cursor of a SQLAlchemy connection, inside its current transaction."""
    return conn.connection.cursor()


@dataclass(frozen=True)
class AppendResult:
    """What an append did: the entries (the originals, for a duplicate) and the state after it."""

    entries: tuple[Entry, ...]
    state: ScopeState
    duplicate: bool = False

    @property
    def last_seq(self) -> int:
        return self.entries[-1].seq if self.entries else self.state.version


@dataclass(frozen=True)
class OutboxItem:
    topic: str
    entry: Entry
    attempts: int
    next_attempt_at: float


@dataclass(frozen=True)
class ParkedItem:
    scope: str
    topic: str
    seq: int
    kind: str
    attempts: int
    error: str
    parked_at: float


@dataclass(frozen=True)
class OutboxSummary:
    scope: str
    pending: dict[str, int]
    parked: dict[str, int]


@dataclass(frozen=True)
class VerifyReport:
    scope: str
    ok: bool
    entries: int
    first_bad_seq: int | None = None
    reason: str = ""


class LogStore(Protocol):
    """What every log backend provides. Scope ids are ``ScopeId`` or their ``kind/name`` text."""

    topics: tuple[str, ...]

    async def append(
        self,
        scope: ScopeId | str,
        entries: Sequence[NewEntry] | Decide,
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        create: bool = False,
    ) -> AppendResult: ...

    async def read(
        self, scope: ScopeId | str, *, after: int = 0, limit: int | None = None, kinds: Sequence[str] = ()
    ) -> list[Entry]: ...

    async def read_seqs(self, scope: ScopeId | str, seqs: Sequence[int]) -> list[Entry]: ...

    async def read_last(self, scope: ScopeId | str, *, limit: int, kinds: Sequence[str] = ()) -> list[Entry]: ...

    async def get_state(self, scope: ScopeId | str) -> ScopeState: ...

    async def exists(self, scope: ScopeId | str) -> bool: ...

    def holds(self, scope: ScopeId | str) -> bool:
        """Whether the store holds anything under this id (a cheap, synchronous check; ids are never reused)."""
        ...

    async def scope_ids(self) -> list[ScopeId]: ...

    async def verify(self, scope: ScopeId | str) -> VerifyReport: ...

    async def outbox_pending(self, scope: ScopeId | str, topic: str, *, limit: int = 100) -> list[OutboxItem]: ...

    async def outbox_done(self, scope: ScopeId | str, topic: str, seqs: Sequence[int]) -> None: ...

    async def outbox_failed(
        self, scope: ScopeId | str, topic: str, seq: int, *, attempts: int, next_attempt_at: float, error: str
    ) -> None: ...

    async def outbox_park(self, scope: ScopeId | str, topic: str, seq: int, *, attempts: int, error: str) -> None: ...

    async def outbox_summary(self, scope: ScopeId | str) -> OutboxSummary: ...

    async def outbox_parked(self, scope: ScopeId | str) -> list[ParkedItem]: ...

    async def outbox_retry_parked(self, scope: ScopeId | str, topic: str | None = None) -> int: ...

    async def memo_get(self, scope: ScopeId | str, topic: str, key: str) -> dict[str, Any] | None: ...

    async def memo_put(self, scope: ScopeId | str, topic: str, key: str, value: dict[str, Any]) -> None: ...

    async def memo_all(self, scope: ScopeId | str, topic: str) -> dict[str, dict[str, Any]]: ...

    def subscribe(self, listener: Callable[[str, tuple[Entry, ...]], None]) -> None: ...

    async def close(self) -> None: ...


def new_entry_id() -> str:
    """A unique, roughly time-ordered entry id: ``e`` + 12 hex digits of ms time + 10 random hex digits."""
    return f"e{int(time.time() * 1000):012x}{secrets.token_hex(5)}"


def default_threads() -> int:
    """Worker threads for SQLite: two per core, 2–8. More only add GIL hand-offs: on 2 cores, 16 producers on 16
    scopes made 1,130 appends/s with 4 threads and 780/s with 8 (16 producers on one scope: 4,700 vs 4,000/s)."""
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


def _scope_key(scope: ScopeId | str) -> ScopeId:
    return scope if isinstance(scope, ScopeId) else ScopeId.parse(scope)


def row_to_entry(scope: str, row: Row[Any]) -> Entry:
    kind = row.kind
    return Entry(
        scope=scope,
        seq=row.seq,
        id=row.id,
        kind=kind,
        at=parse_iso(row.at),
        actor=Actor.model_validate_json(row.actor),
        payload=parse_payload(kind, json.loads(row.payload)),
        refs=tuple(json.loads(row.refs)),
        idempotency_key=row.idempotency_key,
        prev_hash=row.prev_hash,
        hash=row.hash,
    )


@dataclass
class _Batch:
    """Per-transaction context: the state as of the last staged entry, and the rows to write at commit."""

    scope: str
    state: ScopeState
    head_hash: str
    head_at: str
    existed: bool
    entry_rows: list[dict[str, Any]] = field(default_factory=list)
    outbox_rows: list[dict[str, Any]] = field(default_factory=list)
    staged_keys: dict[str, Entry] = field(default_factory=dict)
    appended: list[Entry] = field(default_factory=list)


class _ScopeFile:
    """A scope's SqliteFile plus its cached state (valid while the stored version and head hash match)."""

    def __init__(self, store: SqliteLogStore, scope: ScopeId, path: Path) -> None:
        self.scope = scope
        self.key = str(scope)
        self.store = store
        self.cached: tuple[int, str, str, ScopeState] | None = None
        self.users = 0
        self.file: SqliteFile[_Batch] = SqliteFile(
            path,
            store.executor,
            init_schema=self._init_schema,
            begin_batch=self._begin_batch,
            end_batch=self._end_batch,
            on_abort=self._invalidate,
        )

    def _invalidate(self) -> None:
        self.cached = None

    def _init_schema(self, conn: Connection) -> None:
        """``user_version`` says the file has the current tables and indexes (one pragma instead of ~20
        catalogue queries per open); files made before an index was added get it here."""
        cur = raw_cursor(conn)
        if cur.execute("PRAGMA user_version").fetchone()[0] == self.store.layout:
            return
        t.metadata.create_all(conn)
        for table in t.metadata.tables.values():
            for index in table.indexes:
                index.create(conn, checkfirst=True)
        cur.execute(f"PRAGMA user_version={self.store.layout}")

    def stored(self, conn: Connection) -> tuple[ScopeState, str, str] | None:
        """The stored state with the head hash and time (None before the first entry); the cached state while
        the stored version and head hash still match it."""
        cur = raw_cursor(conn)
        row = cur.execute(HOT.select_head).fetchone()
        if row is None:
            return None
        version, head_hash, head_at = row
        cached = self.cached
        if cached is not None and cached[0] == version and cached[1] == head_hash:
            return cached[3], head_hash, head_at
        return ScopeState.model_validate_json(cur.execute(HOT.select_body).fetchone()[0]), head_hash, head_at

    def _begin_batch(self, conn: Connection) -> _Batch:
        found = self.stored(conn)
        if found is None:
            return _Batch(self.key, empty_state(self.key), "", "", existed=False)
        state, head_hash, head_at = found
        return _Batch(self.key, state, head_hash, head_at, existed=True)

    def _end_batch(self, conn: Connection, b: _Batch) -> None:
        if not b.entry_rows:
            return
        cur = raw_cursor(conn)
        cur.executemany(HOT.insert_entry, b.entry_rows)
        if b.outbox_rows:
            cur.executemany(HOT.insert_outbox, b.outbox_rows)
        values = {
            "version": b.state.version,
            "head_hash": b.head_hash,
            "head_at": b.head_at,
            "body": b.state.model_dump_json(),  # pydantic-core: ~10x cheaper than dump + json.dumps on big states
        }
        if b.existed:
            cur.execute(HOT.update_state, values)
        else:
            cur.execute(HOT.insert_state, {"id": 1, "scope": self.key, "schema_version": t.SCHEMA_VERSION, **values})
        self.cached = (b.state.version, b.head_hash, b.head_at, b.state)


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
    ) -> None:
        self.data_dir = Path(data_dir)
        self.scopes_dir = self.data_dir / "scopes"
        ddl = t.ddl()
        self.layout = t.layout_version(ddl)
        # Ready-made empty scope files (DATA_DIR/spare/), so a declaration skips creating one: core/store/spares.py
        self.spares = SpareFiles(self.data_dir / "spare", ddl=ddl, user_version=self.layout, keep=spare_files)
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
        self._files: OrderedDict[str, _ScopeFile] = OrderedDict()
        self._open_lock = asyncio.Lock()
        self._released = asyncio.Event()  # set whenever a file loses its last user or finishes closing
        self._closing_files: set[asyncio.Task[None]] = set()
        self._listeners: list[Callable[[str, tuple[Entry, ...]], None]] = []
        self.appended_total = 0

    # -- files ------------------------------------------------------------------------------------------------

    def topics_for(self, kind: str) -> tuple[str, ...]:
        """The outbox topics an entry of ``kind`` gets a row in (every topic, less those that filter it out)."""
        found = self._kind_topics.get(kind)
        if found is None:
            found = tuple(t for t in self.topics if t not in self.topic_kinds or kind in self.topic_kinds[t])
            self._kind_topics[kind] = found
        return found

    def path_for(self, scope: ScopeId) -> Path:
        return self.scopes_dir / f"{scope.file_stem}.db"

    @property
    def open_files(self) -> int:
        """Scope files holding handles: open in the cache, or being closed after eviction."""
        return len(self._files) + len(self._closing_files)

    @asynccontextmanager
    async def _use(self, scope: ScopeId | str, *, create: bool = False) -> AsyncIterator[_ScopeFile]:
        sf = await self._acquire(_scope_key(scope), create=create)
        try:
            yield sf
        finally:
            sf.users -= 1
            if sf.users == 0:
                self._released.set()

    async def _acquire(self, sid: ScopeId, *, create: bool) -> _ScopeFile:
        """The scope's open file with a use taken on it; waits for a free slot while ``max_open`` are in use."""
        key = str(sid)
        while True:
            sf = self._files.get(key)
            if sf is None:
                async with self._open_lock:
                    sf = self._files.get(key)
                    if sf is None and self.open_files >= self.max_open:
                        self._evict(len(self._files) + 1 - self.max_open)  # a slot is free once a close finishes
                    if sf is None and self.open_files < self.max_open:
                        path = self.path_for(sid)
                        new = not path.exists()
                        if new and not create:
                            raise NotFound(f"no such scope: {key}")
                        self.scopes_dir.mkdir(parents=True, exist_ok=True)
                        sf = _ScopeFile(self, sid, path)
                        await sf.file.open(prepare=functools.partial(self.spares.take, path) if new else None)
                        self._files[key] = sf
                        if new:
                            self.refill_spares()
                        # Keep a few slots free ahead of time, so the next new scope does not wait for a close.
                        self._evict(len(self._files) - (self.max_open - max(1, self.max_open // 16)), keep=key)
                    elif sf is None:
                        self._released.clear()  # every open file is in use: wait (below) for one to be released
            if sf is not None:
                self._files.move_to_end(key)
                sf.users += 1
                return sf
            with contextlib.suppress(TimeoutError):  # re-check now and then, even if a release went unsignalled
                await asyncio.wait_for(self._released.wait(), 0.25)

    def _evict(self, n: int, *, keep: str = "") -> None:
        """Take up to ``n`` least recently used files that nobody uses out of the cache and close them in the
        background (under the open lock; the lock is not held while they close). Until a close has finished its
        file still counts in ``open_files``, so the bound holds; a scope evicted and needed again at once is simply
        opened anew beside the closing one (WAL allows it; the closing one has nothing queued)."""
        if n <= 0:
            return
        victims = [k for k, f in self._files.items() if f.users == 0 and f.file.idle and k != keep][:n]
        for key in victims:
            sf = self._files.pop(key)
            task = asyncio.get_running_loop().create_task(self._close_evicted(sf), name=f"evict:{key}")
            self._closing_files.add(task)
            task.add_done_callback(self._evicted)

    async def _close_evicted(self, sf: _ScopeFile) -> None:
        try:
            await sf.file.close()
        except Exception:
            log.exception("closing evicted scope file %s failed", sf.key)

    def _evicted(self, task: asyncio.Task[None]) -> None:
        self._closing_files.discard(task)
        self._released.set()

    async def _discard_if_empty(self, sf: _ScopeFile) -> None:
        """A failed first append leaves no empty scope file behind (nothing half-written).

        Checked under the open lock with the file out of the cache, so nobody can start using it meanwhile; a
        declaration that committed since the failure (through this store or another one) keeps the file.
        """
        async with self._open_lock:
            if self._files.get(sf.key) is not sf or sf.users > 1:
                return
            del self._files[sf.key]

            def declared(conn: Connection) -> bool:
                return conn.execute(sa.select(t.state.c.version).where(t.state.c.id == 1)).first() is not None

            try:
                keep = await sf.file.read(declared) or sf.users > 1
            except Exception:
                keep = True  # when in doubt, delete nothing
            if keep:
                self._files[sf.key] = sf
                return
            await sf.file.close()
            for suffix in ("", "-wal", "-shm"):
                Path(str(sf.file.path) + suffix).unlink(missing_ok=True)
        self._released.set()

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
        async with self._open_lock:
            files = list(self._files.values())
            self._files.clear()
            for sf in files:
                await sf.file.close()
        await asyncio.gather(*self._closing_files, return_exceptions=True)
        if self._own_executor and isinstance(self.executor, ThreadPoolExecutor):
            self.executor.shutdown(wait=True)

    def subscribe(self, listener: Callable[[str, tuple[Entry, ...]], None]) -> None:
        """Call ``listener(scope, entries)`` after every committed append (the dispatcher's wake-up)."""
        self._listeners.append(listener)

    def _notify(self, scope: str, entries: tuple[Entry, ...]) -> None:
        """Tell every listener; the append has committed, so a failing listener is logged, never raised."""
        for listener in self._listeners:
            try:
                listener(scope, entries)
            except Exception:
                log.exception("a log listener failed on %s (the append itself committed)", scope)

    def holds(self, scope: ScopeId | str) -> bool:
        return self.path_for(_scope_key(scope)).exists()

    async def exists(self, scope: ScopeId | str) -> bool:
        sid = _scope_key(scope)
        if str(sid) in self._files:
            return True
        if not self.path_for(sid).exists():
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

    def _list_files(self) -> list[str]:
        """On a worker thread: listing ten thousand files must not stall the event loop."""
        return sorted(os.listdir(self.scopes_dir)) if self.scopes_dir.exists() else []

    # -- append -----------------------------------------------------------------------------------------------

    async def append(
        self,
        scope: ScopeId | str,
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
        async with self._use(scope, create=create) as sf:
            try:
                result: AppendResult = await sf.file.write(
                    lambda conn, b: self._stage(conn, b, entries, expected_version, idempotency_key),
                    savepoint=False,
                )
            except Exception:
                if create and sf.cached is None:
                    await self._discard_if_empty(sf)
                raise
        if not result.duplicate and result.entries:
            self.appended_total += len(result.entries)
            self._notify(str(sf.scope), result.entries)
        return result

    def _stage(
        self,
        conn: Connection,
        b: _Batch,
        entries: Sequence[NewEntry] | Decide,
        expected_version: int | None,
        request_key: str | None,
    ) -> AppendResult:
        """Runs on the writer thread inside the batch transaction. Raises before touching ``b`` on any error.

        Duplicates are recognised before the compare-and-set: a request retried after a lost response gets its
        original entries back, not a Conflict. Entry keys that ``decide`` chooses are checked once it has run.
        """
        if request_key is not None or not callable(entries):
            existing = self._find_duplicates(conn, b, entries, request_key)
            if existing is not None:
                return AppendResult(tuple(existing), b.state, duplicate=True)
        if expected_version is not None and b.state.version != expected_version:
            raise Conflict(
                f"{b.scope} is at version {b.state.version}, not {expected_version}: re-read and decide again"
            )
        new = list(entries(b.state) if callable(entries) else entries)
        if request_key is None and callable(entries):
            existing = self._find_duplicates(conn, b, new, None)
            if existing is not None:
                return AppendResult(tuple(existing), b.state, duplicate=True)
        if not new:
            if b.state.version == 0:
                raise NotFound(f"no such scope: {b.scope} (a scope starts with a declared entry)")
            return AppendResult((), b.state)
        if request_key is not None:
            new = [
                e.model_copy(update={"idempotency_key": request_key if i == 0 else f"{request_key}#{i + 1}"})
                for i, e in enumerate(new)
            ]
        if b.state.version == 0 and new[0].kind != "declared":
            raise NotFound(f"no such scope: {b.scope} (a scope starts with a declared entry)")
        if any(e.kind == "declared" for e in (new if b.state.version else new[1:])):
            raise Conflict(f"{b.scope} is already declared")
        state, head_hash = b.state, b.head_hash
        now = self.clock.now()
        if b.head_at:
            now = max(now, parse_iso(b.head_at))
        at_text = iso(now)
        made: list[Entry] = []
        rows: list[dict[str, Any]] = []
        outbox_rows: list[dict[str, Any]] = []
        for ne in new:
            seq = state.version + 1
            for ref in ne.refs:
                if not 0 < ref < seq:
                    raise InvalidInput(f"ref {ref} does not point to an earlier entry of {b.scope}", field="refs")
            entry_id = new_entry_id()
            actor_json = canonical_json(ne.actor.model_dump())
            payload_text = payload_json(ne.payload)
            refs_json = canonical_json(list(ne.refs))
            digest = chain_hash(
                prev_hash=head_hash,
                seq=seq,
                entry_id=entry_id,
                kind=ne.kind,
                at=at_text,
                actor_json=actor_json,
                payload=payload_text,
                refs_json=refs_json,
                idempotency_key=ne.idempotency_key,
            )
            entry = Entry(
                scope=b.scope,
                seq=seq,
                id=entry_id,
                kind=ne.kind,
                at=now,
                actor=ne.actor,
                payload=ne.payload,
                refs=ne.refs,
                idempotency_key=ne.idempotency_key,
                prev_hash=head_hash,
                hash=digest,
            )
            state = fold(state, entry)
            rows.append(
                {
                    "seq": seq,
                    "id": entry_id,
                    "kind": ne.kind,
                    "at": at_text,
                    "actor": actor_json,
                    "payload": payload_text,
                    "refs": refs_json,
                    "idempotency_key": ne.idempotency_key,
                    "prev_hash": head_hash,
                    "hash": digest,
                }
            )
            outbox_rows.extend({"topic": topic, "seq": seq} for topic in self.topics_for(ne.kind))
            head_hash = digest
            made.append(entry)
        # Commit the request to the batch only now: everything above may raise without leaving a trace.
        b.state, b.head_hash, b.head_at = state, head_hash, at_text
        b.entry_rows.extend(rows)
        b.outbox_rows.extend(outbox_rows)
        for entry in made:
            if entry.idempotency_key:
                b.staged_keys[entry.idempotency_key] = entry
        return AppendResult(tuple(made), state)

    def _find_duplicates(
        self, conn: Connection, b: _Batch, entries: Sequence[NewEntry] | Decide, request_key: str | None
    ) -> list[Entry] | None:
        if request_key is not None:
            staged = [e for k, e in b.staged_keys.items() if k == request_key or k.startswith(request_key + "#")]
            if staged:
                return sorted(staged, key=lambda e: e.seq)
            if not b.existed:
                return None
            key_col = t.entries.c.idempotency_key
            rows = conn.execute(
                sa.select(t.entries)
                .where(
                    sa.or_(
                        key_col == request_key,
                        sa.and_(key_col > request_key + "#", key_col < request_key + "$"),
                    )
                )
                .order_by(t.entries.c.seq)
            ).all()
            return [row_to_entry(b.scope, r) for r in rows] or None
        if callable(entries):
            return None
        keys = [e.idempotency_key for e in entries if e.idempotency_key]
        if not keys:
            return None
        if len(set(keys)) != len(keys):  # would fail the whole group commit at INSERT time
            raise InvalidInput("the same idempotency key appears twice in one request", field="idempotency_key")
        found = [b.staged_keys[k] for k in keys if k in b.staged_keys]
        if b.existed:
            rows = conn.execute(
                sa.select(t.entries).where(t.entries.c.idempotency_key.in_(keys)).order_by(t.entries.c.seq)
            ).all()
            found.extend(row_to_entry(b.scope, r) for r in rows)
        return sorted(found, key=lambda e: e.seq) or None

    # -- reads ------------------------------------------------------------------------------------------------

    async def read(
        self, scope: ScopeId | str, *, after: int = 0, limit: int | None = None, kinds: Sequence[str] = ()
    ) -> list[Entry]:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[Entry]:
                stmt = sa.select(t.entries).where(t.entries.c.seq > after).order_by(t.entries.c.seq)
                if kinds:
                    stmt = stmt.where(t.entries.c.kind.in_(list(kinds)))
                if limit is not None:
                    stmt = stmt.limit(limit)
                return [row_to_entry(sf.key, r) for r in conn.execute(stmt)]

            return await sf.file.read(q, small=True)

    async def read_last(self, scope: ScopeId | str, *, limit: int, kinds: Sequence[str] = ()) -> list[Entry]:
        """The last ``limit`` entries (of ``kinds``), oldest first."""
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[Entry]:
                stmt = sa.select(t.entries).order_by(t.entries.c.seq.desc()).limit(limit)
                if kinds:
                    stmt = stmt.where(t.entries.c.kind.in_(list(kinds)))
                return [row_to_entry(sf.key, r) for r in reversed(conn.execute(stmt).all())]

            return await sf.file.read(q, small=True)

    async def read_seqs(self, scope: ScopeId | str, seqs: Sequence[int]) -> list[Entry]:
        if not seqs:
            return []
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[Entry]:
                stmt = sa.select(t.entries).where(t.entries.c.seq.in_(list(seqs))).order_by(t.entries.c.seq)
                return [row_to_entry(sf.key, r) for r in conn.execute(stmt)]

            return await sf.file.read(q, small=True)

    async def get_state(self, scope: ScopeId | str) -> ScopeState:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> ScopeState:
                found = sf.stored(conn)
                if found is None:
                    raise NotFound(f"no such scope: {sf.key}")
                return found[0]

            return await sf.file.read(q, small=True)

    async def verify(self, scope: ScopeId | str) -> VerifyReport:
        """Recompute the hash chain from the stored columns and fold the log; compare with the stored state."""
        async with self._use(scope) as sf:
            return await sf.file.read(lambda conn: _verify(sf.key, conn))

    # -- outbox -----------------------------------------------------------------------------------------------

    async def outbox_pending(self, scope: ScopeId | str, topic: str, *, limit: int = 100) -> list[OutboxItem]:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[OutboxItem]:
                rows = conn.exec_driver_sql(HOT.select_pending, {"topic": topic, "limit": limit})
                return [OutboxItem(topic, row_to_entry(sf.key, r), r.attempts, r.next_attempt_at) for r in rows]

            return await sf.file.read(q, small=True)

    async def outbox_done(self, scope: ScopeId | str, topic: str, seqs: Sequence[int]) -> None:
        if not seqs:
            return
        now = time.time()
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: _Batch) -> None:
                conn.execute(
                    t.outbox.update()
                    .where(t.outbox.c.topic == topic, t.outbox.c.seq.in_(list(seqs)))
                    .values(published_at=now)
                )

            await sf.file.write(w, durable=False)

    async def outbox_failed(
        self, scope: ScopeId | str, topic: str, seq: int, *, attempts: int, next_attempt_at: float, error: str
    ) -> None:
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: _Batch) -> None:
                conn.execute(
                    t.outbox.update()
                    .where(t.outbox.c.topic == topic, t.outbox.c.seq == seq)
                    .values(attempts=attempts, next_attempt_at=next_attempt_at, last_error=error[:2000])
                )

            await sf.file.write(w, durable=False)

    async def outbox_park(self, scope: ScopeId | str, topic: str, seq: int, *, attempts: int, error: str) -> None:
        """Park a row past its retry budget and append a visible ``delivery_failed`` entry, in one transaction."""
        async with self._use(scope) as sf:
            failed: list[Entry] = []

            def w(conn: Connection, b: _Batch) -> None:
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

    async def outbox_summary(self, scope: ScopeId | str) -> OutboxSummary:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> OutboxSummary:
                o = t.outbox
                rows = conn.execute(
                    sa.select(
                        o.c.topic,
                        sa.func.sum(
                            sa.case((sa.and_(o.c.published_at.is_(None), o.c.parked_at.is_(None)), 1), else_=0)
                        ),
                        sa.func.sum(sa.case((o.c.parked_at.is_not(None), 1), else_=0)),
                    ).group_by(o.c.topic)
                ).all()
                return OutboxSummary(
                    sf.key,
                    {r[0]: int(r[1] or 0) for r in rows if r[1]},
                    {r[0]: int(r[2] or 0) for r in rows if r[2]},
                )

            return await sf.file.read(q, small=True)

    async def outbox_parked(self, scope: ScopeId | str) -> list[ParkedItem]:
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

    async def outbox_retry_parked(self, scope: ScopeId | str, topic: str | None = None) -> int:
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: _Batch) -> int:
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

    async def memo_get(self, scope: ScopeId | str, topic: str, key: str) -> dict[str, Any] | None:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> dict[str, Any] | None:
                m = t.sender_memo
                value = conn.execute(sa.select(m.c.value).where(m.c.topic == topic, m.c.key == key)).scalar()
                return json.loads(value) if value is not None else None

            return await sf.file.read(q)

    async def memo_all(self, scope: ScopeId | str, topic: str) -> dict[str, dict[str, Any]]:
        """Every memo of a sender in a scope (a sender loads them once and keeps them in memory)."""
        async with self._use(scope) as sf:

            def q(conn: Connection) -> dict[str, dict[str, Any]]:
                rows = conn.exec_driver_sql(HOT.select_memos, {"topic": topic})
                return {str(k): json.loads(v) for k, v in rows}

            return await sf.file.read(q, small=True)  # loaded once per scope by a sender, on its delivery path

    async def memo_put(self, scope: ScopeId | str, topic: str, key: str, value: dict[str, Any]) -> None:
        """Durably remember something a sender did (e.g. the Slack ``ts`` it posted an entry as)."""
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: _Batch) -> None:
                m = t.sender_memo
                conn.execute(m.delete().where(m.c.topic == topic, m.c.key == key))
                conn.execute(
                    m.insert().values(topic=topic, key=key, value=canonical_json(value), updated_at=time.time())
                )

            await sf.file.write(w)


def _verify(scope: str, conn: Connection) -> VerifyReport:
    state_row = conn.execute(sa.select(t.state).where(t.state.c.id == 1)).first()
    state = empty_state(scope)
    prev_hash = ""
    expected_seq = 1
    count = 0
    for row in conn.execute(sa.select(t.entries).order_by(t.entries.c.seq)):
        count += 1
        if row.seq != expected_seq:
            return VerifyReport(scope, False, count, expected_seq, f"entry {expected_seq} is missing (found {row.seq})")
        if row.prev_hash != prev_hash:
            return VerifyReport(scope, False, count, row.seq, f"entry {row.seq} does not follow entry {row.seq - 1}")
        digest = chain_hash(
            prev_hash=prev_hash,
            seq=row.seq,
            entry_id=row.id,
            kind=row.kind,
            at=row.at,
            actor_json=row.actor,
            payload=row.payload,
            refs_json=row.refs,
            idempotency_key=row.idempotency_key,
        )
        if digest != row.hash:
            return VerifyReport(scope, False, count, row.seq, f"entry {row.seq} was altered (hash mismatch)")
        try:
            entry = row_to_entry(scope, row)
        except (InvalidInput, ValueError) as exc:
            return VerifyReport(scope, False, count, row.seq, f"entry {row.seq} does not parse: {exc}")
        state = fold(state, entry)
        prev_hash = row.hash
        expected_seq += 1
    if state_row is None:
        if count:
            return VerifyReport(scope, False, count, 1, "the stored state is missing")
        return VerifyReport(scope, False, 0, None, "the scope has no entries")
    if state_row.version != count or state_row.head_hash != prev_hash:
        bad = min(state_row.version, count) + 1 if state_row.version != count else count
        return VerifyReport(
            scope,
            False,
            count,
            bad,
            f"the stored head (version {state_row.version}) does not match the log ({count})",
        )
    try:
        stored = json.loads(state_row.body)
    except ValueError:
        stored = None
    if not isinstance(stored, dict):
        return VerifyReport(scope, False, count, count, "the stored state is not a JSON object")
    folded = state.to_json()
    if stored != folded:
        diff = sorted(k for k in set(stored) | set(folded) if stored.get(k) != folded.get(k))
        return VerifyReport(
            scope,
            False,
            count,
            count,
            f"the stored state differs from the fold of the log in: {', '.join(diff)}",
        )
    return VerifyReport(scope, True, count)
