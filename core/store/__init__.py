"""Durable storage: the per-scope log store and the SQLite plumbing under it."""

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
    "SqliteLogStore",
    "VerifyReport",
]
