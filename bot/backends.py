"""Which storage backend a process uses: ``DECKLOG_DATABASE_URL`` set → PostgreSQL, unset → SQLite files.

Called by ``Runtime.open`` (bot/runtime.py): the log store and the index, opened, on the same backend.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from adapters.slack.pacing import PaceSlots
from bot.settings import Settings
from core.alerts.rates import RateCounter
from core.alerts.route_locks import RouteLocks
from core.clock import Clock
from core.inbox import Inbox
from core.index import Index
from core.store import SqliteInbox, SqliteLogStore
from core.store.postgres import PostgresLogStore


async def open_backend(
    settings: Settings,
    data_dir: Path,
    clock: Clock,
    *,
    topics: Sequence[str],
    topic_kinds: Mapping[str, Collection[str]],
) -> tuple[SqliteLogStore | PostgresLogStore, Index]:
    """The log store and the index for ``settings``: the embedded default (SQLite under ``data_dir``) or the
    database at ``settings.database_url`` (schema created or checked now; a newer schema stops start-up)."""
    log_key = settings.log_key.get_secret_value() if settings.log_key else None
    if settings.database_url:
        from core.index_postgres import PostgresIndex

        pg_store = PostgresLogStore(
            settings.database_url, topics=topics, topic_kinds=topic_kinds, clock=clock, log_key=log_key
        )
        try:
            await pg_store.open()
            pg_index = PostgresIndex(pg_store.engine, pg_store.executor)
            await pg_index.open()
        except BaseException:
            await pg_store.close()
            raise
        return pg_store, pg_index
    store = SqliteLogStore(data_dir, topics=topics, topic_kinds=topic_kinds, clock=clock, log_key=log_key)
    index = Index(data_dir / "index.db", store.executor)
    await index.open()
    return store, index


async def open_inbox(settings: Settings, store: SqliteLogStore | PostgresLogStore) -> Inbox:
    """The Slack inbox on the store's backend: ``DATA_DIR/inbox.db``, or the ``inbox`` table every replica shares
    (a retry landing on another replica is refused there: processed once)."""
    if isinstance(store, PostgresLogStore):
        from core.store.inbox_postgres import PostgresInbox

        return PostgresInbox(store.engine, store.executor)
    return await SqliteInbox.open(settings.data_dir)


def route_locks(store: SqliteLogStore | PostgresLogStore) -> RouteLocks | None:
    """The alert router's locks: across every replica on a shared database (advisory locks), else None (the
    router's own in-process locks: one process owns a SQLite data directory)."""
    return store.route_locks() if isinstance(store, PostgresLogStore) else None


def alert_rates(store: SqliteLogStore | PostgresLogStore) -> RateCounter | None:
    """The alert router's per-source arrivals across replicas (on a shared database), else None (the router's own
    in-memory limiter: one process owns a SQLite data directory)."""
    if not isinstance(store, PostgresLogStore):
        return None
    from core.store.postgres_rates import PostgresRateCounter

    return PostgresRateCounter(store)


def pace_slots(store: SqliteLogStore | PostgresLogStore) -> PaceSlots | None:
    """Slack's per-channel post slots across replicas (on a shared database), else None (one process paces)."""
    if not isinstance(store, PostgresLogStore):
        return None
    from core.store.postgres_pace import PostgresPaceSlots

    return PostgresPaceSlots(store)
