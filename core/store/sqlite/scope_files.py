"""The SQLite backend's scope files: one ``SqliteFile`` per scope with its batch hooks and cached state, and the
bounded cache of open files (at most ``max_open`` hold handles; least recently used idle ones are closed)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import OrderedDict
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from decklog.core.errors import NotFound
from decklog.core.ids import ScopeId
from decklog.core.state import ScopeState, empty_state
from decklog.core.store.sqlite import compaction
from decklog.core.store.sqlite import schema as t
from decklog.core.store.sqlite.file import SqliteFile
from decklog.core.store.sqlite.spares import SpareFiles
from decklog.core.store.sqlite.statements import compiled, raw_cursor
from decklog.core.store.staging import Batch

log = logging.getLogger(__name__)
SQL = compiled("sqlite")


class ScopeFile:
    """A scope's SqliteFile plus its cached state (valid while the stored version and head hash match)."""

    def __init__(
        self,
        scope: ScopeId,
        path: Path,
        executor: Executor,
        layout: int,
        read_executor: Executor | None = None,
        *,
        stage_on_loop: bool = True,
    ) -> None:
        self.scope = scope
        self.key = str(scope)
        self.layout = layout
        self.cached: tuple[int, str, str, ScopeState] | None = None
        self.users = 0
        self.compact = False  # rewrite the file when it closes: a resolved scope dropped its delivered rows
        self.file: SqliteFile[Batch] = SqliteFile(
            path,
            executor,
            init_schema=self._init_schema,
            begin_batch=self._begin_batch,
            end_batch=self._end_batch,
            on_abort=self._invalidate,
            read_executor=read_executor,
            stage_on_loop=stage_on_loop,
            page_size=t.PAGE_SIZE,
            before_close=self._before_close,
        )

    def _before_close(self, dbapi: Any) -> None:
        if self.compact:
            self.compact = False
            compaction.vacuum(dbapi)

    def _invalidate(self) -> None:
        self.cached = None

    def _init_schema(self, conn: Connection) -> None:
        """``user_version`` says the file has the current tables and indexes (one pragma instead of ~20
        catalogue queries per open); files made before an index was added get it here."""
        cur = raw_cursor(conn)
        if cur.execute("PRAGMA user_version").fetchone()[0] == self.layout:
            return
        t.metadata.create_all(conn)
        for table in t.metadata.tables.values():
            for index in table.indexes:
                index.create(conn, checkfirst=True)
        cur.execute(f"PRAGMA user_version={self.layout}")

    def stored(self, conn: Connection) -> tuple[ScopeState, str, str] | None:
        """The stored state with the head hash and time (None before the first entry); the cached state while
        the stored version and head hash still match it."""
        cur = raw_cursor(conn)
        row = cur.execute(SQL.select_head).fetchone()
        if row is None:
            return None
        version, head_hash, head_at = row
        cached = self.cached
        if cached is not None and cached[0] == version and cached[1] == head_hash:
            return cached[3], head_hash, head_at
        return ScopeState.model_validate_json(cur.execute(SQL.select_body).fetchone()[0]), head_hash, head_at

    def _begin_batch(self, conn: Connection) -> Batch:
        found = self.stored(conn)
        if found is None:
            return Batch(self.key, empty_state(self.key), "", "", existed=False)
        state, head_hash, head_at = found
        return Batch(self.key, state, head_hash, head_at, existed=True)

    def _end_batch(self, conn: Connection, b: Batch) -> None:
        if not b.entry_rows:
            return
        cur = raw_cursor(conn)
        cur.executemany(SQL.insert_entry, b.entry_rows)
        if b.outbox_rows:
            cur.executemany(SQL.insert_outbox, b.outbox_rows)
        values = {
            "version": b.state.version,
            "head_hash": b.head_hash,
            "head_at": b.head_at,
            "body": b.state.model_dump_json(),  # pydantic-core: ~10x cheaper than dump + json.dumps on big states
        }
        if b.existed:
            cur.execute(SQL.update_state, values)
        else:
            cur.execute(SQL.insert_state, {"id": 1, "scope": self.key, "schema_version": t.SCHEMA_VERSION, **values})
        self.cached = (b.state.version, b.head_hash, b.head_at, b.state)


class ScopeFiles:
    """The open scope files, least recently used first; ``acquire`` takes a use on one (opening it if needed)."""

    def __init__(
        self,
        scopes_dir: Path,
        executor: Executor,
        *,
        layout: int,
        spares: SpareFiles,
        max_open: int,
        read_executor: Executor | None = None,
        stage_on_loop: bool = True,
    ) -> None:
        self.scopes_dir = scopes_dir
        self.executor = executor
        self.read_executor = read_executor
        self.stage_on_loop = stage_on_loop
        self.layout = layout
        self.spares = spares
        self.max_open = max_open
        self.files: OrderedDict[str, ScopeFile] = OrderedDict()
        self.lock = asyncio.Lock()  # held for the cache's bookkeeping, never while a file is being opened
        self._released = asyncio.Event()  # set whenever a file loses its last user or finishes closing
        self.closing: set[asyncio.Task[None]] = set()
        self.opening: dict[str, asyncio.Future[None]] = {}  # scopes whose files are being opened, each by one caller

    def path_for(self, scope: ScopeId) -> Path:
        return self.scopes_dir / f"{scope.file_stem}.db"

    @property
    def open_files(self) -> int:
        """Scope files holding handles: open in the cache, being opened, or being closed after eviction."""
        return len(self.files) + len(self.opening) + len(self.closing)

    def take(self, key: str) -> ScopeFile | None:
        """The open file of a scope with a use taken on it, without waiting (None when it is not open)."""
        sf = self.files.get(key)
        if sf is not None:
            self.files.move_to_end(key)
            sf.users += 1
        return sf

    def release(self, sf: ScopeFile) -> None:
        sf.users -= 1
        if sf.users == 0:
            self._released.set()

    async def acquire(self, sid: ScopeId, *, create: bool) -> tuple[ScopeFile, bool]:
        """The scope's open file with a use taken on it, and whether its file was created just now; waits for a free slot
        while ``max_open`` are in use. Files of different scopes open at the same time (an alert storm declares
        many incidents at once); callers wanting the scope another caller is opening wait for that one."""
        key = str(sid)
        while True:
            sf = self.take(key)
            if sf is not None:
                return sf, False
            opening = self.opening.get(key)
            if opening is not None:
                await asyncio.shield(opening)  # then take it, or open it ourselves if that caller failed
                continue
            async with self.lock:
                if key in self.files or key in self.opening:
                    continue
                if self.open_files >= self.max_open:
                    self.evict(len(self.files) + len(self.opening) + 1 - self.max_open)  # frees a slot once closed
                reserved = self.open_files < self.max_open
                if reserved:
                    self.opening[key] = asyncio.get_running_loop().create_future()
                else:
                    self._released.clear()  # every open file is in use: wait (below) for one to be released
            if reserved:
                return await self._open(sid, create=create)
            with contextlib.suppress(TimeoutError):  # re-check now and then, even if a release went unsignalled
                await asyncio.wait_for(self._released.wait(), 0.25)

    async def _open(self, sid: ScopeId, *, create: bool) -> tuple[ScopeFile, bool]:
        """Open the file of a scope reserved in ``opening`` (outside the lock), put it in the cache and end the
        reservation, whether it opened or not. A caller cancelled during the open waits for it to end (it runs on a
        worker regardless), so the file's connections join the cache instead of being left open, unreferenced."""
        key, path = str(sid), self.path_for(sid)
        try:
            new = not path.exists()
            if new and not create:
                raise NotFound(f"no such scope: {key}")
            self.scopes_dir.mkdir(parents=True, exist_ok=True)
            sf = ScopeFile(sid, path, self.executor, self.layout, self.read_executor, stage_on_loop=self.stage_on_loop)
            opening = asyncio.ensure_future(
                sf.file.open(prepare=functools.partial(self.spares.take, path) if new else None)
            )
            try:
                await asyncio.shield(opening)
            except asyncio.CancelledError:  # the open goes on on its worker: let it end, and keep the file
                await asyncio.wait([opening])
                if not opening.cancelled() and opening.exception() is None:
                    self.files[key] = sf  # unused, so evictable; closed with the cache, not left to the GC
                raise
            self.files[key] = sf
            sf.users += 1
        finally:
            self.opening.pop(key).set_result(None)
            if key not in self.files:
                self._released.set()  # it failed: its slot is free for a caller waiting for one
        # Keep a few slots free ahead of time, so the next new scope does not wait for a close.
        self.evict(len(self.files) + len(self.opening) - (self.max_open - max(1, self.max_open // 16)), keep=key)
        return sf, new

    def evict(self, n: int, *, keep: str = "") -> None:
        """Take up to ``n`` least recently used files that nobody uses out of the cache and close them in the
        background (under the open lock; the lock is not held while they close). Until a close has finished its
        file still counts in ``open_files``, so the bound holds; a scope evicted and needed again at once is simply
        opened anew beside the closing one (WAL allows it; the closing one has nothing queued)."""
        if n <= 0:
            return
        victims = [k for k, f in self.files.items() if f.users == 0 and f.file.idle and k != keep][:n]
        for key in victims:
            sf = self.files.pop(key)
            task = asyncio.get_running_loop().create_task(self._close_evicted(sf), name=f"evict:{key}")
            self.closing.add(task)
            task.add_done_callback(self._evicted)

    async def _close_evicted(self, sf: ScopeFile) -> None:
        try:
            await sf.file.close()
        except Exception:
            log.exception("closing evicted scope file %s failed", sf.key)

    def _evicted(self, task: asyncio.Task[None]) -> None:
        self.closing.discard(task)
        self._released.set()

    async def discard_if_empty(self, sf: ScopeFile) -> None:
        """A failed first append leaves no empty scope file behind (nothing half-written).

        Checked under the open lock with the file out of the cache, so nobody can start using it meanwhile; a
        declaration that committed since the failure (through this store or another one) keeps the file.
        """
        async with self.lock:
            if self.files.get(sf.key) is not sf or sf.users > 1:
                return
            del self.files[sf.key]

            def declared(conn: Connection) -> bool:
                return conn.execute(sa.select(t.state.c.version).where(t.state.c.id == 1)).first() is not None

            try:
                keep = await sf.file.read(declared) or sf.users > 1
            except Exception:
                keep = True  # when in doubt, delete nothing
            if keep:
                self.files[sf.key] = sf
                return
            await sf.file.close()
            for suffix in ("", "-wal", "-shm"):
                Path(str(sf.file.path) + suffix).unlink(missing_ok=True)
        self._released.set()

    async def close(self) -> None:
        async with self.lock:  # no new reservation now; the files being opened join the cache first
            await asyncio.gather(*(asyncio.shield(f) for f in self.opening.values()))
            files = list(self.files.values())
            self.files.clear()
            for sf in files:
                await sf.file.close()
        await asyncio.gather(*self.closing, return_exceptions=True)
