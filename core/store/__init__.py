"""Durable storage: the per-scope log store, the inbox and the SQLite plumbing under them."""

from core.store.inbox_sqlite import SqliteInbox
from core.store.log_store import SqliteLogStore
from core.store.memory import MemoryLogStore
from core.store.ports import (
    AppendResult,
    CommitFeed,
    Decide,
    DeliveryStore,
    EntryLog,
    IndexPort,
    LogStore,
    Outbox,
    OutboxItem,
    OutboxSummary,
    ParkedItem,
    SenderMemos,
    VerifyReport,
)

__all__ = [
    "AppendResult",
    "CommitFeed",
    "Decide",
    "DeliveryStore",
    "EntryLog",
    "IndexPort",
    "LogStore",
    "MemoryLogStore",
    "Outbox",
    "OutboxItem",
    "OutboxSummary",
    "ParkedItem",
    "SenderMemos",
    "SqliteInbox",
    "SqliteLogStore",
    "VerifyReport",
]
