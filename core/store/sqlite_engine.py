"""The SQLite engine of one file: WAL, ``synchronous=FULL``, a busy timeout, and ``BEGIN IMMEDIATE`` for writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from core.errors import StorageError

BUSY_TIMEOUT_S = 30.0


def make_engine(path: Path) -> Engine:
    """A pysqlite engine with WAL, synchronous=FULL and BEGIN IMMEDIATE for writes (SQLAlchemy's recipe)."""
    engine = sa.create_engine(
        f"sqlite:///{path}",
        poolclass=StaticPool,
        connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_S},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # On the DBAPI connection itself: ``exec_driver_sql`` builds an execution context and a result for a
        # statement that returns nothing (~40-60 µs of CPU per transaction, measured; see bench/append.py).
        conn.connection.driver_connection.execute(  # type: ignore[union-attr]
            "BEGIN IMMEDIATE" if conn.info.get("write") else "BEGIN"
        )

    return engine


def dbapi_of(conn: Connection) -> Any:
    """The sqlite3 connection under a SQLAlchemy one (open: the caller holds it)."""
    dbapi = conn.connection.driver_connection
    if dbapi is None:
        raise StorageError("the SQLite connection is closed")
    return dbapi
