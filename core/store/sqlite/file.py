"""One SQLite file with one connection, a group-committing writer, and reads — driven from asyncio.

Why not ``create_async_engine("sqlite+aiosqlite://")``: aiosqlite hops to its thread for every statement
(5+ hops per commit, measured at 500–930 commits/s), while a group-commit batch here is one hop: every write
request that waits while a batch is committing joins the next batch, which runs in ONE ``BEGIN IMMEDIATE``
transaction on a worker thread (SQLAlchemy Core, sync connection), commits once (one fsync under
``synchronous=FULL``) and resolves all their futures from one callback on the event loop, which also submits the
batch that formed meanwhile (no writer task, no queue: two fewer loop wake-ups per batch). Each request may run
inside a SAVEPOINT, so one failing request does not fail its neighbours. A small batch of quick appends runs
its statements on the loop's thread instead, and only its COMMIT on a worker: no GIL hand-off per statement
(docs/decisions/0133-small-batches-staged-on-the-loop.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from decklog.core.errors import StorageError
from decklog.core.store.sqlite.engine import dbapi_of, make_engine

log = logging.getLogger(__name__)
T = TypeVar("T")
C = TypeVar("C")

MAX_BATCH = 512
#: The most requests a batch staged on the event loop's thread may hold (decision 133); larger ones run on a worker.
LOOP_BATCH = 16


@dataclass
class _Request(Generic[C]):
    fn: Callable[[Connection, C], Any]
    future: asyncio.Future[Any]
    savepoint: bool = True
    durable: bool = True
    on_loop: bool = False
    result: Any = None
    error: BaseException | None = None


class SqliteFile(Generic[C]):
    """A SQLite file driven from asyncio.

    ``write(fn)`` queues ``fn(conn, ctx)``; the writer runs every queued request in one transaction.
    ``ctx`` is a per-batch context built by ``begin_batch(conn)`` (e.g. the scope's state, loaded once per batch)
    and finished by ``end_batch(conn, ctx)`` just before COMMIT (e.g. to write the folded state).
    """

    def __init__(
        self,
        path: Path,
        executor: Executor,
        *,
        init_schema: Callable[[Connection], None],
        begin_batch: Callable[[Connection], C],
        end_batch: Callable[[Connection, C], None],
        on_abort: Callable[[], None] = lambda: None,
        read_executor: Executor | None = None,
        stage_on_loop: bool = False,
        page_size: int | None = None,
        before_close: Callable[[Any], None] | None = None,
    ) -> None:
        self.path = path
        self._page_size = page_size  # of the file when this opens it first (core/store/sqlite/engine.py)
        # Called at close with the writer's DBAPI connection, after the reader is closed and with no transaction open
        # (a scope file compacts itself there: core/store/sqlite/compaction.py).
        self._before_close = before_close
        # Small batches of on_loop requests are staged on the loop's thread, only their commit on a worker (decision 133)
        self._loop_staging = stage_on_loop
        self._executor = executor
        # Long reads (an agent turn's views, a report) run here, so an append never queues behind one on the
        # writers' threads (decision 130).
        self._read_executor = read_executor or executor
        self._init_schema = init_schema
        self._begin_batch = begin_batch
        self._end_batch = end_batch
        self._on_abort = on_abort
        self._engine: Engine | None = None
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._read_engine: Engine | None = None
        self._read_conn: Connection | None = None
        self._read_lock = threading.Lock()
        self._synchronous = "FULL"
        self._pending: list[_Request[C]] = []
        self._in_flight = False
        self._busy = 0
        self.batches = 0
        self.requests = 0

    # -- lifecycle --------------------------------------------------------------------------------------------

    async def open(self, prepare: Callable[[], object] | None = None) -> None:
        """Open both connections in one hop to a worker; ``prepare()`` runs first there (e.g. put a spare file
        in place). The read connection is opened now, not on the first read: that read is usually the
        dispatcher's, right after the first commit, with a person waiting for what it delivers."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._open_sync, prepare)

    def _open_sync(self, prepare: Callable[[], object] | None = None) -> None:
        try:
            if prepare is not None:
                prepare()
            self._engine = make_engine(self.path, wait_in_python=self._loop_staging, page_size=self._page_size)
            self._conn = self._engine.connect()
            self._conn.info["write"] = True
            with self._conn.begin():
                self._init_schema(self._conn)
            if self._loop_staging:  # never wait for a lock on the loop's thread; workers wait in begin_waiting
                dbapi_of(self._conn).execute("PRAGMA busy_timeout=0")
            with self._read_lock:
                self._open_reader()
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"cannot open {self.path}: {exc.__class__.__name__}: {exc}") from exc

    @property
    def idle(self) -> bool:
        return self._busy == 0 and not self._in_flight and not self._pending

    async def close(self) -> None:
        while not self.idle:  # let queued and running batches finish (each settles its callers)
            await asyncio.sleep(0.001)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_sync)

    def _close_sync(self) -> None:
        with self._read_lock:
            if self._read_conn is not None:
                self._read_conn.close()
                self._read_conn = None
            if self._read_engine is not None:
                self._read_engine.dispose()
                self._read_engine = None
        with self._lock:
            if self._conn is not None and self._before_close is not None:
                try:
                    self._before_close(dbapi_of(self._conn))
                except Exception:  # it is housekeeping: the file closes regardless
                    log.exception("%s: before closing", self.path.name)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    # -- reads --------------------------------------------------------------------------------------------------

    async def read(self, fn: Callable[[Connection], T], *, small: bool = False) -> T:
        """Run ``fn(conn)`` in a read transaction.

        ``small`` reads (a state row, a handful of outbox rows) run on the event loop's own thread when the read
        connection is free: under WAL a reader never waits for a writer, and a point query costs tens of
        microseconds, far less than the hop to a worker thread and back. Everything else runs on a worker.
        """
        self._busy += 1
        try:
            if small and self._read_conn is not None and self._read_lock.acquire(blocking=False):
                try:
                    return self._read_locked(fn)
                finally:
                    self._read_lock.release()
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._read_executor, self._read_sync, fn)
        finally:
            self._busy -= 1

    def _read_sync(self, fn: Callable[[Connection], T]) -> T:
        """Reads use their own connection: under WAL they see the last commit and never wait for a writer's fsync."""
        with self._read_lock:
            return self._read_locked(fn)

    def _read_locked(self, fn: Callable[[Connection], T]) -> T:
        if self._read_conn is None:
            self._require_conn()  # the file is open (and its schema made) by the writer's connection
            self._open_reader()
        conn = self._read_conn
        assert conn is not None
        try:
            with conn.begin():
                return fn(conn)
        except (sa.exc.OperationalError, sqlite3.OperationalError) as exc:
            raise StorageError(f"reading {self.path.name}: {getattr(exc, 'orig', exc)}") from exc

    def _open_reader(self) -> None:
        """Under ``_read_lock``."""
        self._read_engine = make_engine(self.path)
        self._read_conn = self._read_engine.connect()
        self._read_conn.info["write"] = False

    # -- writes -------------------------------------------------------------------------------------------------

    async def write(
        self,
        fn: Callable[[Connection, C], T],
        *,
        savepoint: bool = True,
        durable: bool = True,
        on_loop: bool = False,
    ) -> T:
        """Run ``fn(conn, ctx)`` in the next group-committed transaction.

        With ``savepoint=False`` the caller promises that ``fn`` raises before writing anything (it only reads
        and stages rows in ``ctx``), which saves two statements per request on the hot append path.
        With ``durable=False`` (bookkeeping whose loss only means a redelivery: "delivered" marks, sender memos) the
        batch commits with ``synchronous=NORMAL`` — no fsync — unless another request in it needs one; the next
        durable commit's fsync of the WAL covers it too.
        With ``on_loop=True`` (implies no savepoint) the caller promises that ``fn`` is quick, never blocks and uses
        only the DBAPI cursor (``raw_cursor(conn)``): a small batch of such requests runs its statements on the
        event loop's thread and only its COMMIT on a worker (decision 133).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._pending.append(_Request(fn, future, savepoint and not on_loop, durable, on_loop))
        if not self._in_flight:
            self._in_flight = True  # the batch is formed a loop turn from now (below)
            loop.call_soon(self._submit, loop)
        return await future

    # Group commit without a writer task: at most one batch per file is in flight on a worker thread; requests that
    # arrive meanwhile wait in ``_pending`` and form the next batch, which the finished batch's callback submits
    # (one hop to the worker and one back per batch; measured in bench/append.py, docs/decisions/0068-group-commit-without-a-writer-task.md). A batch is
    # formed one loop turn after the first request of an idle file: the callers that the last commit woke all run
    # in that turn, so they share the next commit instead of the first of them committing alone.

    def _submit(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send the next batch to a worker (``_in_flight`` is already set and stays set until it is done)."""
        batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
        try:
            if self._loop_staging and len(batch) <= LOOP_BATCH and all(r.on_loop for r in batch):
                staged = self._stage_on_loop(batch, loop)
                if staged:
                    self._submit_commit(batch, loop)
                if staged is not None:
                    return
            self._executor.submit(self._run_and_report, batch, loop)
        except RuntimeError as exc:  # the executor is shut down: nobody will ever run them
            self._batch_done(batch, StorageError(f"{self.path.name}: {exc}"), loop)

    def _stage_on_loop(self, batch: list[_Request[C]], loop: asyncio.AbstractEventLoop) -> bool | None:
        """Begin the batch's transaction and run its requests here, on the loop's thread; only the COMMIT (the
        fsync) goes to a worker (decision 133). True: staged, the transaction is open and the file's lock held
        until the commit. False: the batch failed and is settled. None: the write lock is taken elsewhere (another
        process, or a close): run the batch on a worker as usual, where waiting is allowed."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            conn = self._require_conn()
            dbapi = dbapi_of(conn)
            self._set_synchronous(dbapi, batch)
            try:  # busy_timeout is 0 on this connection: the loop never waits for another process's lock
                dbapi.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                self._lock.release()
                return None
        except BaseException:
            self._lock.release()
            raise
        try:
            self._run_requests(conn, batch)
        except BaseException as exc:
            self._rollback(conn)
            self._lock.release()
            error = (
                StorageError(f"writing {self.path.name}: {getattr(exc, 'orig', exc)}")
                if isinstance(exc, (sa.exc.OperationalError, sqlite3.OperationalError))
                else exc
            )
            self._batch_done(batch, error, loop)
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit: the batch is settled, and the loop hears it too
            return False
        return True

    def _submit_commit(self, batch: list[_Request[C]], loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._executor.submit(self._commit_and_report, batch, loop)
        except RuntimeError as exc:  # the executor is shut down: give the staged transaction up here
            try:
                with contextlib.suppress(Exception):  # the batch is settled below whatever the rollback says
                    self._rollback(self._require_conn())
            finally:
                self._lock.release()
            self._batch_done(batch, StorageError(f"{self.path.name}: {exc}"), loop)

    def _commit_and_report(self, batch: list[_Request[C]], loop: asyncio.AbstractEventLoop) -> None:
        """On the worker thread: commit what the loop staged, release the file, report to the loop."""
        error: BaseException | None = None
        try:
            conn = self._require_conn()
            try:
                dbapi_of(conn).commit()
            except BaseException as exc:
                self._rollback(conn)
                error = StorageError(f"writing {self.path.name}: {exc}") if isinstance(exc, sqlite3.Error) else exc
            else:
                self.batches += 1
                self.requests += len(batch)
        finally:
            self._lock.release()
        self._report(batch, error, loop)

    def _rollback(self, conn: Connection) -> None:
        self._on_abort()
        dbapi = dbapi_of(conn)
        if dbapi.in_transaction:
            dbapi.rollback()
        if conn.in_transaction():  # a request began SQLAlchemy's transaction after all
            conn.rollback()

    def _set_synchronous(self, dbapi: Any, batch: list[_Request[C]]) -> None:
        mode = "FULL" if any(r.durable for r in batch) else "NORMAL"
        if mode != self._synchronous:  # outside any transaction: the DBAPI connection is in autocommit mode
            dbapi.execute(f"PRAGMA synchronous={mode}")
            self._synchronous = mode

    def _run_and_report(self, batch: list[_Request[C]], loop: asyncio.AbstractEventLoop) -> None:
        """On the worker thread: run the batch, then hand the outcome back to the event loop."""
        error: BaseException | None = None
        try:
            self._run_batch(batch)
        except BaseException as exc:  # the whole transaction failed: every request hears about it
            error = exc
        self._report(batch, error, loop)

    def _report(self, batch: list[_Request[C]], error: BaseException | None, loop: asyncio.AbstractEventLoop) -> None:
        """From a worker thread: settle the batch on the loop."""
        try:
            loop.call_soon_threadsafe(self._batch_done, batch, error, loop)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _batch_done(
        self, batch: list[_Request[C]], error: BaseException | None, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._settle(batch, error)
        if self._pending:
            self._submit(loop)
        else:
            self._in_flight = False

    @staticmethod
    def _settle(batch: list[_Request[C]], error: BaseException | None) -> None:
        for req in batch:
            if req.future.done():  # its caller was cancelled meanwhile
                continue
            if error is not None:
                req.future.set_exception(error if isinstance(error, Exception) else StorageError(str(error)))
            elif req.error is not None:
                req.future.set_exception(req.error)
            else:
                req.future.set_result(req.result)

    def _run_batch(self, batch: list[_Request[C]]) -> None:
        """On the worker thread: one transaction for the whole batch; the file's lock keeps closes out."""
        with self._lock:
            conn = self._require_conn()
            self._set_synchronous(dbapi_of(conn), batch)
            try:
                with conn.begin():
                    self._run_requests(conn, batch)
            except (sa.exc.OperationalError, sqlite3.OperationalError) as exc:
                self._on_abort()
                raise StorageError(f"writing {self.path.name}: {getattr(exc, 'orig', exc)}") from exc
            except BaseException:
                self._on_abort()
                raise
            self.batches += 1
            self.requests += len(batch)

    def _run_requests(self, conn: Connection, batch: list[_Request[C]]) -> None:
        ctx = self._begin_batch(conn)
        for req in batch:
            self._run_one(conn, ctx, req)
        self._end_batch(conn, ctx)

    @staticmethod
    def _run_one(conn: Connection, ctx: C, req: _Request[C]) -> None:
        savepoint = conn.begin_nested() if req.savepoint else None
        try:
            req.result = req.fn(conn, ctx)
        except (sa.exc.IntegrityError, sqlite3.IntegrityError) as exc:
            if savepoint is None:
                raise
            savepoint.rollback()
            req.error = StorageError(f"integrity: {getattr(exc, 'orig', exc)}")
        except (sa.exc.SQLAlchemyError, sqlite3.Error):
            raise  # the connection or the file is in trouble (also from compiled text on the cursor): the batch fails
        except Exception as exc:  # the request's own error (bad input, a bug in its decide)
            if savepoint is not None:
                savepoint.rollback()
            req.error = exc
        else:
            if savepoint is not None:
                savepoint.commit()

    def _require_conn(self) -> Connection:
        if self._conn is None:
            raise StorageError(f"{self.path.name} is closed")
        return self._conn
