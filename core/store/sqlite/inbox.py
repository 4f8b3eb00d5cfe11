"""The inbox in one SQLite file (``DATA_DIR/inbox.db``), on the same group-committing ``SqliteFile`` as the logs.

Every ``put`` that is waiting when the writer picks up a batch shares its ``BEGIN IMMEDIATE`` transaction and
its one commit — one fsync under ``synchronous=FULL`` — so 16 concurrent Slack requests cost one fsync, not 16.
``attempt`` and ``done`` marks are bookkeeping whose loss only means one more (idempotent) replay: they commit
without an fsync of their own (``durable=False``) and ride on the next durable commit, as outbox marks do. A
``park`` is durable: a poison request must not come back at the next start.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from decklog.core.store.ports import DONE_RETENTION_S, ERROR_MAX, InboxItem, InboxStats, ParkedRequest
from decklog.core.store.sqlite.file import SqliteFile

SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL,
    body TEXT NOT NULL,
    meta TEXT NOT NULL,
    received_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    done_at REAL,
    parked_at REAL,
    error TEXT
)
"""
#: Columns added after the first inbox.db (added to an older file when it is opened).
ADDED_COLUMNS = {
    "parked_at": "ALTER TABLE inbox ADD COLUMN parked_at REAL",
    "error": "ALTER TABLE inbox ADD COLUMN error TEXT",
}
PENDING = "done_at IS NULL AND parked_at IS NULL"
PARKED = "done_at IS NULL AND parked_at IS NOT NULL"
PENDING_INDEX = "CREATE INDEX IF NOT EXISTS inbox_pending ON inbox (id) WHERE done_at IS NULL"
DONE_INDEX = "CREATE INDEX IF NOT EXISTS inbox_done ON inbox (done_at) WHERE done_at IS NOT NULL"


class _Batch:
    """Per-transaction context: did a durable ``put`` run in it (then its commit is an fsync)?"""

    __slots__ = ("durable",)

    def __init__(self) -> None:
        self.durable = False


class SqliteInbox:
    """``await SqliteInbox.open(data_dir)``; see ``core.store.ports.Inbox``."""

    def __init__(self, path: Path, *, now: Callable[[], float] = time.time) -> None:
        self.path = path
        self.stats = InboxStats()
        self._now = now
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decklog-inbox")
        self.file: SqliteFile[_Batch] = SqliteFile(
            path,
            self._executor,
            init_schema=_init_schema,
            begin_batch=lambda _conn: _Batch(),
            end_batch=self._end_batch,
        )

    @classmethod
    async def open(cls, data_dir: Path | str, *, now: Callable[[], float] = time.time) -> SqliteInbox:
        directory = Path(data_dir)
        directory.mkdir(parents=True, exist_ok=True)
        inbox = cls(directory / "inbox.db", now=now)
        await inbox.file.open()
        return inbox

    def _end_batch(self, _conn: Connection, batch: _Batch) -> None:
        if batch.durable:
            self.stats.fsyncs += 1

    async def put(self, *, key: str, source: str, body: dict[str, Any], meta: dict[str, Any]) -> bool:
        row = (key, source, json.dumps(body, separators=(",", ":")), json.dumps(meta), self._now())

        def w(conn: Connection, batch: _Batch) -> bool:
            batch.durable = True
            cur = conn.exec_driver_sql(
                "INSERT OR IGNORE INTO inbox (key, source, body, meta, received_at) VALUES (?, ?, ?, ?, ?)", row
            )
            return bool(cur.rowcount)

        stored = await self.file.write(w, savepoint=False)
        if stored:
            self.stats.persisted += 1
        else:
            self.stats.duplicates += 1
        return stored

    async def attempt(self, *, key: str) -> int:
        def w(conn: Connection, _b: _Batch) -> int:
            conn.exec_driver_sql("UPDATE inbox SET attempts = attempts + 1 WHERE key = ?", (key,))
            got = conn.exec_driver_sql("SELECT attempts FROM inbox WHERE key = ?", (key,)).scalar()
            return int(got or 0)

        return await self.file.write(w, savepoint=False, durable=False)

    async def done(self, *, key: str) -> None:
        at = self._now()

        def w(conn: Connection, _b: _Batch) -> None:
            conn.exec_driver_sql("UPDATE inbox SET done_at = ? WHERE key = ? AND done_at IS NULL", (at, key))

        await self.file.write(w, savepoint=False, durable=False)

    async def park(self, *, key: str, error: str, attempts: int) -> None:
        at, text = self._now(), error[:ERROR_MAX]

        def w(conn: Connection, batch: _Batch) -> None:
            batch.durable = True
            conn.exec_driver_sql(
                f"UPDATE inbox SET parked_at = ?, error = ?, attempts = ? WHERE key = ? AND {PENDING}",
                (at, text, attempts, key),
            )

        await self.file.write(w, savepoint=False)

    async def pending(self) -> list[InboxItem]:
        def q(conn: Connection) -> list[InboxItem]:
            rows = conn.exec_driver_sql(
                f"SELECT key, source, body, meta, received_at, attempts FROM inbox WHERE {PENDING} ORDER BY id"
            ).fetchall()
            return [InboxItem(r[0], r[1], json.loads(r[2]), json.loads(r[3]), r[4], r[5]) for r in rows]

        return await self.file.read(q)

    async def pending_count(self) -> int:
        def q(conn: Connection) -> int:
            return int(conn.exec_driver_sql(f"SELECT count(*) FROM inbox WHERE {PENDING}").scalar() or 0)

        return await self.file.read(q, small=True)

    async def parked(self) -> list[ParkedRequest]:
        def q(conn: Connection) -> list[ParkedRequest]:
            rows = conn.exec_driver_sql(
                "SELECT key, source, body, received_at, attempts, parked_at, error "
                f"FROM inbox WHERE {PARKED} ORDER BY id"
            ).fetchall()
            return [ParkedRequest(r[0], r[1], json.loads(r[2]), r[3], r[4], r[5], r[6] or "") for r in rows]

        return await self.file.read(q)

    async def parked_count(self) -> int:
        def q(conn: Connection) -> int:
            return int(conn.exec_driver_sql(f"SELECT count(*) FROM inbox WHERE {PARKED}").scalar() or 0)

        return await self.file.read(q, small=True)

    async def retry_parked(self) -> int:
        def w(conn: Connection, batch: _Batch) -> int:
            batch.durable = True
            cur = conn.exec_driver_sql(f"UPDATE inbox SET parked_at = NULL, error = NULL, attempts = 0 WHERE {PARKED}")
            return int(cur.rowcount)

        return await self.file.write(w, savepoint=False)

    async def prune(self, *, older_than_s: float = DONE_RETENTION_S) -> int:
        cutoff = self._now() - older_than_s

        def w(conn: Connection, _b: _Batch) -> int:
            cur = conn.exec_driver_sql("DELETE FROM inbox WHERE done_at IS NOT NULL AND done_at < ?", (cutoff,))
            return int(cur.rowcount)

        return await self.file.write(w, savepoint=False, durable=False)

    async def close(self) -> None:
        await self.file.close()
        self._executor.shutdown(wait=True)


def _init_schema(conn: Connection) -> None:
    conn.exec_driver_sql(SCHEMA)
    have = {r[1] for r in conn.exec_driver_sql("PRAGMA table_info(inbox)")}
    for column, statement in ADDED_COLUMNS.items():
        if column not in have:
            conn.exec_driver_sql(statement)
    for statement in (PENDING_INDEX, DONE_INDEX):
        conn.exec_driver_sql(statement)
