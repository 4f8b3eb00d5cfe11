"""Durable storage: the per-scope log store, the inbox and the SQLite plumbing under them."""

from core.store.inbox_sqlite import SqliteInbox
from core.store.log_store import (
    AppendResult,
    Decide,
    LogStore,
    OutboxItem,
    OutboxSummary,
    ParkedItem,
    SqliteLogStore,
    VerifyReport,
)

__all__ = [
    "AppendResult",
    "Decide",
    "LogStore",
    "OutboxItem",
    "OutboxSummary",
    "ParkedItem",
    "SqliteInbox",
    "SqliteLogStore",
    "VerifyReport",
]
