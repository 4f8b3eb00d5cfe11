"""Keyed locks across replicas: PostgreSQL session advisory locks on one dedicated connection per process.

``AdvisoryLocks.hold(*keys)`` first takes the keys in-process (``KeyedLocks``: one holder per key per process,
so a session lock is never taken twice by this session), then ``pg_try_advisory_lock`` on each key's 64-bit
hash, all or none: when another replica holds one of them, what was taken is released and it tries again after
a short, growing pause (no worker thread ever blocks in the database, and no two holders of overlapping key
sets can deadlock). A replica that dies loses its connection and with it its locks, at once. The alert router's
``RouteLocks`` (core/store/ports.py) on PostgreSQL, so that concurrent first alerts on several replicas open one
incident.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from decklog.core.alerts.locks import KeyedLocks
from decklog.core.store.postgres.schema import engine_url

log = logging.getLogger(__name__)

RETRY_FIRST_S = 0.002
RETRY_MAX_S = 0.05


def lock_id(key: str) -> int:
    """A stable signed 64-bit id for ``key`` (``pg_try_advisory_lock(bigint)``), the same in every process."""
    digest = hashlib.blake2b(f"decklog:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def libpq_url(url: str) -> str:
    return "postgresql://" + engine_url(url).removeprefix("postgresql+psycopg://")


class AdvisoryLocks:
    """``RouteLocks`` that hold across every process on the database at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = libpq_url(url)
        self._local = KeyedLocks()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="decklog-pg-locks")
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._closed = False
        self.waits = 0  # attempts that found a key held by another replica

    @asynccontextmanager
    async def hold(self, *keys: str) -> AsyncIterator[None]:
        async with self._local.hold(*keys):
            ids = sorted({lock_id(k) for k in keys})
            await self._acquire(ids)
            try:
                yield
            finally:
                await asyncio.shield(self._call(self._unlock, ids))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def shut() -> None:
            if self._conn is not None:
                self._conn.close()  # the session's locks go with it
                self._conn = None

        await self._call(shut)
        self._executor.shutdown(wait=True)

    # -- on the lock thread -----------------------------------------------------------------------------------

    async def _acquire(self, ids: Sequence[int]) -> None:
        pause = RETRY_FIRST_S
        while True:
            attempt = asyncio.get_running_loop().run_in_executor(self._executor, self._try, ids)
            try:
                if await asyncio.shield(attempt):
                    return
            except asyncio.CancelledError:
                attempt.add_done_callback(lambda f: self._release_if_taken(f, ids))
                raise
            self.waits += 1
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_S)

    def _release_if_taken(self, attempt: asyncio.Future[bool], ids: Sequence[int]) -> None:
        if not attempt.cancelled() and attempt.exception() is None and attempt.result():
            self._executor.submit(self._unlock, ids)

    async def _call(self, fn: object, *args: object) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)  # type: ignore[arg-type]

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.url, autocommit=True, application_name="decklog-locks")
        return self._conn

    def _try(self, ids: Sequence[int]) -> bool:
        """All of ``ids`` or none of them (what was taken is given back when one is held elsewhere)."""
        try:
            conn = self._connection()
            row = conn.execute(
                "SELECT array_agg(pg_try_advisory_lock(k) ORDER BY k) FROM unnest(%s::bigint[]) AS k", (list(ids),)
            ).fetchone()
        except psycopg.OperationalError:
            log.warning("route locks: the lock connection failed; reconnecting", exc_info=True)
            self._conn = None
            raise
        got = list(row[0]) if row and row[0] is not None else []
        if all(got) and len(got) == len(ids):
            return True
        self._unlock([i for i, ok in zip(ids, got, strict=False) if ok])
        return False

    def _unlock(self, ids: Sequence[int]) -> None:
        if not ids or self._conn is None or self._conn.closed:
            return  # a lost connection took its locks with it
        try:
            self._conn.execute("SELECT pg_advisory_unlock(k) FROM unnest(%s::bigint[]) AS k", (list(ids),))
        except psycopg.OperationalError:
            log.warning("route locks: unlock failed (the connection is gone, and its locks with it)")
            self._conn = None
