"""The alert inbox in one SQLite file (``DATA_DIR/alert_inbox.db``), on the group-committing ``SqliteFile``.

Every ``put`` waiting when the writer picks up a batch shares its transaction and its one fsync
(``synchronous=FULL``), so 32 notifications arriving together cost one fsync. ``finish`` (the outcomes) and
``attempt`` are bookkeeping whose loss only means routing the notification again, which the log's idempotency keys
make harmless: they commit without an fsync of their own and ride on the next durable commit. A routed row drops
its body and keeps its outcomes: the receipt.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy.engine import Connection

from decklog.core.store.ports import (
    ERROR_MAX,
    RECEIPT_RETENTION_S,
    AlertReceipt,
    InboxStats,
    StoredNotification,
)
from decklog.core.store.sqlite.file import SqliteFile

FILE_NAME = "alert_inbox.db"
SCHEMA = """
CREATE TABLE IF NOT EXISTS alert_inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    receipt TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL,
    body BLOB,
    accepted INTEGER NOT NULL,
    received_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    routed_at REAL,
    outcomes TEXT,
    error TEXT
)
"""
PENDING_INDEX = "CREATE INDEX IF NOT EXISTS alert_inbox_pending ON alert_inbox (id) WHERE routed_at IS NULL"
ROUTED_INDEX = "CREATE INDEX IF NOT EXISTS alert_inbox_routed ON alert_inbox (routed_at) WHERE routed_at IS NOT NULL"


class _Batch:
    """Per-transaction context: did a durable ``put`` run in it (then its commit is an fsync)?"""

    __slots__ = ("durable",)

    def __init__(self) -> None:
        self.durable = False


class SqliteAlertInbox:
    """``await SqliteAlertInbox.open(data_dir)``; see ``core.store.ports.AlertInbox``."""

    def __init__(self, path: Path, *, now: Callable[[], float] = time.time) -> None:
        self.path = path
        self.stats = InboxStats()
        self._now = now
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decklog-alert-inbox")
        self.file: SqliteFile[_Batch] = SqliteFile(
            path,
            self._executor,
            init_schema=_init_schema,
            begin_batch=lambda _conn: _Batch(),
            end_batch=self._end_batch,
        )

    @classmethod
    async def open(cls, data_dir: Path | str, *, now: Callable[[], float] = time.time) -> SqliteAlertInbox:
        directory = Path(data_dir)
        directory.mkdir(parents=True, exist_ok=True)
        inbox = cls(directory / FILE_NAME, now=now)
        await inbox.file.open()
        return inbox

    def _end_batch(self, _conn: Connection, batch: _Batch) -> None:
        if batch.durable:
            self.stats.fsyncs += 1

    async def put(self, *, receipt: str, source: str, body: bytes, accepted: int) -> None:
        row = (receipt, source, bytes(body), accepted, self._now())

        def w(conn: Connection, batch: _Batch) -> None:
            batch.durable = True
            conn.exec_driver_sql(
                "INSERT INTO alert_inbox (receipt, source, body, accepted, received_at) VALUES (?, ?, ?, ?, ?)", row
            )

        await self.file.write(w, savepoint=False)
        self.stats.persisted += 1

    async def pending(self, *, limit: int = 1000) -> list[StoredNotification]:
        def q(conn: Connection) -> list[StoredNotification]:
            rows = conn.exec_driver_sql(
                "SELECT receipt, source, body, accepted, received_at, attempts FROM alert_inbox "
                "WHERE routed_at IS NULL ORDER BY id LIMIT ?",
                (limit,),
            ).fetchall()
            return [StoredNotification(r[0], r[1], bytes(r[2] or b""), r[3], r[4], r[5]) for r in rows]

        return await self.file.read(q)

    async def attempt(self, receipts: Sequence[str]) -> None:
        keys = [(r,) for r in receipts]

        def w(conn: Connection, _b: _Batch) -> None:
            conn.exec_driver_sql("UPDATE alert_inbox SET attempts = attempts + 1 WHERE receipt = ?", keys)

        if keys:
            await self.file.write(w, savepoint=False, durable=False)

    async def finish(self, results: Sequence[AlertReceipt]) -> None:
        at = self._now()
        rows = [
            (
                at,
                None if r.outcomes is None else json.dumps(r.outcomes, separators=(",", ":")),
                None if r.error is None else r.error[:ERROR_MAX],
                r.receipt,
            )
            for r in results
        ]

        def w(conn: Connection, _b: _Batch) -> None:
            conn.exec_driver_sql(
                "UPDATE alert_inbox SET routed_at = ?, outcomes = ?, error = ?, body = NULL "
                "WHERE receipt = ? AND routed_at IS NULL",
                rows,
            )

        if rows:
            await self.file.write(w, savepoint=False, durable=False)

    async def receipt(self, receipt: str) -> AlertReceipt | None:
        def q(conn: Connection) -> AlertReceipt | None:
            r = conn.exec_driver_sql(
                "SELECT receipt, source, accepted, received_at, routed_at, outcomes, error FROM alert_inbox "
                "WHERE receipt = ?",
                (receipt,),
            ).first()
            if r is None:
                return None
            return AlertReceipt(r[0], r[1], r[2], r[3], r[4], None if r[5] is None else json.loads(r[5]), r[6])

        return await self.file.read(q)

    async def pending_count(self) -> int:
        def q(conn: Connection) -> int:
            return int(conn.exec_driver_sql("SELECT count(*) FROM alert_inbox WHERE routed_at IS NULL").scalar() or 0)

        return await self.file.read(q, small=True)

    async def prune(self, *, older_than_s: float = RECEIPT_RETENTION_S) -> int:
        cutoff = self._now() - older_than_s

        def w(conn: Connection, _b: _Batch) -> int:
            cur = conn.exec_driver_sql(
                "DELETE FROM alert_inbox WHERE routed_at IS NOT NULL AND routed_at < ?", (cutoff,)
            )
            return int(cur.rowcount)

        return await self.file.write(w, savepoint=False, durable=False)

    async def close(self) -> None:
        await self.file.close()
        self._executor.shutdown(wait=True)


def _init_schema(conn: Connection) -> None:
    for statement in (SCHEMA, PENDING_INDEX, ROUTED_INDEX):
        conn.exec_driver_sql(statement)
