"""The SQLite engine of one file: WAL, ``synchronous=FULL``, a busy timeout, and ``BEGIN IMMEDIATE`` for writes.

A connection that runs statements on the event loop's thread (decision 133) must never wait there for another
process's lock. Its engine is made with ``wait_in_python=True``, and its owner sets SQLite's own busy timeout to 0 once
the file is open: a ``BEGIN`` through SQLAlchemy (always on a worker thread) then waits for the lock here instead,
with the same bound.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from decklog.core.errors import StorageError

BUSY_TIMEOUT_S = 30.0


def make_engine(path: Path, *, wait_in_python: bool = False, page_size: int | None = None) -> Engine:
    """A pysqlite engine with WAL, synchronous=FULL and BEGIN IMMEDIATE for writes (SQLAlchemy's recipe).

    ``page_size``: the page size of a file this engine creates (set before the switch to WAL, which writes the
    file's first page); an existing file keeps its own."""
    engine = sa.create_engine(
        f"sqlite:///{path}",
        poolclass=StaticPool,
        connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_S},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_conn.cursor()
        if page_size is not None:
            cursor.execute(f"PRAGMA page_size={int(page_size)}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # On the DBAPI connection itself: ``exec_driver_sql`` builds an execution context and a result for a
        # statement that returns nothing (~40-60 µs of CPU per transaction, measured; see bench/append.py).
        sql, dbapi = ("BEGIN IMMEDIATE" if conn.info.get("write") else "BEGIN"), dbapi_of(conn)
        if wait_in_python:
            begin_waiting(dbapi, sql)
        else:
            dbapi.execute(sql)

    return engine


def begin_waiting(dbapi: Any, sql: str, *, timeout_s: float = BUSY_TIMEOUT_S) -> None:
    """``sql`` (a BEGIN), retried while another connection holds the lock, as SQLite's busy handler would (on a
    worker thread only: it sleeps)."""
    deadline, pause = time.monotonic() + timeout_s, 0.001
    while True:
        try:
            dbapi.execute(sql)
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def dbapi_of(conn: Connection) -> Any:
    """The sqlite3 connection under a SQLAlchemy one (open: the caller holds it)."""
    dbapi = conn.connection.driver_connection
    if dbapi is None:
        raise StorageError("the SQLite connection is closed")
    return dbapi
