"""The PostgreSQL backend's factory: one database that every replica shares (``DECKLOG_DATABASE_URL``).

Every scope, the index and the Slack inbox live in the database, and so does what replicas coordinate through:
the outbox cursors and the other replicas' commits, named leases, the alert router's advisory locks and rate
counts, Slack's per-channel post slots and the due agent turns — all on the database clock. The index, the inbox
and the coordination run on the log store's engine and worker threads (the first store this factory made).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import sqlalchemy as sa

from decklog.core.alarm import Alarm
from decklog.core.clock import Clock
from decklog.core.store.ports import (
    AlertInbox,
    ApiKeys,
    CursorClaims,
    DueTurns,
    Inbox,
    IndexPort,
    Leases,
    LogStore,
    PaceSlots,
    RateCounter,
    RouteLocks,
)
from decklog.core.store.postgres.alert_inbox import PostgresAlertInbox
from decklog.core.store.postgres.api_keys import PostgresApiKeys
from decklog.core.store.postgres.due_turns import PostgresDueTurns
from decklog.core.store.postgres.inbox import PostgresInbox
from decklog.core.store.postgres.index import PostgresIndex
from decklog.core.store.postgres.locks import AdvisoryLocks
from decklog.core.store.postgres.log_store import PostgresLogStore
from decklog.core.store.postgres.pace import PostgresPaceSlots
from decklog.core.store.postgres.rates import PostgresRateCounter


class PostgresFactory:
    """``PostgresFactory(url)``: the ports of the database at ``url`` (``postgresql://…``)."""

    name = "postgresql"

    def __init__(self, url: str, *, log_key: str | bytes | None = None, threads: int = 8) -> None:
        self.url = url
        self.log_key = log_key
        self.threads = threads
        self._store: PostgresLogStore | None = None  # the first store made: the other parts use its connections
        self._locks: AdvisoryLocks | None = None

    async def log_store(
        self,
        *,
        topics: Sequence[str] = ("index",),
        topic_kinds: Mapping[str, Collection[str]] | None = None,
        clock: Clock | None = None,
    ) -> LogStore:
        store = PostgresLogStore(
            self.url, topics=topics, topic_kinds=topic_kinds, clock=clock, log_key=self.log_key, threads=self.threads
        )
        try:
            await store.open()  # the schema made or checked now: a newer one stops start-up
        except BaseException:
            await store.close()
            raise
        if self._store is None:
            self._store = store
        return store

    def _own(self) -> PostgresLogStore:
        if self._store is None:
            raise RuntimeError("open the log store first: the other parts use its connections")
        return self._store

    async def index(self) -> IndexPort:
        store = self._own()
        index = PostgresIndex(store.engine, store.executor)
        await index.open()
        return index

    async def inbox(self) -> Inbox:
        store = self._own()
        return PostgresInbox(store.engine, store.executor)

    async def alert_inbox(self) -> AlertInbox:
        store = self._own()
        return PostgresAlertInbox(store.engine, store.executor)

    def inbox_exists(self) -> bool:
        return True  # its table is made with the schema

    def cursor_claims(self) -> CursorClaims | None:
        return self._own()

    def leases(self) -> Leases | None:
        return self._own()

    def route_locks(self) -> RouteLocks | None:
        if self._locks is None:
            self._locks = AdvisoryLocks(self.url)
        return self._locks

    def rate_counter(self) -> RateCounter | None:
        return PostgresRateCounter(self._own())

    def pace_slots(self) -> PaceSlots | None:
        return PostgresPaceSlots(self._own())

    def due_turns(self, alarm: Alarm, owner: str, *, max_wait: float, lease_s: float, poll_s: float) -> DueTurns | None:
        return PostgresDueTurns(self._own(), alarm, owner, max_wait=max_wait, lease_s=lease_s, poll_s=poll_s)

    async def api_keys(self) -> ApiKeys:
        store = self._own()
        return PostgresApiKeys(store.engine, store.executor)

    async def health(self) -> dict[str, str]:
        try:
            await self._own().run(lambda c: c.execute(sa.text("SELECT 1")))
            return {"database": "writable"}
        except Exception as exc:
            return {"database": f"unreachable: {exc.__class__.__name__}"}

    async def close(self) -> None:
        if self._locks is not None:
            await self._locks.close()
            self._locks = None
