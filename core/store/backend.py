"""Which storage backend a process uses, chosen once from configuration: a database URL (``DECKLOG_DATABASE_URL``)
→ PostgreSQL, none → SQLite files under the data directory. The only place that names the backends; everything
else holds the ``StorageFactory`` it returns and types against the ports (core/store/ports.py)."""

from __future__ import annotations

from pathlib import Path

from decklog.core.store.ports import StorageFactory


def storage_for(*, database_url: str | None, data_dir: Path, log_key: str | bytes | None = None) -> StorageFactory:
    """The factory of the configured backend (nothing is opened yet)."""
    if database_url:
        from decklog.core.store.postgres.factory import PostgresFactory  # psycopg is loaded only for a database

        return PostgresFactory(database_url, log_key=log_key)
    from decklog.core.store.sqlite.factory import SqliteFactory

    return SqliteFactory(data_dir, log_key=log_key)
